"""nki.simulate: outputs like AWS's, profile=True with Explorer fields and the timeline, chip choice."""

import os
import subprocess
import sys

import numpy as np
import pytest

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.profiler.summary import FIELDS

EXPLORER_FIELDS = [
    "total_time",
    "tensor_engine_active_time",
    "vector_engine_active_time",
    "scalar_engine_active_time",
    "gpsimd_engine_active_time",
    "dma_active_time",
    "tensor_engine_active_time_percent",
    "vector_engine_active_time_percent",
    "scalar_engine_active_time_percent",
    "gpsimd_engine_active_time_percent",
    "dma_active_time_percent",
    "tensor_engine_instruction_count",
    "vector_engine_instruction_count",
    "scalar_engine_instruction_count",
    "gpsimd_engine_instruction_count",
    "model_flops",
    "mfu_estimated_percent",
    "hbm_read_bytes",
    "hbm_write_bytes",
    "dma_transfer_count",
    "dma_transfer_total_bytes",
    "dma_transfer_average_bytes",
    "sbuf_peak_bytes",
    "psum_peak_bytes",
]


@nki.jit
def linear(x_t, w):
    """relu(x @ w) for x_t [K=128, M=128] (x transposed) and w [128, 512]."""
    out = nl.ndarray((x_t.shape[1], w.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    xs, ws = nl.load(x_t), nl.load(w)
    acc = nl.ndarray(out.shape, dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=xs, moving=ws)
    y = nl.ndarray(out.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=y, op=nl.relu, data=acc)  # line of the activation
    nl.store(out, y)
    return out


X = np.random.default_rng(0).standard_normal((128, 128), dtype=np.float32)
W = np.random.default_rng(1).standard_normal((128, 512), dtype=np.float32)


def test_outputs_are_numpy_arrays():
    out = nki.simulate(linear)(X, W)
    assert isinstance(out, np.ndarray) and out.shape == (128, 512) and out.dtype == np.float32
    np.testing.assert_allclose(out, np.maximum(X.T @ W, 0), rtol=1e-4, atol=1e-4)


def test_profile_summary_has_explorer_fields_and_units():
    out, prof = nki.simulate(linear, profile=True)(X, W)
    s = prof.summary
    assert set(EXPLORER_FIELDS) <= set(s) and set(FIELDS) <= set(s)
    assert 0 < s["total_time"] < 1e-3  # seconds
    assert s["model_flops"] == 2 * 128 * 128 * 512
    # one nc_matmul is two TensorE instructions, LoadStationary and MultiplyMoving, as profiles count
    assert s["tensor_engine_instruction_count"] == 2 and s["scalar_engine_instruction_count"] == 1
    assert s["dma_transfer_count"] == 3
    assert s["hbm_read_bytes"] == X.nbytes + W.nbytes and s["hbm_write_bytes"] == out.nbytes
    assert s["dma_transfer_total_bytes"] == X.nbytes + W.nbytes + out.nbytes
    assert s["dma_transfer_average_bytes"] == pytest.approx(s["dma_transfer_total_bytes"] / 3)
    assert s["sbuf_peak_bytes"] > 0 and s["psum_peak_bytes"] == 2048 * 128  # one PSUM bank
    assert 0 < s["mfu_estimated_percent"] < 100
    for e in ("tensor", "vector", "scalar", "gpsimd"):
        assert 0 <= s[f"{e}_engine_active_time_percent"] <= 100


def test_timeline_has_every_instruction_with_engine_times_and_line():
    _, prof = nki.simulate(linear, profile=True)(X, W)
    tl = prof.timeline
    assert [e.engine for e in tl] == ["dma", "dma", "tensor", "tensor", "scalar", "dma"]
    assert [e.opcode for e in tl if e.engine == "tensor"] == ["LOAD_STATIONARY", "NC_MATMUL"]
    assert all(e.end > e.start >= 0 for e in tl)
    assert max(e.end for e in tl) == pytest.approx(prof.summary["total_time"])
    act = tl[4]
    assert act.opcode == "ACTIVATION" and act.location.endswith(":" + str(_line("# line of the activation")))
    assert act.start >= tl[3].end  # waits for the matmul (RAW on PSUM)
    assert sum(prof.by_location().values()) == pytest.approx(sum(e.duration for e in tl))


def _line(marker):
    with open(__file__) as f:
        return next(i + 1 for i, line in enumerate(f) if marker in line and "_line(" not in line)


def test_chip_by_argument_and_environment():
    _, p2 = nki.simulate(linear, profile=True, chip="trn2")(X, W)
    _, p3 = nki.simulate(linear, profile=True, chip="trn3")(X, W)
    assert p2.chip == "trn2" and p3.chip == "trn3"
    code = (
        "import numpy as np, neuronsim.nki as nki, neuronsim.nki.language as nl\n"
        "@nki.jit\n"
        "def k(a):\n"
        "    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)\n"
        "    nl.store(out, nl.load(a))\n"
        "    return out\n"
        "print(nki.simulate(k, profile=True)(np.ones((128, 8), np.float32))[1].chip)\n"
    )
    env = dict(os.environ, NEURON_SIM_CHIP="trn3")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith("trn3")


def test_torch_tensors_in_torch_tensors_out():
    torch = pytest.importorskip("torch")
    out = nki.simulate(linear)(torch.from_numpy(X), torch.from_numpy(W))
    assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(out.numpy(), np.maximum(X.T @ W, 0), rtol=1e-4, atol=1e-4)


def test_inputs_written_by_the_kernel_are_updated_in_place():
    @nki.jit
    def bump(a):
        nl.store(a, nl.add(nl.load(a), 1.0))

    a = np.zeros((128, 4), np.float32)
    assert nki.simulate(bump)(a) is None
    assert np.all(a == 1.0)


def test_unwritten_outputs_are_nan_like_fresh_device_memory():
    @nki.jit
    def half(a):
        out = nl.ndarray((256, 4), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out[0:128, :], nl.load(a))
        return out

    out = nki.simulate(half)(np.ones((128, 4), np.float32))
    assert np.all(out[:128] == 1.0) and np.all(np.isnan(out[128:]))


def test_device_print_prints_values_when_the_kernel_runs(capsys):
    @nki.jit
    def show(a):
        t = nl.load(a)
        nl.device_print("tile a:", t)
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    nki.simulate(show)(np.full((2, 3), 4.5, np.float32))
    printed = capsys.readouterr().out
    assert printed.startswith("tile a:") and printed.count("4.5") == 6
