"""``nl`` data movement: ``load``/``store`` (DMA), ``load_transpose2d``, ``copy``, ``transpose`` and
``matmul`` (TensorE through PSUM, with the transposes the NKI compiler inserts)."""

from __future__ import annotations

from neuronsim.errors import ConstraintError
from neuronsim.nki import isa as _isa
from neuronsim.nki.language.dtypes import float32, psum
from neuronsim.nki.language.tensor import NkiTensor, is_tile, new_tile, partition_broadcast, sbuf_operand
from neuronsim.nki.trace import caller_location, current_trace
from neuronsim.nki.types import to_sim_dtype


def load(src, dtype=None) -> NkiTensor:
    """Load an HBM tensor into a new SBUF tile (one DMA; casts through fp32 if ``dtype`` differs)."""
    if len(src.shape) < 2:
        raise ConstraintError(
            f"nl.load: src has shape {src.shape}; an SBUF tile needs a partition dimension "
            f"first (reshape it to (P, F))",
            location=caller_location(),
        )
    out = new_tile(src.shape, src.dtype if dtype is None else dtype, "load")
    _isa.dma_copy(out, src)
    return out


def store(dst, value) -> None:
    """Store an SBUF tile into HBM (a PSUM tile is first copied to SBUF, as the NKI compiler does)."""
    if is_tile(value):
        value = sbuf_operand(value, "store.psum_copy")
    _isa.dma_copy(dst, value)


def load_transpose2d(src, dtype=None) -> NkiTensor:
    """Load HBM ``src`` [A, B] transposed into a new SBUF tile [B, A] (DMA transpose)."""
    a, b = src.shape
    out = new_tile((b, a), src.dtype, "load_transpose2d")
    _isa.dma_transpose(out, src)
    if dtype is None or to_sim_dtype(dtype) is src.buf.dtype:
        return out
    return copy(out, dtype)  # the DMA transposes without casting: cast on VectorE


def copy(x, dtype=None) -> NkiTensor:
    """A copy of ``x`` in a new SBUF tile (VectorE)."""
    out = new_tile(x.shape, x.dtype if dtype is None else dtype, "copy")
    _isa.tensor_copy(out, x)
    return out


def transpose(x, dtype=None) -> NkiTensor:
    """``x`` [P, F] transposed into a new SBUF tile [F, P]: VectorE up to 32x32, else TensorE via PSUM."""
    p, f = x.partitions, x.free_size
    d = x.dtype if dtype is None else dtype
    small = current_trace().chip.vector_transpose_max_dim
    if p <= small and f <= small:
        out = new_tile((f, p), x.dtype, "transpose")
        _isa.nc_transpose(out, x, engine=_isa.engine.vector)
        return out if dtype is None else copy(out, d)
    src = sbuf_operand(x, "transpose.psum_copy")
    t_psum = new_tile((f, p), x.dtype, "transpose.psum", psum)
    _isa.nc_transpose(t_psum, src, engine=_isa.engine.tensor)
    out = new_tile((f, p), d, "transpose")
    _isa.tensor_copy(out, t_psum)
    return out


def matmul(x, y, transpose_x=False) -> NkiTensor:
    """``x @ y`` (or ``x.T @ y`` with ``transpose_x``) into a new PSUM tile (fp32), on TensorE.

    Without ``transpose_x`` the compiler inserts a transpose of ``x`` first, as NKI does.
    """
    xt = x if transpose_x else transpose(x)
    xt, y = sbuf_operand(xt, "matmul.x"), sbuf_operand(y, "matmul.y")
    out = new_tile((xt.free_size, y.free_size), float32, "matmul", psum)
    _isa.nc_matmul(out, xt, y)
    return out


def broadcast_to(x, shape, dtype=None) -> NkiTensor:
    """``x`` broadcast to ``shape`` (same rank; each dim equal or from 1) in a new tile, as
    ``numpy.broadcast_to``. ``x`` itself when the shape already matches and no ``dtype`` is asked.
    Free dims broadcast through the copy's access pattern (one VectorE copy); a 1-partition tile
    broadcasts across partitions through TensorE (``partition_broadcast``)."""
    if not is_tile(x):
        raise TypeError(f"nl.broadcast_to takes a tile, got {type(x).__name__}")
    shape = tuple(int(n) for n in shape)
    if len(shape) != len(x.shape) or any(a not in (1, b) for a, b in zip(x.shape, shape, strict=True)):
        raise ConstraintError(
            f"nl.broadcast_to: cannot broadcast shape {x.shape} to {shape} (same rank; each dim equal "
            f"or 1)", location=caller_location())
    if shape == x.shape and (dtype is None or dtype == x.dtype):
        return x
    src = partition_broadcast(x, shape[0], "broadcast_to") if shape[0] != x.shape[0] else x
    out = new_tile(shape, x.dtype if dtype is None else dtype, "broadcast_to")
    _isa.tensor_copy(out, src.broadcast_to(shape) if src.shape != shape else src)
    return out


def expand_dims(x, axis: int) -> NkiTensor:
    """A view of ``x`` with a new size-1 axis at ``axis`` (``numpy.expand_dims``; no data moves)."""
    ndim = len(x.shape) + 1
    axis = int(axis) + ndim if int(axis) < 0 else int(axis)
    if not 0 <= axis < ndim:
        raise ConstraintError(f"nl.expand_dims: axis {axis} is out of range for a {ndim - 1}-d tile",
                              location=caller_location())
    if axis == 0 and x.on_chip:
        raise ConstraintError("nl.expand_dims: axis 0 of an on-chip tile is its partition dimension",
                              location=caller_location())
    return x.expand_dim(axis)
