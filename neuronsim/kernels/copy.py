"""Copies on the device: ``copy_`` (which ``.to(dtype)``, ``.clone()``, ``.contiguous()`` and
``_to_copy`` reach) and ``cat`` (which ``stack`` reaches), as DMA transfers straight from HBM to HBM.

Each ``[partitions, free]`` tile of the destination is one ``dma_copy`` from the source broadcast
to the destination's shape (stride-0 access patterns), whatever either's strides: transposes and
permutes are the same kernel. Same dtype: bit-exact; between float dtypes the DMA casts through
fp32 with round-to-nearest-even (ATen-CPU's rounding). int64 is its (low, high) int32 words
(``bridge.py``): int64 -> int32 is a DMA of the low words (ATen's cast wraps the same way), and an
integer or bool -> int64 cast widens on the engines (``elementwise.py``'s tile loop: the value and its
sign word). Integer and bool -> float or bool casts convert on VectorE (int32 -> fp32 rounds to
nearest even, as C++'s cast does; an int64 source is converted from its low words, so a call whose
values do not all fit in int32 runs on the host, which converts all 64 bits). Float -> integer casts
truncate on VectorE (``x - fmod(x, 1)``) when every value is finite and fits the integer type (int64:
int32), where C++'s cast is defined; other calls run on the host. Float -> bool is ``x != 0``.
"""

from __future__ import annotations

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES, numpy_dtype
from neuronsim.kernels.elementwise import SMALL_INTS, elementwise, low_words
from neuronsim.kernels.elementwise_chains import fill
from neuronsim.kernels.registry import IN, OUT, Call, Launch, native
from neuronsim.kernels.tiling import elementwise_tiles
from neuronsim.sim.ir import AluOp

_WIDENED = (*SMALL_INTS, torch.int32)  # integer dtypes an int64 can be cast from exactly


def _on_device(dtype) -> bool:
    return dtype is torch.int64 or numpy_dtype(dtype) is not None


def copy(dst, src):
    views = [dst, src.broadcast_to(dst.shape)]
    tiles = elementwise_tiles(views)
    for i in nl.affine_range(len(tiles)):
        nisa.dma_copy(dst=tiles[i].of(0, dst), src=tiles[i].of(1, views[1]))


@native("aten::copy_.default")
def plan_copy(call: Call) -> Launch | None:
    if len(call.inputs) != 2:
        return None
    dst, src = call.inputs
    if not (_on_device(dst.dtype) and _on_device(src.dtype)):
        return None
    if src.dtype is torch.int64 and dst.dtype is torch.int32:
        return Launch(narrow, (OUT(0), IN(1)))
    if dst.dtype is torch.int64 and src.dtype in _WIDENED:
        return Launch(elementwise, (OUT(0), IN(1)), {"compute": _widen, "params": {}, "wide": (True, False)})
    if src.dtype in FLOAT_DTYPES and dst.dtype in (*_WIDENED, torch.int64) and dst.dtype is not torch.bool:
        statics = {"compute": _truncate, "params": {}, "wide": (dst.dtype is torch.int64, False)}
        return Launch(elementwise, (OUT(0), IN(1)), statics, admit=_truncates_into(dst.dtype))
    converted = dst.dtype in (*FLOAT_DTYPES, torch.bool) and src.dtype in (*_WIDENED, torch.int64)
    converted |= dst.dtype is torch.bool and src.dtype in FLOAT_DTYPES
    if converted and dst.dtype != src.dtype:
        wide = src.dtype is torch.int64
        statics = {"compute": _convert, "params": {}, "wide": (False, wide)}
        return Launch(elementwise, (OUT(0), IN(1)), statics, admit=_fits_int32 if wide else None)
    if dst.dtype != src.dtype and not (dst.dtype in FLOAT_DTYPES and src.dtype in FLOAT_DTYPES):
        return None
    return Launch(copy, (OUT(0), IN(1)))


def narrow(dst, src):
    """int64 -> int32: the low words."""
    copy(dst, low_words(src))


def _convert(dst, x):
    if dst.dtype == nl.bool_:
        nisa.tensor_scalar(dst=dst, data=x, op0=AluOp.not_equal, operand0=0.0)
    else:
        nisa.tensor_copy(dst=dst, src=x)


def _truncate(dst, x):
    """Float -> integer, rounding toward zero as C++'s cast: ``-(fmod(x, 1) - x)``, an integer in fp32
    that the store to the integer tile keeps exactly."""
    t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=t, data=x, op0=AluOp.mod, operand0=1.0, op1=AluOp.subtract, operand1=x)
    nisa.tensor_scalar(dst=dst, data=t, op0=AluOp.multiply, operand0=-1.0)


def _truncates_into(dtype):
    """Every source value is finite and truncates into ``dtype`` (int64: into its low word), where
    C++'s cast is defined; other calls run on the host."""
    info = torch.iinfo(torch.int32 if dtype is torch.int64 else dtype)

    def admit(inputs) -> bool:
        t = inputs[1].trunc()
        return bool(((t >= info.min) & (t <= info.max)).all())  # (NaN compares False)
    return admit


def _fits_int32(inputs) -> bool:
    """Every int64 source value is its low word's (the kernel converts low words only)."""
    src = inputs[1]
    return bool((src.to(torch.int32).to(torch.int64) == src).all())


def _widen(dst, x):
    nisa.tensor_copy(dst=dst, src=x)  # to the int32 result tile; the tile loop adds the sign words


def cat(out, *ins, dim):
    """Each input copied into its slice of ``out`` along ``dim`` (empty inputs are not operands)."""
    start = 0
    for x in ins:
        n = x.shape[dim]
        copy(out.slice(dim, start, start + n), x)
        start += n


def _legacy_empty(t) -> bool:
    """A 1-D tensor of size 0, which ATen's cat skips whatever the other inputs' shapes."""
    return t.dim() == 1 and t.numel() == 0


@native("aten::cat.default")
def plan_cat(call: Call) -> Launch | None:
    out = call.outputs[0]
    if len(call.inputs) != len(call.arg(0, "tensors")):
        return None  # a CPU tensor in the list
    kept = [i for i, t in enumerate(call.inputs) if not _legacy_empty(t)]
    if any(call.inputs[i].dim() != out.dim() for i in kept):
        return None
    if any(t.dtype != out.dtype and not (t.dtype in FLOAT_DTYPES and out.dtype in FLOAT_DTYPES)
           for t in call.inputs) or not _on_device(out.dtype):
        return None
    if not out.numel():
        return Launch(cat, (OUT(0),), {"dim": 0})  # nothing to write (the runtime runs no Program)
    dim = call.arg(1, "dim", 0) % out.dim()
    kept = [i for i in kept if call.inputs[i].shape[dim]]  # (empty along dim: nothing to copy)
    return Launch(cat, (OUT(0), *(IN(i) for i in kept)), {"dim": dim})


def select_backward(out, grad, *, dim, index):
    """Zeros, then ``grad`` DMA'd into the selected slice (``grad`` viewed with ``dim`` as size 1)."""
    elementwise(out, compute=fill, params={"value": 0.0})
    dims = [list(d) for d in grad.dims] if grad.shape else []
    src = grad.ap(dims[:dim] + [[0, 1]] + dims[dim:], offset=grad.offset)
    copy(out.slice(dim, index, index + 1), src)


@native("aten::select_backward.default")
def plan_select_backward(call: Call) -> Launch | None:
    """The gradient of ``x[:, 0]`` (a classifier's first token, ViT's class token)."""
    (grad,) = call.inputs
    out = call.outputs[0]
    if grad.dtype not in FLOAT_DTYPES or out.dtype != grad.dtype or not out.is_contiguous():
        return None
    dim = call.arg(2, "dim") % out.dim()
    index = call.arg(3, "index")
    index = index + out.shape[dim] if index < 0 else index
    return Launch(select_backward, (OUT(0), IN(0)), {"dim": dim, "index": index})
