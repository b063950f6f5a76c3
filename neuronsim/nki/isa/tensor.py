"""TensorE: ``nc_matmul`` and ``nc_transpose``."""

from __future__ import annotations

from neuronsim.errors import DtypeError, EngineAccessError, UnsupportedError
from neuronsim.nki.isa.common import (
    _box,
    _describe,
    _engine,
    _fail,
    _tile,
    emit,
)
from neuronsim.nki.isa.enums import (
    engine,
    matmul_perf_mode,
)
from neuronsim.nki.trace import current_trace
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import Engine, Memory, Opcode


def nc_matmul(
    dst,
    stationary,
    moving,
    is_stationary_onezero=False,
    is_moving_onezero=False,
    is_transpose=False,
    accumulate=None,
    tile_position=(),
    tile_size=(),
    perf_mode=matmul_perf_mode.none,
    name=None,
):
    """``dst = stationary.T @ moving`` on TensorE.

    stationary [K, M] and moving [K, N] in SBUF, dst [M, N] in PSUM.
    """
    fn = "nc_matmul"
    dst, stationary, moving = (
        _tile(dst, "dst", fn),
        _tile(stationary, "stationary", fn),
        _tile(moving, "moving", fn),
    )
    trace = current_trace()
    chip = trace.chip
    for role, v in (("stationary", stationary), ("moving", moving)):
        if v.memory is not Memory.SBUF:
            raise _fail(
                fn,
                f"TensorE reads its {role} operand from SBUF only; {role} is {_describe(v)}",
                EngineAccessError,
            )
    if dst.memory is not Memory.PSUM:
        raise _fail(fn, f"TensorE writes its result to PSUM only; dst is {_describe(dst)}", EngineAccessError)
    if perf_mode in (matmul_perf_mode.double_row, "double_row"):
        _double_row(dst, stationary, moving, accumulate, tile_size, name)
        return
    if perf_mode not in (None, matmul_perf_mode.none, "none"):
        raise _fail(fn, f"perf_mode={perf_mode} is not a matmul_perf_mode", UnsupportedError)
    k, k2 = stationary.partitions, moving.partitions
    rows = chip.pe_array_rows
    if tile_size:
        rows = int(tile_size[0])
    if k != k2:
        raise _fail(
            fn,
            f"the contraction (partition) sizes differ: stationary {_describe(stationary)} has {k}, "
            f"moving {_describe(moving)} has {k2}",
        )
    if k > rows:
        raise _fail(
            fn,
            f"stationary {_describe(stationary)} contracts over {k} partitions; the limit is {rows} "
            f"(nl.tile_size.pmax)",
        )
    m, n = stationary.free_size, moving.free_size
    if m > chip.matmul_stationary_free_max:
        raise _fail(
            fn,
            f"stationary {_describe(stationary)} has free size {m}; the limit is "
            f"{chip.matmul_stationary_free_max} (nl.tile_size.gemm_stationary_fmax)",
        )
    if n > chip.matmul_moving_free_max:
        raise _fail(
            fn,
            f"moving {_describe(moving)} has free size {n}; the limit on {chip.name} is "
            f"{chip.matmul_moving_free_max} (nl.tile_size.gemm_moving_fmax)",
        )
    if dst.partitions != m or dst.free_size != n:
        raise _fail(
            fn,
            f"dst {_describe(dst)} is {dst.partitions}x{dst.free_size} but stationary.T @ moving is {m}x{n}",
        )
    wide = {DType.float32, DType.tfloat32}
    if (stationary.buf.dtype in wide) != (moving.buf.dtype in wide):
        raise _fail(
            fn,
            f"float32/tfloat32 operands pair only with float32/tfloat32: stationary is "
            f"{stationary.dtype}, moving is {moving.dtype}",
            DtypeError,
        )
    allowed_dst = {DType.float32} if chip.nki_target != "gen4" else {DType.float32, DType.bfloat16}
    if is_transpose and dst.buf.dtype is stationary.buf.dtype and dst.buf.dtype is not DType.float32:
        # transpose mode: "Starting NeuronCore-v3, ... is_transpose=True enables bit-accurate data
        # transpose" of the stationary tile (the moving one is the identity), into a dst of its dtype:
        # what nc_transpose on TensorE records (a bf16 dst too on NeuronCore-v4, where a bf16 PSUM
        # is also a matmul's dst)
        if n != k:
            raise _fail(fn, f"is_transpose=True: moving {_describe(moving)} must be the [{k}, {k}] identity")
        return nc_transpose(dst, stationary, engine=engine.tensor, name=name)
    if dst.buf.dtype not in allowed_dst and not is_transpose:
        raise _fail(
            fn,
            f"dst {_describe(dst)} must be {'/'.join(sorted(d.name for d in allowed_dst))} on {chip.name}",
            DtypeError,
        )
    box = _box(dst)
    boxes = dst.buf.acc_boxes
    if accumulate is None:
        accumulate = False
        for a in boxes:
            if a[0] < box[1] and box[0] < a[1] and a[2] < box[3] and box[2] < a[3]:
                accumulate = True
                break
    boxes.append(box)
    if is_transpose:
        trace.transpose_flops += 2 * k * m * n
    else:
        trace.matmul_flops += 2 * k * m * n
    emit(
        fn,
        Opcode.NC_MATMUL,
        Engine.TENSOR,
        dst,
        (stationary, moving),
        {"accumulate": bool(accumulate)},
        name=name,
        roles=("stationary", "moving"),
    )


_FP8 = frozenset({DType.float8_e4m3, DType.float8_e5m2, DType.float8_e4m3fn})


def _double_row(dst, stationary, moving, accumulate, tile_size, name) -> None:
    """FP8 double-row (NeuronCore-v3+, S16, S10): stationary [K, 2, M] and moving [K, 2, N] contract over
    K partitions x 2 rows in one pass, the time of a K=128 bf16 matmul. Recorded as the two row halves
    (``stationary[:, r, :]``, ``moving[:, r, :]``), the second accumulating onto the first, each marked
    ``double_row`` so TensorE charges half a pass for it."""
    fn = "nc_matmul"
    chip = current_trace().chip
    if int(chip.neuron_core_version.lstrip("v")) < 3:
        raise _fail(fn, f"perf_mode=double_row needs NeuronCore-v3 or newer; {chip.name} is "
                    f"{chip.neuron_core_version}", UnsupportedError)
    for role, v in (("stationary", stationary), ("moving", moving)):
        if v.buf.dtype not in _FP8:
            raise _fail(fn, f"perf_mode=double_row takes FP8 operands; {role} is {_describe(v)}", DtypeError)
        if len(v.shape) != 3 or v.shape[1] != 2:
            raise _fail(fn, f"perf_mode=double_row takes a [K, 2, free] {role}; got {_describe(v)}")
    if tile_size and int(tile_size[1]) < chip.pe_array_rows:
        raise _fail(fn, f"perf_mode=double_row cannot be combined with column tiling (tile_size={tile_size})")
    for r in range(2):
        nc_matmul(dst, stationary[:, r, :], moving[:, r, :], accumulate=accumulate if r == 0 else True,
                  tile_size=tile_size, name=name)
        current_trace().records[-1][4]["double_row"] = True


def nc_transpose(dst, data, engine=engine.unknown, name=None):
    """2-D transpose of ``data`` [P, F] into ``dst`` [F, P] on TensorE (<= 128x128) or VectorE (<= 32x32)."""
    fn = "nc_transpose"
    dst, data = _tile(dst, "dst", fn), _tile(data, "data", fn)
    default = Engine.VECTOR if data.memory is Memory.PSUM or dst.memory is Memory.SBUF else Engine.TENSOR
    eng = _engine(engine, fn, (Engine.TENSOR, Engine.VECTOR), default)
    p, f = data.partitions, data.free_size
    chip = current_trace().chip
    limit = chip.pe_array_rows if eng is Engine.TENSOR else chip.vector_transpose_max_dim
    if p > limit or f > limit:
        raise _fail(
            fn,
            f"data {_describe(data)} is {p}x{f}; the {eng.name.lower()} engine transposes at most "
            f"{limit}x{limit}",
        )
    if dst.partitions != f or dst.free_size != p:
        raise _fail(
            fn,
            f"dst {_describe(dst)} is {dst.partitions}x{dst.free_size}; the transpose of {p}x{f} is {f}x{p}",
        )
    if dst.buf.dtype is not data.buf.dtype:
        raise _fail(fn, f"dst dtype {dst.dtype} must equal the data dtype {data.dtype}", DtypeError)
    if eng is Engine.TENSOR:
        if data.memory is not Memory.SBUF:
            raise _fail(fn, f"TensorE reads SBUF only; data is {_describe(data)}", EngineAccessError)
        current_trace().transpose_flops += 2 * p * f * p
    emit(fn, Opcode.NC_TRANSPOSE, eng, dst, (data,), {}, name=name, roles=("data",))
