"""Integer and boolean reductions, scans and membership, exact in 32 bits: ``sum`` of integers and
bools, ``amax``/``amin``/``max``/``min`` of integers, ``any``/``all`` of any dtype, ``cumsum`` of
integers and bools, and ``isin`` — what ``generate()``'s bookkeeping and attention masks run.

VectorE folds in fp32, exact only up to 2^24, so integers fold on GpSimd, whose 32-bit integer ALU is
exact (``tensor_tensor`` with int32 tiles): a ``[p, f]`` tile folds along the free dim as a halving
tree (``t[:, :h] op= t[:, n-h:n]``, ceil(log2 f) instructions), the kept elements on the partitions
(``reduction.py``'s ``rows`` layout and batched stores). ``cumsum`` is a Hillis-Steele scan, log2(n)
shifted adds between two tiles. ``isin`` compares each tile with every test element (broadcast to
the partitions by a stride-0 DMA) and ORs the answers: on GpSimd's integer ALU for integers, on
VectorE in fp32 for floats (exact for every float32/bfloat16/float16 value).

The 64-bit policy (``device/dtype_policy.py``): int64 computes in 32 bits, as the host does when it
narrows. An int64 operand is read as its low words and an int64 result written with its sign words
(``elementwise.py``), so results match the host's narrowed ones — including sums, which accumulate in
int32 and wrap past 2^31 as the policy's 32-bit arithmetic does. ``any``/``all`` test ``x != 0``
(fp32 keeps every nonzero integer nonzero). Floats' sums, max and min are ``reduction.py``'s.
"""

from __future__ import annotations

import dataclasses
import math

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.elementwise import SMALL_INTS, high_words, low_words
from neuronsim.kernels.reduction import (
    MAX_STEPS,
    Reduction,
    _batches,
    _longest_last,
    plan_layout,
    store_columns,
)
from neuronsim.kernels.registry import IN, OUT, Call, Declined, Launch, native
from neuronsim.kernels.tiling import elementwise_tiles
from neuronsim.sim.ir import AluOp

A = AluOp
I32 = nl.int32
INTS = (*SMALL_INTS, torch.int32, torch.int64)
SCAN_MAX = 4096  # a cumsum's scanned dim lies along one tile's free axis
ISIN_MAX = 64  # test elements per isin (two instructions per tile each)


def _int_tile(t):
    """``t`` as an int32 tile (a copy for narrower integer dtypes; exact)."""
    if t.dtype == I32:
        return t
    wide = nl.ndarray(t.shape, dtype=I32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=wide, src=t)
    return wide


def _nonzero(t):
    """``t != 0`` as an int32 0/1 tile (fp32 compare: no nonzero int32, float or bool reads as 0)."""
    flags = nl.ndarray(t.shape, dtype=I32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=flags, data=t, op0=A.not_equal, operand0=0.0)
    return flags


def fold_free(t, op):
    """Fold the free dim of int32 tile ``t`` [p, n] in place into ``t[:, 0:1]``: a halving tree of
    GpSimd integer ``tensor_tensor`` (pairs ``i`` and ``n - h + i``; an odd middle waits a round)."""
    n = t.shape[1]
    while n > 1:
        h = n // 2
        nisa.tensor_tensor(dst=t[:, :h], data1=t[:, :h], data2=t[:, n - h:n], op=op)
        n -= h
    return t[:, 0:1]


def store_result(out, res, wide: bool, store):
    """Store int32 results ``res`` to ``out`` (its dtype: a copy; int64: low words and sign words)
    with ``store(view, tile)``."""
    if wide:
        store(low_words(out), res)
        sign = nl.ndarray(res.shape, dtype=I32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=sign, data=res, op0=A.right_shift, operand0=31, engine=nisa.vector_engine)
        store(high_words(out), sign)
        return
    if out.dtype != I32:
        t = nl.ndarray(res.shape, dtype=out.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=t, src=res)
        res = t
    store(out, res)


# ---------------------------------------------------------------- reductions


def int_reduction(out, x, *, op, test: bool, layout, wide_in: bool, wide_out: bool):
    """``out = fold(op, x)`` over the layout's reduced dims (``test``: of ``x != 0``)."""
    x = low_words(x) if wide_in else x
    batches = _batches(x, layout)
    loads = sum(len(g.chunks) for b in batches for g in b.groups)
    if loads > MAX_STEPS:
        raise Declined(f"{loads} loads")
    for b in batches:
        res = nl.ndarray((min(128, b.n), len(b.groups)), dtype=I32, buffer=nl.sbuf)
        for i in nl.affine_range(len(b.groups)):
            g = b.groups[i]
            acc = nl.ndarray((g.width, len(g.chunks)), dtype=I32, buffer=nl.sbuf)
            for j, (p, ap) in enumerate(g.chunks):
                t = nl.ndarray((p, ap.size // p), dtype=x.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=ap)
                t = _nonzero(t) if test else _int_tile(t)
                nisa.tensor_copy(dst=acc[:p, j:j + 1], src=fold_free(t, op), engine=nisa.gpsimd_engine)
            nisa.tensor_copy(dst=res[:g.width, i:i + 1], src=fold_free(acc, op), engine=nisa.gpsimd_engine)
        store_result(out, res, wide_out,
                     lambda view, t, b=b: store_columns(view, b.out_offset * (2 if wide_out else 1),
                                                        b.out_step * (2 if wide_out else 1), t, b.n))


def _words(t: torch.Tensor) -> torch.Tensor:
    """A meta stand-in laying ``t`` out as the kernel sees it: int64 strides in int32 words."""
    if t.dtype is not torch.int64:
        return t
    return torch.empty_strided(t.shape, [2 * s for s in t.stride()], dtype=torch.int32, device="meta")


def plan_int_reduction(call: Call, dims, keepdim: bool, op: AluOp, test: bool = False) -> Launch | None:
    """The launch of an integer (``test``: any dtype's ``!= 0``) reduction, or None."""
    x, out = call.inputs[0], call.outputs[0]
    if x.dtype not in INTS and not (test and x.dtype in FLOAT_DTYPES):
        return None
    if out.dtype not in (*INTS, torch.bool):
        return None
    # Rows only: the kept elements on the partitions (int64: steps in words; out's are scaled on store).
    layout = plan_layout(_words(x), out, dims, keepdim, Reduction(op))
    kept = _longest_last(layout.kept) if layout.kept else layout.kept
    layout = dataclasses.replace(layout, kept=kept, scheme="rows")
    return Launch(int_reduction, (OUT(0), IN(0)),
                  {"op": op, "test": test, "layout": layout, "wide_in": x.dtype is torch.int64,
                   "wide_out": out.dtype is torch.int64}, flops=float(x.numel()),
                  int64_in_32_bits=torch.int64 in (x.dtype, out.dtype))


def _dims(arg, ndim: int) -> list[int]:
    if arg is None:
        return list(range(ndim))
    dims = [arg] if isinstance(arg, int) else list(arg)
    return dims or list(range(ndim))


@native("aten::any.default", "aten::any.dim", "aten::any.dims", "aten::all.default", "aten::all.dim",
        "aten::all.dims")
def plan_any_all(call: Call) -> Launch | None:
    x = call.inputs[0]
    if len(call.inputs) != 1 or x.dim() == 0 and call.op._overloadname != "default":
        return None
    op = A.maximum if call.op._schema.name == "aten::any" else A.minimum
    dims = _dims(call.arg(1, "dim") if call.op._overloadname != "default" else None, x.dim())
    return plan_int_reduction(call, dims, bool(call.arg(2, "keepdim", False)), op, test=True)


# ---------------------------------------------------------------- cumsum


def cumsum(out, x, *, rows, n, x_steps, out_steps, wide_in, wide_out):
    """Inclusive prefix sums of ``n`` elements along the free dim, ``rows`` rows on the partitions."""
    x = low_words(x) if wide_in else x
    (xr, xc), (orow, ocol) = x_steps, out_steps
    if wide_in:  # int64 steps in int32 words
        xr, xc = 2 * xr, 2 * xc
    if wide_out:
        orow, ocol = 2 * orow, 2 * ocol
    for r0 in nl.affine_range(0, rows, 128):
        p = min(128, rows - r0)
        t = nl.ndarray((p, n), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.ap([[xr, p], [xc, n]], offset=x.offset + r0 * xr))
        cur = _int_tile(t)
        shift = 1
        while shift < n:  # Hillis-Steele: cur[i] + cur[i - shift], between two tiles
            nxt = nl.ndarray((p, n), dtype=I32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=nxt[:, :shift], src=cur[:, :shift], engine=nisa.gpsimd_engine)
            nisa.tensor_tensor(dst=nxt[:, shift:], data1=cur[:, shift:], data2=cur[:, :n - shift], op=A.add)
            cur, shift = nxt, 2 * shift
        store_result(out, cur, wide_out, lambda view, tile, r0=r0, p=p: nisa.dma_copy(
            dst=view.ap([[orow, p], [ocol, n]], offset=view.offset + r0 * orow), src=tile))


def _row_steps(t: torch.Tensor, dim: int) -> tuple[int, int] | None:
    """(row step, step along ``dim``) of ``t`` with every other dim collapsed into rows, or None."""
    others = [(t.shape[d], t.stride(d)) for d in range(t.dim()) if d != dim and t.shape[d] != 1]
    for (_, outer), (size, inner) in zip(others, others[1:], strict=False):
        if outer != inner * size:
            return None
    return (others[-1][1] if others else 0), t.stride(dim)


@native("aten::cumsum.default")
def plan_cumsum(call: Call) -> Launch | None:
    x, out = call.inputs[0], call.outputs[0]
    if len(call.inputs) != 1 or x.dtype not in INTS or out.dtype not in (torch.int32, torch.int64):
        return None  # (float scans accumulate in double on the CPU: they stay on the host)
    dim = call.arg(1, "dim") % max(x.dim(), 1)
    n = x.shape[dim] if x.dim() else 1
    xs, os_ = (_row_steps(t, dim) if t.dim() else (0, 1) for t in (x, out))
    if xs is None or os_ is None or not 0 < n <= SCAN_MAX:
        return None
    return Launch(cumsum, (OUT(0), IN(0)),
                  {"rows": x.numel() // n, "n": n, "x_steps": xs, "out_steps": os_,
                   "wide_in": x.dtype is torch.int64, "wide_out": out.dtype is torch.int64},
                  flops=float(x.numel() * math.ceil(math.log2(max(n, 2)))),
                  int64_in_32_bits=torch.int64 in (x.dtype, out.dtype))


# ---------------------------------------------------------------- isin


def isin(out, x, test, *, m, integer, invert, wide_in, wide_test):
    """``out = x in test`` (``invert``: not in), tile by tile."""
    x = low_words(x) if wide_in else x
    test = low_words(test) if wide_test else test
    views = [out, x]
    tiles = elementwise_tiles(views)
    step = test.dims[0][0] if test.dims else 1
    for i in nl.affine_range(len(tiles)):
        tile = tiles[i]
        p, f = tile.partitions, tile.free
        values = nl.ndarray((p, m), dtype=test.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=values, src=test.ap([[0, p], [step, m]], offset=test.offset))
        t = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=tile.of(1, x))
        dtype = I32 if integer else nl.float32
        if integer:
            t, values = _int_tile(t), _int_tile(values)
        found = nl.ndarray((p, f), dtype=dtype, buffer=nl.sbuf)
        hit = nl.ndarray((p, f), dtype=dtype, buffer=nl.sbuf)
        for j in range(m):
            v = values[:, j:j + 1].broadcast(1, f)
            nisa.tensor_tensor(dst=found if j == 0 else hit, data1=t, data2=v, op=A.equal)
            if j:
                nisa.tensor_tensor(dst=found, data1=found, data2=hit, op=A.maximum)
        result = nl.ndarray((p, f), dtype=out.dtype, buffer=nl.sbuf)
        if invert:
            nisa.tensor_scalar(dst=result, data=found, op0=A.equal, operand0=0.0)
        else:
            nisa.tensor_copy(dst=result, src=found)
        nisa.dma_copy(dst=tile.of(0, out), src=result)


@native("aten::isin.Tensor_Tensor")
def plan_isin(call: Call) -> Launch | None:
    x, test = call.arg(0, "elements"), call.arg(1, "test_elements")
    if len(call.inputs) != 2 or call.outputs[0].dtype is not torch.bool or x.shape != call.outputs[0].shape:
        return None
    integer = x.dtype in INTS and test.dtype in INTS
    if not (integer or (x.dtype in FLOAT_DTYPES and test.dtype in FLOAT_DTYPES)):
        return None
    if not 0 < test.numel() <= ISIN_MAX or test.dim() > 1:
        return None  # (a 0-dim test tensor is one element: its single dim pair below)
    return Launch(isin, (OUT(0), IN(0), IN(1)),
                  {"m": test.numel(), "integer": integer, "invert": bool(call.arg(3, "invert", False)),
                   "wide_in": x.dtype is torch.int64, "wide_test": test.dtype is torch.int64},
                  flops=float(x.numel() * test.numel() * 2),
                  int64_in_32_bits=torch.int64 in (x.dtype, test.dtype))
