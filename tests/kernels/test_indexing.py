"""index_select, embedding_dense_backward, masked_fill and where against ATen-CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import DTYPES, assert_matches_cpu, ran_natively

import neuronsim.kernels.indexing  # noqa: F401  (registers the real kernels)
from neuronsim.device import native

aten = torch.ops.aten
EXACT = {"rtol": 0, "atol": 0}


def _dev(*ts):
    return [t.to("neuron") for t in ts]


def _native_ns(name: str, shape) -> float:
    (entry,) = [e for e in native.entries(name).values()
                if not native.is_declined(e) and e.output_specs[0][0] == tuple(shape)]
    return entry.prepared.timeline.total_ns


# ---------------------------------------------------------------- index_select


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("v,d,n", [(64, 32, 64), (300, 70, 200), (1000, 600, 130)])
def test_index_select_gathers_rows_exactly(v, d, n, dtype):
    torch.manual_seed(0)
    table, index = torch.randn(v, d).to(dtype), torch.randint(0, v, (n,))
    index[:3] = torch.tensor([0, v - 1, v - 1])  # both ends of the table, and a repeat
    got = aten.index_select(*_dev(table), 0, *_dev(index))
    assert ran_natively("aten::index_select") and torch.neuron.get_fallback_ops() == []
    assert_matches_cpu(got, aten.index_select(table, 0, index), **EXACT)


def test_index_select_streams_a_table_too_big_for_sbuf():
    torch.manual_seed(1)
    table, index = torch.randn(2100, 1100), torch.randint(0, 2100, (20,))  # 74 KiB per partition
    got = aten.index_select(*_dev(table), 0, *_dev(index))
    assert ran_natively("aten::index_select")
    assert_matches_cpu(got, aten.index_select(table, 0, index), **EXACT)


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_index_select_along_any_dim_of_views(dim):
    torch.manual_seed(2)
    base = torch.randn(6, 40, 9)
    table = base.transpose(0, 2)  # [9, 40, 6], non-contiguous
    n = table.shape[dim]
    index = torch.randint(0, n, (2 * n + 1,))[::2]  # a strided index view
    got = aten.index_select(*_dev(table), dim, *_dev(index))
    assert ran_natively("aten::index_select")
    assert_matches_cpu(got, aten.index_select(table, dim, index), **EXACT)


def test_index_select_takes_int32_and_0dim_indices():
    table = torch.randn(50, 8)
    for index in (torch.tensor([4, 49, 0], dtype=torch.int32), torch.tensor(7)):
        torch.neuron.clear_op_tracking()
        got = aten.index_select(table.to("neuron"), 0, index.to("neuron"))
        assert ran_natively("aten::index_select")
        assert_matches_cpu(got, aten.index_select(table, 0, index), **EXACT)


@pytest.mark.parametrize("bad", [50, -1])
def test_index_select_out_of_range_raises_torchs_error(bad):
    table = torch.randn(50, 8)
    index = torch.tensor([1, bad, 2])
    with pytest.raises(IndexError) as cpu:
        aten.index_select(table, 0, index)
    with pytest.raises(IndexError) as dev:
        aten.index_select(*_dev(table), 0, *_dev(index))
    assert str(dev.value) == str(cpu.value)
    # and the signature still runs natively on valid values
    torch.neuron.clear_op_tracking()
    good = torch.tensor([1, 49, 2])
    assert_matches_cpu(aten.index_select(*_dev(table), 0, *_dev(good)), table[good], **EXACT)
    assert ran_natively("aten::index_select")


def test_index_select_of_a_table_with_inf_or_nan_runs_on_the_host():
    """0 * inf is NaN in the one-hot matmul: such a call is computed by ATen instead."""
    table = torch.randn(20, 4)
    table[3, 1], table[5, 2] = float("inf"), float("nan")
    index = torch.tensor([3, 5, 0, 3])
    got = aten.index_select(*_dev(table), 0, *_dev(index))
    assert "aten::index_select" in torch.neuron.get_fallback_ops()
    torch.testing.assert_close(got.cpu(), table[index], rtol=0, atol=0, equal_nan=True)


def test_index_select_of_int_tables_and_huge_vocabularies_falls_back():
    for table in (torch.arange(40).reshape(10, 4).int(), torch.randn(9000, 2)):
        torch.neuron.clear_op_tracking()
        index = torch.tensor([0, 9])
        got = aten.index_select(*_dev(table), 0, *_dev(index))
        assert "aten::index_select" in torch.neuron.get_fallback_ops()
        assert torch.equal(got.cpu(), table[index])


def test_embedding_forward_and_backward_are_native():
    torch.manual_seed(3)
    emb = torch.nn.Embedding(64, 32, padding_idx=5)
    idx = torch.randint(0, 64, (4, 16))
    idx[0, :4] = 5
    ref = emb(idx)
    (ref * torch.arange(32.0)).sum().backward()
    dev_emb = torch.nn.Embedding(64, 32, padding_idx=5).to("neuron")
    dev_emb.load_state_dict(emb.state_dict())
    torch.neuron.clear_op_tracking()
    out = dev_emb(idx.to("neuron"))
    (out * torch.arange(32.0, device="neuron")).sum().backward()
    assert ran_natively("aten::index_select") and ran_natively("aten::embedding_dense_backward")
    assert_matches_cpu(out, ref.detach(), **EXACT)
    assert_matches_cpu(dev_emb.weight.grad, emb.weight.grad)
    assert not dev_emb.weight.grad.cpu()[5].any()


def test_index_select_time_scales_with_indices():
    table = torch.randn(256, 512, device="neuron")
    for n in (128, 1024):
        table.index_select(0, torch.randint(0, 256, (n,), device="neuron"))
    small, big = _native_ns("aten::index_select", (128, 512)), _native_ns("aten::index_select", (1024, 512))
    assert 3 < big / small < 10, (small, big)


# ---------------------------------------------------------------- embedding_dense_backward


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("v,d,tokens,padding", [(64, 32, (4, 16), -1), (300, 70, (3, 70), 3),
                                                (700, 1100, (260,), 699)])
def test_embedding_dense_backward_sums_grad_rows(v, d, tokens, padding, dtype):
    torch.manual_seed(4)
    grad, index = torch.randn(*tokens, d).to(dtype), torch.randint(0, v, tokens)
    index.view(-1)[:4] = torch.tensor([padding % v, 0, 0, v - 1])
    got = aten.embedding_dense_backward(*_dev(grad, index), v, padding, False)
    assert ran_natively("aten::embedding_dense_backward") and torch.neuron.get_fallback_ops() == []
    want = aten.embedding_dense_backward(grad, index, v, padding, False)
    if dtype == torch.float32:
        assert_matches_cpu(got, want, rtol=1e-5, atol=1e-5)
    else:  # PSUM sums in fp32 and rounds once; ATen adds in bf16
        fp32 = aten.embedding_dense_backward(grad.float(), index, v, padding, False)
        assert_matches_cpu(got, fp32.to(dtype), rtol=2**-8, atol=1e-6)
        assert_matches_cpu(got, want, rtol=2**-5, atol=2**-4)


def test_embedding_dense_backward_of_views_and_int32_indices():
    torch.manual_seed(5)
    grad = torch.randn(3, 40, 50)[..., 10:34]  # [3, 40, 24], rows 50 apart
    index = torch.randint(0, 30, (3, 40), dtype=torch.int32)
    got = aten.embedding_dense_backward(*_dev(grad, index), 30, -1, False)
    assert ran_natively("aten::embedding_dense_backward")
    assert_matches_cpu(got, aten.embedding_dense_backward(grad, index, 30, -1, False), rtol=1e-5, atol=1e-5)
    # rows that are not one walk (a transposed grad) are the host's
    torch.neuron.clear_op_tracking()
    grad_t = torch.randn(40, 3, 24).transpose(0, 1)
    got = aten.embedding_dense_backward(*_dev(grad_t, index), 30, -1, False)
    assert "aten::embedding_dense_backward" in torch.neuron.get_fallback_ops()
    assert_matches_cpu(got, aten.embedding_dense_backward(grad_t, index, 30, -1, False))


def test_embedding_dense_backward_falls_back_where_it_must():
    grad, index = torch.randn(6, 4), torch.tensor([0, 1, 1, 2, 3, 1])
    got = aten.embedding_dense_backward(*_dev(grad, index), 5, -1, True)  # scale_grad_by_freq
    assert_matches_cpu(got, aten.embedding_dense_backward(grad, index, 5, -1, True))
    grad[2, 1] = float("inf")  # 0 * inf in the one-hot matmul: the host computes it
    got = aten.embedding_dense_backward(*_dev(grad, index), 5, -1, False)
    want = aten.embedding_dense_backward(grad, index, 5, -1, False)
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)
    assert not ran_natively("aten::embedding_dense_backward")


# ---------------------------------------------------------------- masked_fill and where


def _special(shape, dtype, seed=6):
    torch.manual_seed(seed)
    x = torch.randn(shape)
    flat = x.view(-1)
    flat[:4] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [*DTYPES, torch.int32, torch.bool])
def test_masked_fill_scalar_in_place_and_functional(dtype):
    x = _special((7, 130), torch.float32)
    x = (x * 1000).nan_to_num(0).to(dtype) if dtype in (torch.int32, torch.bool) else x.to(dtype)
    if dtype is torch.int32:
        x[0, :2] = torch.tensor([2**31 - 1, -(2**31)], dtype=torch.int32)  # beyond fp32's 2**24
    mask = torch.rand(7, 130) > 0.5
    value = {torch.int32: 2**30 + 1, torch.bool: True}.get(dtype, -float("inf"))
    want = x.masked_fill(mask, value)
    got = x.to("neuron").masked_fill(mask.to("neuron"), value)
    assert ran_natively("aten::masked_fill_.Scalar")
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(got.cpu().view(-1)[3:4].float().signbit(), want.view(-1)[3:4].float().signbit())
    y = x.to("neuron")
    y.masked_fill_(mask.to("neuron"), value)
    torch.testing.assert_close(y.cpu(), want, rtol=0, atol=0, equal_nan=True)


def test_masked_fill_broadcasts_the_mask_over_views():
    torch.manual_seed(7)
    att = torch.randn(2, 3, 16, 16)[..., ::1].transpose(-1, -2)
    causal = torch.tril(torch.ones(16, 16, dtype=torch.bool))
    got = att.to("neuron").masked_fill(~causal.to("neuron"), float("-inf"))
    assert ran_natively("aten::masked_fill_.Scalar")
    assert_matches_cpu(got, att.masked_fill(~causal, float("-inf")), **EXACT)


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_fill_tensor_value(dtype):
    x, mask = _special((5, 33), dtype), torch.rand(5, 33) > 0.3
    for value in (torch.tensor(0.1), torch.tensor(2.5, dtype=dtype)):
        torch.neuron.clear_op_tracking()
        got = x.to("neuron").masked_fill(mask.to("neuron"), value.to("neuron"))
        assert ran_natively("aten::masked_fill_.Tensor")
        torch.testing.assert_close(got.cpu(), x.masked_fill(mask, value), rtol=0, atol=0, equal_nan=True)
        got = x.to("neuron").masked_fill(mask.to("neuron"), value)  # a CPU scalar: a constant
        torch.testing.assert_close(got.cpu(), x.masked_fill(mask, value), rtol=0, atol=0, equal_nan=True)


def test_masked_fill_errors_are_torchs():
    x, mask = torch.randn(4, 5), torch.rand(4, 5) > 0.5
    with pytest.raises(RuntimeError, match="boolean masks"):
        x.to("neuron").masked_fill(mask.float().to("neuron"), 1.0)
    with pytest.raises(RuntimeError):
        x.to("neuron").masked_fill(torch.ones(3, 5, dtype=torch.bool, device="neuron"), 1.0)


@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                    (torch.bfloat16, torch.float32), (torch.int32, torch.int32)])
def test_where_selects_exactly_with_broadcasting(dtypes):
    torch.manual_seed(8)
    a = _special((6, 1, 50), torch.float32)
    b = _special((3, 50), torch.float32, seed=9)
    if dtypes[0] is torch.int32:
        a, b = (a * 1e6).nan_to_num(0, 2**31 - 1, -(2**31)), (b * 1e6).nan_to_num(0, 7, -7)
    a, b = a.to(dtypes[0]), b.to(dtypes[1])
    cond = torch.rand(6, 3, 1) > 0.5
    got = torch.where(*_dev(cond, a, b))
    assert ran_natively("aten::where.self") and torch.neuron.get_fallback_ops() == []
    torch.testing.assert_close(got.cpu(), torch.where(cond, a, b), rtol=0, atol=0, equal_nan=True)


def test_where_with_scalars():
    x, cond = _special((9, 20), torch.bfloat16), torch.rand(9, 20) > 0.5
    for args in ((cond, x, 0.0), (cond, -1.5, x)):
        torch.neuron.clear_op_tracking()
        got = torch.where(*(a.to("neuron") if isinstance(a, torch.Tensor) else a for a in args))
        assert ran_natively("aten::where.self")
        torch.testing.assert_close(got.cpu(), torch.where(*args), rtol=0, atol=0, equal_nan=True)
    got = aten.where.self(*_dev(cond, x), torch.tensor(2.0))  # a CPU 0-dim other: a constant
    want = aten.where.self(cond, x, torch.tensor(2.0))
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)


def test_where_in_softmax_attention_matches_cpu():
    torch.manual_seed(10)
    q = torch.randn(2, 8, 16)
    mask = torch.tril(torch.ones(8, 8, dtype=torch.bool))
    att = (q @ q.transpose(1, 2)).masked_fill(~mask, float("-inf"))
    want = F.softmax(torch.where(mask, att, torch.tensor(float("-inf"))), -1)
    got = F.softmax(torch.where(mask.to("neuron"), att.to("neuron"), torch.tensor(float("-inf"))), -1)
    assert ran_natively("aten::where.self")
    assert_matches_cpu(got, want)


# ---------------------------------------------------------------- gather


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim,k", [((37, 10), 1, 1), ((300, 64), -1, 5), ((3, 20, 130), 1, 7),
                                         ((50, 6), 0, 3)])
def test_gather_matches_cpu(shape, dim, k, dtype):
    torch.manual_seed(11)
    x = _special(shape, dtype)
    index_shape = list(shape)
    index_shape[dim] = k
    index = torch.randint(0, shape[dim], index_shape)
    got = torch.gather(*_dev(x), dim, *_dev(index))
    assert ran_natively("aten::gather") and torch.neuron.get_fallback_ops() == []
    torch.testing.assert_close(got.cpu(), torch.gather(x, dim, index), rtol=0, atol=0, equal_nan=True)


def test_gather_with_a_smaller_index_and_views():
    x = torch.randn(40, 30).t()  # [30, 40] non-contiguous
    index = torch.randint(0, 40, (20, 6))  # fewer rows than x: gather allows it
    got = torch.gather(x.to("neuron"), 1, index.to("neuron"))
    assert ran_natively("aten::gather")
    assert_matches_cpu(got, torch.gather(x, 1, index), **EXACT)


def test_gather_out_of_range_raises_torchs_error():
    x, index = torch.randn(4, 5), torch.tensor([[0], [5], [1], [2]])
    with pytest.raises(RuntimeError) as cpu:
        torch.gather(x, 1, index)
    with pytest.raises(RuntimeError) as dev:
        torch.gather(x.to("neuron"), 1, index.to("neuron"))
    assert str(dev.value) == str(cpu.value)


def test_embedding_dense_backward_of_a_broadcast_index():
    """BERT's position and token-type ids are ``buffer[:, :seq].expand(batch, -1)``: stride 0 rows."""
    torch.manual_seed(12)
    grad = torch.randn(4, 16, 32)
    index = torch.randint(0, 20, (1, 16)).expand(4, 16)
    got = aten.embedding_dense_backward(*_dev(grad, index), 20, -1, False)
    assert ran_natively("aten::embedding_dense_backward") and torch.neuron.get_fallback_ops() == []
    assert_matches_cpu(got, aten.embedding_dense_backward(grad, index, 20, -1, False), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_gather_of_integer_rows_moves_bytes_by_the_indirect_dma(dtype):
    torch.manual_seed(13)
    x = torch.randint(-2**40, 2**40, (5, 7, 3)).to(dtype)
    index = torch.randint(0, 7, (4, 9, 2))
    got = torch.gather(*_dev(x), 1, *_dev(index))
    assert ran_natively("aten::gather") and torch.neuron.get_fallback_ops() == []
    assert torch.equal(got.cpu(), torch.gather(x, 1, index))
    ids = torch.arange(32).view(1, 32)  # BERT's token_type_ids buffer gathered by position_ids
    assert torch.equal(torch.gather(ids.to("neuron"), 1, ids[:, :16].to("neuron")).cpu(), ids[:, :16])


def test_gather_of_long_float_rows_uses_the_indirect_dma():
    torch.manual_seed(14)
    x, index = _special((3, 5000), torch.float32), torch.randint(0, 5000, (3, 100))
    got = torch.gather(*_dev(x), 1, *_dev(index))
    assert ran_natively("aten::gather") and torch.neuron.get_fallback_ops() == []
    assert torch.equal(got.cpu().view(torch.int32), torch.gather(x, 1, index).view(torch.int32))
