"""``torch.arange`` on the device: ``arange.start_out`` as a GpSimd iota kernel (neuronsim/kernels/
factory.py), and the registry's ``out=`` path that resizes the ``out`` tensor first."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from kernel_checks import assert_matches_cpu, ran_natively

import neuronsim
from neuronsim.device import native
from neuronsim.sim.ir import Memory

OP = "aten::arange.start_out"

# (start, end, step): lengths 1, odd, not multiples of 128, one full tile plus tails, > 64K elements
INT_RANGES = [
    (0, 1, 1), (0, 10, 1), (0, 129, 1), (-5, 200, 3), (7, -300, -2), (-1000, 70000, 1),
    (0, 300_000, 1), (100, -100, -7), (-(2**31), -(2**31) + 1000, 5), (2**31 - 1000, 2**31 - 1, 9),
]
FLOAT_RANGES = [
    (0, 1, 0.1), (-3.7, 500.1, 0.013), (1.5, -2.0, -0.37), (0.25, 777.0, 0.75), (-2.0, 2.0, 2**-10),
]
INTEGRAL_FLOAT_RANGES = [(0, 10, 1), (-130, 300_000, 1), (5.0, -250.0, -3.0), (0, 2**20, 4)]


def _native(fn):
    torch.neuron.clear_op_tracking()
    result = fn()
    assert ran_natively(OP), torch.neuron.get_fallback_ops()
    assert torch.neuron.get_fallback_ops() == []
    return result


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("start,end,step", INT_RANGES)
def test_integer_ranges_are_exact(start, end, step, dtype):
    got = _native(lambda: torch.arange(start, end, step, dtype=dtype, device="neuron"))
    want = torch.arange(start, end, step, dtype=dtype)
    assert got.dtype == dtype and torch.equal(got.cpu(), want)


def test_default_dtypes_follow_atens_type_promotion():
    got = _native(lambda: torch.arange(37, device="neuron"))  # int64: the position ids of a model
    assert torch.equal(got.cpu(), torch.arange(37))
    got = _native(lambda: torch.arange(0, 1, 0.1, device="neuron"))  # the default float dtype
    assert_matches_cpu(got, torch.arange(0, 1, 0.1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("start,end,step", INTEGRAL_FLOAT_RANGES)
def test_integral_float_ranges_are_exact(start, end, step, dtype):
    got = _native(lambda: torch.arange(start, end, step, dtype=dtype, device="neuron"))
    exact = torch.arange(start, end, step, dtype=torch.float64)
    assert torch.equal(got.cpu(), exact.to(dtype))  # correctly rounded (fp32: exact)
    # ATen-CPU's bf16 adds the step to bf16-rounded partial sums: it may be an ulp off
    assert_matches_cpu(got, torch.arange(start, end, step, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("start,end,step", FLOAT_RANGES)
def test_fractional_steps_match_cpu(start, end, step, dtype):
    got = _native(lambda: torch.arange(start, end, step, dtype=dtype, device="neuron")).cpu()
    want = torch.arange(start, end, step, dtype=dtype)
    assert got.shape == want.shape
    # fp32 arithmetic: an ulp or two of the largest |i * step| (ATen-CPU computes in double)
    scale = max(abs(start), abs(end - start))
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(got.double(), want.double(), rtol=2 * eps, atol=2 * eps * scale)
    exact = start + step * torch.arange(len(want), dtype=torch.float64)
    torch.testing.assert_close(got.double(), exact, rtol=eps, atol=2 * eps * scale)


def test_a_length_is_traced_once_and_a_new_length_works():
    cache = native.entries(OP)
    torch.arange(1000, device="neuron")
    before = len(cache)
    for _ in range(3):
        assert torch.equal(_native(lambda: torch.arange(1000, device="neuron")).cpu(), torch.arange(1000))
    assert len(cache) == before
    assert torch.equal(_native(lambda: torch.arange(1001, device="neuron")).cpu(), torch.arange(1001))
    assert len(cache) == before + 1


def test_simulated_time_grows_with_the_bytes_written():
    cache = native.entries(OP)
    times = {}
    for n in (1 << 10, 1 << 21):
        torch.arange(n, dtype=torch.float32, device="neuron")
        (entry,) = [e for k, e in cache.items() if not native.is_declined(e)
                    and e.output_specs[0][0] == (n,) and e.output_specs[0][2] is torch.float32]
        times[n] = entry.duration_ns
        accesses = [(ap.tensor.memory, w) for ins in entry.program.instructions for ap, w in ins.accesses()]
        assert (Memory.HBM, True) in accesses and (Memory.HBM, False) not in accesses  # writes HBM only
    assert times[1 << 21] > 20 * times[1 << 10]


def test_an_empty_out_is_resized_and_a_right_sized_one_is_written_in_place():
    out = torch.empty(0, dtype=torch.int64, device="neuron")
    r = _native(lambda: torch.arange(3, 300, 2, out=out))
    assert r is out and out.shape == (149,) and torch.equal(out.cpu(), torch.arange(3, 300, 2))
    # strided out of the right size: written through its stride, the gaps untouched
    base = torch.full((40,), -1.0, device="neuron")
    view = base[::2]
    r = _native(lambda: torch.arange(0.5, 20.5, 1.0, out=view))
    assert r is view and view.stride() == (2,)
    want = torch.full((40,), -1.0)
    want[::2] = torch.arange(0.5, 20.5, 1.0)
    assert torch.equal(base.cpu(), want)


@pytest.mark.parametrize("size,native", [((5,), True), ((64,), True), ((2, 5), False)])
def test_a_wrong_sized_out_is_resized_as_on_cpu(size, native):
    """A non-empty ``out`` with another element count is resized (ATen warns that this is
    deprecated); one with the right count keeps its shape on the CPU, so the host writes it."""
    out, cpu_out = torch.zeros(size, device="neuron"), torch.zeros(size)
    torch.neuron.clear_op_tracking()
    with pytest.warns(UserWarning, match="resized"):
        torch.arange(0, 10, 1, out=out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        torch.arange(0, 10, 1, out=cpu_out)
    assert ran_natively(OP) is native
    assert out.shape == cpu_out.shape
    assert_matches_cpu(out, cpu_out)


def test_the_reference_executor_and_fast_numerics_agree():
    want = torch.arange(-7, 5000, 3)
    with neuronsim.options(executor="reference"):
        assert torch.equal(_native(lambda: torch.arange(-7, 5000, 3, device="neuron")).cpu(), want)
    with neuronsim.options(numerics="fast"):
        out = torch.empty(0, dtype=torch.int64, device="neuron")
        assert torch.equal(_native(lambda: torch.arange(-7, 5000, 3, out=out)).cpu(), want)
        assert out.shape == want.shape


@pytest.mark.parametrize("call", [
    lambda d: torch.arange(0, 10, 0, device=d),
    lambda d: torch.arange(10, 0, 1, device=d),
    lambda d: torch.arange(0, math.inf, device=d),
    lambda d: torch.arange(0, math.nan, device=d),
])
def test_invalid_ranges_raise_torchs_error(call):
    with pytest.raises(RuntimeError) as cpu:
        call("cpu")
    with pytest.raises(RuntimeError) as dev:
        call("neuron")
    assert str(dev.value) == str(cpu.value)


@pytest.mark.parametrize("call", [
    lambda d: torch.arange(5, 5, device=d),  # empty
    lambda d: torch.arange(0, 10, dtype=torch.uint8, device=d),  # no uint8 iota here
    lambda d: torch.arange(0.5, 5, dtype=torch.int32, device=d),  # ATen truncates the scalars first
    lambda d: torch.arange(0, 10, dtype=torch.float64, device=d),  # the 64-bit policy's host path
])
def test_uncovered_signatures_fall_back_with_atens_values(call):
    torch.neuron.clear_op_tracking()
    got = call("neuron")
    assert not ran_natively(OP) and OP in torch.neuron.get_fallback_ops()
    assert torch.equal(got.cpu(), call("cpu"))
