"""``nl`` data movement: ``load``/``store`` (DMA), ``load_transpose2d``, ``copy``, ``transpose`` and
``matmul`` (TensorE through PSUM, with the transposes the NKI compiler inserts)."""

from __future__ import annotations

from neuronsim.errors import ConstraintError
from neuronsim.nki import isa as _isa
from neuronsim.nki.language.dtypes import float32, psum
from neuronsim.nki.language.tensor import NkiTensor, is_tile, new_tile, sbuf_operand
from neuronsim.nki.trace import caller_location, current_trace


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
    out = new_tile((b, a), src.dtype if dtype is None else dtype, "load_transpose2d")
    _isa.dma_transpose(out, src)
    return out


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
