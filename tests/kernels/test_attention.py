"""Fused scaled dot-product attention (``neuronsim/kernels/attention.py``) against CPU's SDPA."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import DTYPES, ran_natively
from torch.nn.attention import SDPBackend, sdpa_kernel

from neuronsim.device import clock, dispatch, native
from neuronsim.kernels import op_overload

FWD = "aten::_scaled_dot_product_fused_attention_overrideable"
BWD = "aten::_scaled_dot_product_fused_attention_overrideable_backward"
CHOICE = "aten::_fused_sdp_choice.default"
TOL = {torch.float32: {"rtol": 1e-4, "atol": 1e-5}, torch.bfloat16: {"rtol": 2e-2, "atol": 2e-2}}


def _close(got: torch.Tensor, want: torch.Tensor, dtype):
    assert got.device.type == "neuron" and got.dtype == want.dtype and got.shape == want.shape
    got, want = got.cpu().float(), want.float()
    scale = want.abs().max().clamp(min=1.0)  # bf16: relative to the tensor's magnitude
    torch.testing.assert_close(got / scale, want / scale, **TOL[dtype])


def _leaves(*shapes, dtype):
    return [torch.randn(s, dtype=dtype, requires_grad=True) for s in shapes]


def _compare(q, k, v, dtype, backward=True, **kw):
    """SDPA forward (and backward) on the device against CPU on the same leaves."""
    mask = kw.get("attn_mask")
    ref = F.scaled_dot_product_attention(q, k, v, **kw)
    dev = [t.detach().to("neuron").requires_grad_(t.requires_grad) for t in (q, k, v)]
    if mask is not None:
        kw = {**kw, "attn_mask": mask.to("neuron")}
    out = F.scaled_dot_product_attention(*dev, **kw)
    _close(out, ref, dtype)
    if backward:
        g = torch.randn_like(ref)
        ref.backward(g)
        out.backward(g.to("neuron"))
        for d, c in zip(dev, (q, k, v), strict=True):
            _close(d.grad, c.grad, dtype)
    return out


CASES = {
    "plain": dict(q=(2, 3, 37, 24), kv=(2, 3, 53, 24)),
    "causal": dict(q=(1, 2, 200, 32), kv=(1, 2, 200, 32), is_causal=True),
    "causal_more_keys": dict(q=(1, 2, 70, 16), kv=(1, 2, 150, 16), is_causal=True),
    "long_keys": dict(q=(1, 1, 130, 64), kv=(1, 1, 600, 64)),
    "bool_mask": dict(q=(2, 2, 40, 16), kv=(2, 2, 77, 16), mask=("bool", (40, 77))),
    "float_mask": dict(q=(2, 2, 40, 16), kv=(2, 2, 77, 16), mask=("float", (2, 1, 40, 77))),
    "gqa": dict(q=(1, 4, 50, 32), kv=(1, 2, 45, 32), enable_gqa=True),
    "scale": dict(q=(1, 2, 30, 128), kv=(1, 2, 30, 128), scale=0.3),
    "three_d": dict(q=(3, 33, 16), kv=(3, 20, 16)),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_forward_and_backward_match_cpu(case, dtype):
    torch.manual_seed(0)
    spec = dict(CASES[case])
    qs, kvs, mask = spec.pop("q"), spec.pop("kv"), spec.pop("mask", None)
    q, k, v = _leaves(qs, kvs, kvs, dtype=dtype)
    if mask is not None:
        kind, shape = mask
        spec["attn_mask"] = torch.rand(shape) > 0.3 if kind == "bool" else torch.randn(shape, dtype=dtype)
    torch.neuron.clear_op_tracking()
    _compare(q, k, v, dtype, **spec)
    assert ran_natively(FWD) and ran_natively(BWD)
    assert not any("bmm" in op or "softmax" in op for op in torch.neuron.get_executed_ops())


def test_strided_views_and_an_expanded_grad():
    torch.manual_seed(1)
    # [B, L, H, E] projections viewed as [B, H, L, E], as attention modules do
    q, k, v = (torch.randn(2, 45, 3, 32, requires_grad=True) for _ in range(3))
    ref = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=True)
    dev = [t.detach().to("neuron").requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in dev), is_causal=True)
    _close(out, ref, torch.float32)
    ref.sum().backward()  # sum's grad is an expanded (stride 0) ones
    out.sum().backward()
    for d, c in zip(dev, (q, k, v), strict=True):
        _close(d.grad, c.grad, torch.float32)
    assert ran_natively(BWD)


def test_a_fully_masked_row_gives_zeros_and_zero_grads():
    q, k, v = _leaves((1, 1, 6, 8), (1, 1, 9, 8), (1, 1, 9, 8), dtype=torch.float32)
    mask = torch.rand(6, 9) > 0.5
    mask[2] = False
    mask[3] = True
    out = _compare(q, k, v, torch.float32, attn_mask=mask)
    assert torch.equal(out[0, 0, 2].cpu(), torch.zeros(8)) and ran_natively(FWD)


def test_inference_mode_runs_the_fused_kernel():
    q = torch.randn(1, 2, 20, 16)
    with torch.inference_mode():
        out = F.scaled_dot_product_attention(*(q.to("neuron"),) * 3)
    _close(out, F.scaled_dot_product_attention(q, q, q), torch.float32)
    assert ran_natively(FWD)


def test_the_backend_choice_names_overrideable_only_for_covered_calls():
    q = torch.randn(1, 2, 16, 8, device="neuron")
    choice = torch.ops.aten._fused_sdp_choice
    assert choice(q, q, q) == int(SDPBackend.OVERRIDEABLE)
    assert choice(q, q, q, dropout_p=0.1) == int(SDPBackend.MATH)
    assert choice(q.double(), q.double(), q.double()) == int(SDPBackend.MATH)
    assert choice(q[:, :1], q, q) == int(SDPBackend.MATH)  # fewer query heads than KV heads
    assert choice(q, q[:, :1], q[:, :1]) == int(SDPBackend.MATH)  # GQA heads without enable_gqa
    assert choice(q, q[:, :1], q[:, :1], enable_gqa=True) == int(SDPBackend.OVERRIDEABLE)
    wide = torch.randn(1, 2, 16, 160, device="neuron")
    assert choice(wide, wide, wide) == int(SDPBackend.MATH)
    with sdpa_kernel(SDPBackend.MATH):
        assert choice(q, q, q) == int(SDPBackend.MATH)


@pytest.mark.parametrize("uncovered", ["head_dim", "mask_grad", "math_only", "float16"])
def test_uncovered_calls_keep_the_math_path(uncovered):
    torch.manual_seed(2)
    dtype = torch.float16 if uncovered == "float16" else torch.float32
    e = 160 if uncovered == "head_dim" else 16
    q, k, v = _leaves((1, 2, 12, e), (1, 2, 10, e), (1, 2, 10, e), dtype=dtype)
    kw = {}
    if uncovered == "mask_grad":
        kw["attn_mask"] = torch.randn(12, 10, requires_grad=True)
    if uncovered == "math_only":
        with sdpa_kernel(SDPBackend.MATH):
            _compare(q, k, v, dtype)
    elif uncovered == "float16":
        _compare(q, k, v, torch.bfloat16, backward=False)  # bf16 tolerance for the fp16 math path
    else:
        _compare(q, k, v, dtype, **kw)
    assert not ran_natively(FWD) and not ran_natively(BWD)


def test_invalid_calls_raise_torchs_errors():
    q = torch.randn(1, 2, 8, 16, device="neuron")
    with pytest.raises(RuntimeError, match="same dtype"):
        F.scaled_dot_product_attention(q, q.bfloat16(), q)
    with pytest.raises(RuntimeError, match="attn_mask should not be set"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(8, 8, dtype=torch.bool, device="neuron"),
                                       is_causal=True)
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, q[..., :8], q)  # head dims differ


def _device_ns(fn) -> float:
    c = clock.clock(0)
    start = c.now_ns
    fn()
    return c.now_ns - start


def test_the_fused_kernel_beats_the_math_path_and_keeps_scores_off_hbm():
    T = 256
    q, k, v = (torch.randn(1, 2, T, 64, device="neuron", requires_grad=True) for _ in range(3))
    g = torch.randn(1, 2, T, 64, device="neuron")

    def step():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g)

    step()  # trace the Programs
    fused = _device_ns(step)
    assert ran_natively(FWD) and ran_natively(BWD)
    op = op_overload(CHOICE)
    kernel = dispatch.NATIVE_KERNELS[op]
    dispatch.unregister_native_kernel(op)  # the host answers the choice: the math path
    try:
        torch.neuron.clear_op_tracking()
        step()
        math_path = _device_ns(step)
    finally:
        dispatch.register_native_kernel(op, kernel)
    assert not ran_natively(FWD) and ran_natively("aten::bmm")
    assert fused < math_path / 2
    for name in (FWD, BWD):
        entries = [e for e in native.entries(name + ".default").values() if not native.is_declined(e)]
        entry = next(e for e in entries if e.output_specs[0][0] == (1, 2, T, 64))
        # every HBM tensor of the Program is an operand, each smaller than one head's scores
        assert max(math.prod(t.shape) for t in entry.program.hbm_tensors()) < T * T


def test_cost_scales_with_the_sequence():
    def fwd_ns(T):
        q = torch.randn(1, 1, T, 64, device="neuron")
        F.scaled_dot_product_attention(q, q, q)
        entries = native.entries(FWD + ".default").values()
        return next(e for e in entries if not native.is_declined(e) and e.output_specs[0][0][2] == T
                    ).prepared.timeline.total_ns

    small, large = fwd_ns(128), fwd_ns(512)
    assert 3 * small < large < 40 * small  # 16x the scores: between linear and quadratic


def test_training_through_sdpa_matches_cpu():
    torch.manual_seed(3)

    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(32, 96)

        def forward(self, x):
            q, k, v = self.qkv(x).view(2, 20, 3, 2, 16).permute(2, 0, 3, 1, 4)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True).square().mean()

    cpu = Attn()
    dev = Attn().to("neuron")
    dev.load_state_dict(cpu.state_dict())
    x = torch.randn(2, 20, 32)
    for model, inp in ((cpu, x), (dev, x.to("neuron"))):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            model(inp).backward()
            opt.step()
    for a, b in zip(dev.parameters(), cpu.parameters(), strict=True):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-4, atol=1e-5)
    assert ran_natively(BWD)


@pytest.mark.parametrize("opts", [{"numerics": "fast"}, {"executor": "reference"}])
def test_fast_numerics_and_the_reference_executor_run_the_program(opts):
    """The fused ops have no ATen-CPU kernel: fast numerics still runs their Program (Launch.result),
    and the reference executor computes what the Numba one does."""
    import neuronsim

    torch.manual_seed(4)
    q, k, v = _leaves((1, 2, 21, 8), (1, 2, 19, 8), (1, 2, 19, 8), dtype=torch.float32)
    with neuronsim.options(**opts):
        _compare(q, k, v, torch.float32, is_causal=True)
    assert ran_natively(FWD) and ran_natively(BWD)
