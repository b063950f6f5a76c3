"""The NKI kernels: right values, and performance gates on their simulated profiles.

``nki`` resolves to neuronsim's under ``pytest --neuron-sim``; without it these tests are skipped.
"""

import numpy as np
import pytest

nki = pytest.importorskip("nki", reason="the NKI kernels need nki: run pytest --neuron-sim")

import ml_dtypes  # noqa: E402
from kernelpack import kernels  # noqa: E402

from neuronsim.nki import simulate  # noqa: E402

pytestmark = pytest.mark.neuron_sim


def test_rmsnorm(neuron_perf):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 512), dtype=np.float32)
    gamma = rng.standard_normal(512, dtype=np.float32)
    out, profile = simulate(kernels.rmsnorm, profile=True)(x, gamma)

    want = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * gamma
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    # the same time as the stored baseline, exactly; each row read and written once; VectorE busy
    # over a third of the time (ScalarE's share includes its activation-table load)
    neuron_perf.check(profile, baseline="rmsnorm", budget_us=15,
                      bounds={"hbm_read_bytes": (None, x.nbytes + 128 * gamma.nbytes), "vector": (35, None)})


def test_matmul(neuron_perf):
    rng = np.random.default_rng(1)
    lhsT = rng.standard_normal((512, 512), dtype=np.float32).astype(ml_dtypes.bfloat16)
    rhs = rng.standard_normal((512, 1024), dtype=np.float32).astype(ml_dtypes.bfloat16)
    out, profile = simulate(kernels.matmul, profile=True)(lhsT, rhs)

    want = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    np.testing.assert_allclose(out.astype(np.float32), want, rtol=2e-2, atol=0.5)
    # the stationary operand is read once, the moving one once per 256-row block of the output
    blocks = 512 // 256
    most = lhsT.nbytes + blocks * rhs.nbytes
    neuron_perf.check(profile, baseline="matmul", tolerance_pct=1,
                      bounds={"hbm_read_bytes": (None, most), "tensor": (25, None)})
