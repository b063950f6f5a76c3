"""MX (OCP Microscaling, NeuronCore-v4): ``quantize_mx`` on VectorE and ``nc_matmul_mx`` on TensorE
(their IR semantics and costs: ``sim/engines/mx.py``)."""

from __future__ import annotations

from neuronsim import nki_releases
from neuronsim.errors import DtypeError
from neuronsim.nki.isa.common import _box, _describe, _fail, _tile, emit
from neuronsim.nki.trace import current_trace
from neuronsim.options import current as current_options
from neuronsim.sim.engines.mx import FMT_E2M1FN, FMT_E4M3FN, FMT_E5M2
from neuronsim.sim.ir import Engine, Opcode

_FORMAT = {"float8_e4m3fn_x4": FMT_E4M3FN, "float8_e5m2_x4": FMT_E5M2, "float4_e2m1fn_x4": FMT_E2M1FN}


def _format(fn: str, v, role: str) -> int:
    fmt = _FORMAT.get(v.buf.mx)
    if fmt is None:
        raise _fail(fn, f"{role} {_describe(v)} is not MX data: make it with dtype nl.float8_e4m3fn_x4, "
                    f"nl.float8_e5m2_x4 or nl.float4_e2m1fn_x4 (or .view() its words as one)", DtypeError)
    return fmt


def quantize_mx(dst, src, dst_scale, name=None):
    """Quantize bf16/fp16 ``src`` [P, 4F] into MXFP8 ``dst`` [P, F] (x4 words) and E8M0 ``dst_scale``
    (one byte per 8 partitions x 4 values, in the group's quadrant), on VectorE (S16); the block
    scale is the selected NKI release's (``nki_releases``: the OCP sample scale before 0.5)."""
    fn = "quantize_mx"
    dst, src, dst_scale = _tile(dst, "dst", fn), _tile(src, "src", fn), _tile(dst_scale, "dst_scale", fn)
    fmt = _format(fn, dst, "dst")
    if fmt == FMT_E2M1FN:
        raise _fail(fn, "dst must be float8_e4m3fn_x4 or float8_e5m2_x4 (quantize_mx writes no fp4)",
                    DtypeError)
    if dst_scale.buf.dtype.itemsize != 1:
        raise _fail(fn, f"dst_scale {_describe(dst_scale)} must be float8_e8m0fnu or uint8", DtypeError)
    ocp_scale = nki_releases.release(current_options().nki_version).quantize_mx_ocp_scale
    emit(fn, Opcode.QUANTIZE_MX, Engine.VECTOR, dst, (src,), {"fmt": fmt, "ocp_scale": ocp_scale}, name=name,
         dst2=dst_scale, roles=("src",))


def nc_matmul_mx(dst, stationary, moving, stationary_scale, moving_scale, tile_position=None, tile_size=None,
                 accumulate=None, name=None):
    """``dst = dequant(stationary).T @ dequant(moving)`` for MXFP8/MXFP4 x4 data with their E8M0 scales,
    on TensorE (S16); ``accumulate=None`` accumulates onto PSUM already written, as ``nc_matmul``.
    ``tile_position`` / ``tile_size`` (row tiling) are checked but not modelled in time."""
    fn = "nc_matmul_mx"
    dst, stationary = _tile(dst, "dst", fn), _tile(stationary, "stationary", fn)
    moving = _tile(moving, "moving", fn)
    s_scale = _tile(stationary_scale, "stationary_scale", fn)
    m_scale = _tile(moving_scale, "moving_scale", fn)
    s_fmt, m_fmt = _format(fn, stationary, "stationary"), _format(fn, moving, "moving")
    if (tile_position is None) != (tile_size is None):
        raise _fail(fn, "tile_position and tile_size must both be set (row tiling) or both be left unset")
    if tile_size is not None:
        rows, cols = (int(x) for x in tile_size)
        start, col0 = (int(x) for x in tile_position)
        if rows not in (32, 64, 128) or cols != 128 or col0 != 0 or start % rows or start + rows > 128 \
                or stationary.partitions > rows:
            raise _fail(fn, f"tile_position={tuple(tile_position)} tile_size={tuple(tile_size)}: row tiles "
                        f"are (32|64|128, 128) at a multiple of their size, column 0, holding the "
                        f"stationary's {stationary.partitions} partitions")
    if dst.buf.acc_boxes is None:
        raise _fail(fn, f"dst {_describe(dst)} must be a PSUM tile")
    box = _box(dst)
    if accumulate is None:
        accumulate = any(a[0] < box[1] and box[0] < a[1] and a[2] < box[3] and box[2] < a[3]
                         for a in dst.buf.acc_boxes)
    dst.buf.acc_boxes.append(box)
    current_trace().matmul_flops += 2 * 4 * stationary.partitions * stationary.free_size * moving.free_size
    emit(fn, Opcode.NC_MATMUL_MX, Engine.TENSOR, dst, (stationary, moving, s_scale, m_scale),
         {"stationary_fmt": s_fmt, "moving_fmt": m_fmt, "accumulate": bool(accumulate)}, name=name,
         roles=("stationary", "moving", "stationary_scale", "moving_scale"))
