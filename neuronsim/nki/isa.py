"""``nki.isa``: every IR instruction as its NKI 0.6 call (``dst`` first, documented names/defaults).

Each call checks what NKI checks at trace time — operand memories, partition and free-size limits,
shapes, dtypes — and records one instruction (a few calls record two, as their docs say) with the
``file:line`` of the kernel line. Errors are ``neuronsim.errors`` types naming the tile, its size,
the limit and that line. ``accumulate=None`` on ``nc_matmul`` is inferred as on hardware: the first
write to a PSUM location overwrites and later matmuls onto it accumulate, until something other
than TensorE reads it (the accumulation group is evicted).
"""

from __future__ import annotations

import enum
import math

from neuronsim.errors import ConstraintError, DtypeError, EngineAccessError, UnsupportedError
from neuronsim.nki.tracing import NkiTensor, caller_location, current_trace
from neuronsim.nki.tracing import _state as _tracing_state
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import ActFunc, AluOp, Engine, Memory, Opcode
from neuronsim.sim.validate import ENGINE_READS, ENGINE_WRITES


class engine(enum.Enum):
    """Neuron Device engines."""

    tensor = "tensor"
    vector = "vector"
    scalar = "scalar"
    gpsimd = "gpsimd"
    dma = "dma"
    sync = "sync"
    unknown = "unknown"


class reduce_cmd(enum.Enum):
    idle = "idle"
    reset = "reset"
    reduce = "reduce"
    reset_reduce = "reset_reduce"
    load_reduce = "load_reduce"


_RC = reduce_cmd


class dge_mode(enum.Enum):
    unknown = "unknown"
    swdge = "swdge"
    hwdge = "hwdge"
    none = "none"


class oob_mode(enum.Enum):
    error = "error"
    skip = "skip"


class matmul_perf_mode(enum.Enum):
    none = "none"
    double_row = "double_row"


class nc_version(enum.Enum):
    gen2 = "gen2"
    gen3 = "gen3"
    gen4 = "gen4"


class dma_engine(enum.Enum):
    dma = "dma"
    gpsimd_dma = "gpsimd_dma"


NkiValidationError = ConstraintError

tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown

_UNKNOWN = engine.unknown
_ENGINES = {
    engine.tensor: Engine.TENSOR,
    engine.vector: Engine.VECTOR,
    engine.scalar: Engine.SCALAR,
    engine.gpsimd: Engine.GPSIMD,
}

# ---------------------------------------------------------------- operators by name

_ALU_NAMES = {op.name: op for op in AluOp}
_ALU_NAMES.update(
    {
        "max": AluOp.maximum,
        "min": AluOp.minimum,
        "amax": AluOp.maximum,
        "amin": AluOp.minimum,
        "sub": AluOp.subtract,
        "mul": AluOp.multiply,
        "mult": AluOp.multiply,
        "true_divide": AluOp.divide,
        "bitwise_not": AluOp.invert,
        "fmod": AluOp.mod,
        "remainder": AluOp.mod,
        "sum": AluOp.add,
        "average": AluOp.add,
        "mean": AluOp.add,
    }
)
_ACT_NAMES = {f.name: f for f in ActFunc}
_ACT_NAMES.update(
    {"exponential": ActFunc.exp, "gelu_apprx_tanh": ActFunc.gelu_apprx_tanh, "absolute": ActFunc.abs}
)


_ALU_MEMO: dict = {}
_ACT_MEMO: dict = {}
_INT32 = frozenset({DType.int32, DType.uint32})


def alu_op(op, what: str = "op") -> AluOp:
    """An ALU operator from ``nl.add``, ``np.add``, ``"add"`` or an AluOp."""
    try:
        return _ALU_MEMO[op]
    except (KeyError, TypeError):
        pass
    if isinstance(op, AluOp):
        return op
    name = op if isinstance(op, str) else getattr(op, "__name__", None)
    hit = _ALU_NAMES.get(name)
    if hit is not None:
        try:
            _ALU_MEMO[op] = hit
        except TypeError:
            pass
    if hit is None:
        raise UnsupportedError(
            f"{what}={op!r} is not an ALU operator of nki.language", location=caller_location()
        )
    return hit


def act_func(op) -> ActFunc:
    """An activation function from ``nl.exp``, ``np.exp``, ``"exp"`` or an ActFunc."""
    try:
        return _ACT_MEMO[op]
    except (KeyError, TypeError):
        pass
    if isinstance(op, ActFunc):
        return op
    name = op if isinstance(op, str) else getattr(op, "__name__", None)
    hit = _ACT_NAMES.get(name)
    if hit is not None:
        try:
            _ACT_MEMO[op] = hit
        except TypeError:
            pass
    if hit is None:
        raise UnsupportedError(
            f"op={op!r} is not an activation function the simulator implements "
            f"({', '.join(sorted(_ACT_NAMES))})",
            location=caller_location(),
        )
    return hit


# ---------------------------------------------------------------- recording


def _tile(x, role: str, fn: str) -> NkiTensor:
    if not isinstance(x, NkiTensor):
        raise TypeError(f"nisa.{fn}: {role} must be an NKI tensor, got {type(x).__name__}")
    return x


def _is_tile(x) -> bool:
    return isinstance(x, NkiTensor)


def _describe(v: NkiTensor) -> str:
    dims = "x".join(map(str, v.shape))
    return f"{v.buf.memory.name} tile '{v.buf.name}' [{dims}] {v.dtype}"


def _box(v: NkiTensor) -> tuple[int, int, int, int]:
    pat = v.ap_pattern()
    row0, col0 = divmod(v.offset, v.buf.free_size)
    lo = hi = 0
    for s, n in pat[1:]:
        r = s * (n - 1)
        lo += min(0, r)
        hi += max(0, r)
    return row0, row0 + pat[0][1], col0 + lo, col0 + hi + 1


def _overlaps(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def emit(
    fn: str,
    opcode: Opcode,
    eng: Engine,
    dst: NkiTensor | None,
    srcs=(),
    imm=None,
    *,
    name=None,
    dst2: NkiTensor | None = None,
    queue: int = 0,
    roles=None,
) -> int:
    """Check engine/memory access, update liveness and PSUM accumulation state, record the instruction."""
    try:
        trace = _tracing_state.trace
    except AttributeError:
        trace = current_trace()
    records = trace.records
    idx = len(records)
    location = caller_location()
    reads = ENGINE_READS[eng]
    hbm = Memory.HBM
    for v in srcs:
        b = v.buf
        mem = b.memory
        if mem not in reads:
            _access_error(fn, eng, v, srcs, roles, location, reads, "read")
        if mem is not hbm:
            root = b.alias_of or b
            if root.first < 0:
                root.first = idx
            root.last = idx
            boxes = b.acc_boxes
            if boxes:  # a PSUM read ends the accumulation groups it overlaps
                box = _box(v)
                b.acc_boxes = [a for a in boxes if not _overlaps(a, box)]
    if dst is not None:
        _write(fn, eng, dst, idx, location, opcode)
    if dst2 is not None:
        _write(fn, eng, dst2, idx, location, opcode)
    records.append((opcode, eng, dst, tuple(srcs), {} if imm is None else imm, location, name, queue, dst2))
    return idx


def _write(fn: str, eng: Engine, v: NkiTensor, idx: int, location, opcode) -> None:
    b = v.buf
    if b.memory not in ENGINE_WRITES[eng]:
        writes = ENGINE_WRITES[eng]
        raise EngineAccessError(
            f"nisa.{fn}: the {eng.name.lower()} engine cannot write {b.memory.name}; the destination is "
            f"{_describe(v)} (it writes {', '.join(sorted(m.name for m in writes))})",
            instruction=f"nisa.{fn}",
            location=location,
        )
    root = b.alias_of or b
    root.written = True
    if b.memory is not Memory.HBM:
        if root.first < 0:
            root.first = idx
        root.last = idx
        if b.acc_boxes is not None and opcode is not Opcode.NC_MATMUL:
            b.acc_boxes.append(_box(v))


def _access_error(fn, eng, v, srcs, roles, location, reads, verb):
    pos = next(i for i, s in enumerate(srcs) if s is v)
    role = roles[pos] if roles else "src"
    raise EngineAccessError(
        f"nisa.{fn}: the {eng.name.lower()} engine cannot {verb} {v.buf.memory.name}; "
        f"{role} is {_describe(v)} "
        f"(it reads {', '.join(sorted(m.name for m in reads))})",
        instruction=f"nisa.{fn}",
        location=location,
    )


def _engine(value, fn: str, allowed: tuple[Engine, ...], default: Engine) -> Engine:
    if value is _UNKNOWN or value is None or value == "unknown":
        return default
    if isinstance(value, str):
        value = engine(value)
    eng = _ENGINES.get(value)
    if eng not in allowed:
        raise ConstraintError(
            f"nisa.{fn} cannot run on engine={value}; allowed: {', '.join(e.name.lower() for e in allowed)}",
            location=caller_location(),
        )
    return eng


def _fail(fn: str, what: str, cls=ConstraintError):
    return cls(f"nisa.{fn}: {what}", instruction=f"nisa.{fn}", location=caller_location())


def _check_partitions(fn: str, *views: tuple[str, NkiTensor]) -> None:
    limit = current_trace().chip.partitions
    for role, v in views:
        if v.partitions > limit:
            raise _fail(
                fn,
                f"{role} {_describe(v)} spans {v.partitions} partitions; the limit is {limit} "
                f"(nl.tile_size.pmax)",
            )


def _same_shape(fn: str, a: NkiTensor, b: NkiTensor, ra: str, rb: str) -> None:
    if a.partitions != b.partitions or a.free_size != b.free_size:
        raise _fail(
            fn,
            f"{ra} is {a.partitions}x{a.free_size} (partitions x free elements) but {rb} is "
            f"{b.partitions}x{b.free_size}; {ra} = {_describe(a)}, {rb} = {_describe(b)}",
        )


def _scalar_or_vector(fn: str, x, data: NkiTensor, role: str):
    """(float immediate, tile or None) for an operand that is a constant or a [P, 1] tile."""
    if x is None:
        return 0.0, None
    if _is_tile(x):
        if x.partitions != data.partitions or x.free_size != 1:
            raise _fail(fn, f"{role} must be a scalar or a [{data.partitions}, 1] tile; got {_describe(x)}")
        return 0.0, x
    return float(x), None


# ---------------------------------------------------------------- TensorE


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
    if perf_mode not in (None, matmul_perf_mode.none, "none"):
        raise _fail(fn, f"perf_mode={perf_mode} (FP8 double-row) is not simulated", UnsupportedError)
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


# ---------------------------------------------------------------- ScalarE


def activation(
    dst,
    op,
    data,
    bias=None,
    scale=1.0,
    reduce_op=None,
    reduce_res=None,
    reduce_cmd=reduce_cmd.idle,
    name=None,
):
    """``dst = op(data * scale + bias)`` on ScalarE, optionally summing the result into ``reduce_res``."""
    fn = "activation"
    dst, data = _tile(dst, "dst", fn), _tile(data, "data", fn)
    func = act_func(op)
    _same_shape(fn, dst, data, "dst", "data")
    bias_imm, bias_tile = _scalar_or_vector(fn, bias, data, "bias")
    if _is_tile(scale):
        scale_imm, scale_tile = _scalar_or_vector(fn, scale, data, "scale")
        scale_imm = 1.0
    else:
        scale_imm, scale_tile = float(scale), None
    srcs, roles = [data], ["data"]
    if bias_tile is not None:
        srcs.append(bias_tile)
        roles.append("bias")
    if scale_tile is not None:
        srcs.append(scale_tile)
        roles.append("scale")
    cmd = _reduce_cmd(reduce_cmd)
    if reduce_res is not None:
        reduce_res = _tile(reduce_res, "reduce_res", fn)
        if reduce_res.partitions != data.partitions or reduce_res.free_size != 1:
            raise _fail(fn, f"reduce_res must be a [{data.partitions}, 1] tile; got {_describe(reduce_res)}")
        if cmd is _RC.idle:  # a result asked for with no command: the row sum (as activation_reduce)
            cmd = _RC.reset_reduce
    if reduce_op is not None and alu_op(reduce_op, "reduce_op") is not AluOp.add:
        raise _fail(fn, f"reduce_op={reduce_op} is not supported; ScalarE reduces with nl.add")
    if cmd is _RC.load_reduce:
        raise _fail(fn, "reduce_cmd=load_reduce is not a ScalarE activation command", UnsupportedError)
    trace = current_trace()
    # The 128 reduce registers are emulated: `reset_reduce` writes the row sum through the
    # instruction's second result; `reduce` writes it to a scratch tile and adds the running value
    # with one more ScalarE instruction (the register read-out costs an instruction on hardware too).
    dst2 = None
    if cmd in (_RC.reset_reduce, _RC.reduce):
        fresh = cmd is _RC.reset_reduce or trace.scalar_regs is None
        direct = fresh and reduce_res is not None and reduce_res.buf.dtype is DType.float32
        dst2 = reduce_res if direct else _scalar_regs_tile(data.partitions)
    imm = {
        "func": func,
        "scale": scale_imm,
        "bias": bias_imm,
        "bias_is_tile": bias_tile is not None,
        "scale_is_tile": scale_tile is not None,
        "reduce": dst2 is not None,
    }
    emit(fn, Opcode.ACTIVATION, Engine.SCALAR, dst, srcs, imm, name=name, dst2=dst2, roles=roles)
    if cmd is _RC.reset:
        trace.scalar_regs = None
    elif dst2 is not None:
        if cmd is _RC.reduce and trace.scalar_regs is not None:
            total = reduce_res if reduce_res is not None and reduce_res.buf.dtype is DType.float32 else dst2
            _scalar_add(total, dst2, trace.scalar_regs, name)
            dst2 = total
        trace.scalar_regs = dst2
    if reduce_res is not None and dst2 is not reduce_res:
        if trace.scalar_regs is None:
            memset(reduce_res, 0.0)
        else:
            tensor_copy(reduce_res, trace.scalar_regs, engine=engine.scalar)


def _reduce_cmd(value):
    if isinstance(value, str):
        return reduce_cmd(value)
    return _RC.idle if value is None else value


def _scalar_regs_tile(partitions: int) -> NkiTensor:
    from neuronsim.nki import language

    return language._new_tile((partitions, 1), DType.float32, "activation.reduce_regs")


def _scalar_add(dst: NkiTensor, part: NkiTensor, running: NkiTensor, name) -> None:
    """``dst = part + running`` on ScalarE (an identity activation with a bias tile)."""
    imm = {
        "func": ActFunc.copy,
        "scale": 1.0,
        "bias": 0.0,
        "bias_is_tile": True,
        "scale_is_tile": False,
        "reduce": False,
    }
    emit(
        "activation",
        Opcode.ACTIVATION,
        Engine.SCALAR,
        dst,
        (part, running),
        imm,
        name=name,
        roles=("data", "bias"),
    )


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    """``activation`` with ``reduce_cmd=reset_reduce``: the result and its sum along the free dims."""
    activation(
        dst,
        op,
        data,
        bias=bias,
        scale=scale,
        reduce_op=reduce_op,
        reduce_res=reduce_res,
        reduce_cmd=reduce_cmd.reset_reduce,
        name=name,
    )


# ---------------------------------------------------------------- VectorE / GpSimd / ScalarE element-wise


def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None):
    """Element-wise ``dst = data1 op data2`` on VectorE or GpSimd."""
    fn = "tensor_tensor"
    dst, data1, data2 = _tile(dst, "dst", fn), _tile(data1, "data1", fn), _tile(data2, "data2", fn)
    alu = alu_op(op)
    _same_shape(fn, data1, data2, "data1", "data2")
    _same_shape(fn, dst, data1, "dst", "data1")
    if data1.memory is Memory.PSUM and data2.memory is Memory.PSUM:
        raise _fail(fn, f"data1 and data2 cannot both be in PSUM ({_describe(data1)}, {_describe(data2)})")
    default = Engine.VECTOR
    if alu is AluOp.power or (
        dst.buf.dtype in _INT32 and data1.buf.dtype in _INT32 and data2.buf.dtype in _INT32
    ):  # GpSimd computes power and exact 32-bit integer arithmetic, but cannot reach PSUM
        psum = Memory.PSUM
        if dst.buf.memory is not psum and data1.buf.memory is not psum and data2.buf.memory is not psum:
            default = Engine.GPSIMD
    eng = default if engine is _UNKNOWN else _engine(engine, fn, (Engine.VECTOR, Engine.GPSIMD), default)
    emit(fn, Opcode.TENSOR_TENSOR, eng, dst, (data1, data2), {"op": alu}, name=name, roles=("data1", "data2"))


def tensor_scalar(
    dst,
    data,
    op0,
    operand0,
    reverse0=False,
    op1=None,
    operand1=None,
    reverse1=False,
    engine=engine.unknown,
    name=None,
):
    """``dst = (data op0 operand0) op1 operand1``, scalar or [P, 1] operands (VectorE/ScalarE/GpSimd)."""
    fn = "tensor_scalar"
    dst, data = _tile(dst, "dst", fn), _tile(data, "data", fn)
    _same_shape(fn, dst, data, "dst", "data")
    a0 = alu_op(op0, "op0")
    v0, t0 = _scalar_or_vector(fn, operand0, data, "operand0")
    srcs, roles = [data], ["data"]
    if t0 is not None:
        srcs.append(t0)
        roles.append("operand0")
    imm = {
        "op0": a0,
        "operand0": v0,
        "reverse0": bool(reverse0),
        "op1": None,
        "operand1": 0.0,
        "reverse1": bool(reverse1),
        "operand0_is_tile": t0 is not None,
        "operand1_is_tile": False,
    }
    if op1 is not None:
        imm["op1"] = alu_op(op1, "op1")
        v1, t1 = _scalar_or_vector(fn, operand1, data, "operand1")
        imm["operand1"] = v1
        imm["operand1_is_tile"] = t1 is not None
        if t1 is not None:
            srcs.append(t1)
            roles.append("operand1")
    eng = _engine(engine, fn, (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD), Engine.VECTOR)
    emit(fn, Opcode.TENSOR_SCALAR, eng, dst, srcs, imm, name=name, roles=roles)


def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, name=None):
    """``dst = (data op0 operand0) op1 operand1`` with operand1 a tile like data, on VectorE."""
    fn = "scalar_tensor_tensor"
    dst, data, operand1 = _tile(dst, "dst", fn), _tile(data, "data", fn), _tile(operand1, "operand1", fn)
    _same_shape(fn, dst, data, "dst", "data")
    _same_shape(fn, operand1, data, "operand1", "data")
    if data.memory is Memory.PSUM and operand1.memory is Memory.PSUM:
        raise _fail(fn, "data and operand1 cannot both be in PSUM")
    v0, t0 = _scalar_or_vector(fn, operand0, data, "operand0")
    srcs, roles = [data], ["data"]
    if t0 is not None:
        srcs.append(t0)
        roles.append("operand0")
    srcs.append(operand1)
    roles.append("operand1")
    imm = {
        "op0": alu_op(op0, "op0"),
        "operand0": v0,
        "operand0_is_tile": t0 is not None,
        "op1": alu_op(op1, "op1"),
    }
    if reverse0:
        imm["reverse0"] = True
    if reverse1:
        imm["reverse1"] = True
    emit(fn, Opcode.SCALAR_TENSOR_TENSOR, Engine.VECTOR, dst, srcs, imm, name=name, roles=roles)


def tensor_copy(dst, src, engine=engine.unknown, name=None):
    """Copy ``src`` into ``dst`` (same partitions and elements per partition) on VectorE/ScalarE/GpSimd."""
    fn = "tensor_copy"
    dst, src = _tile(dst, "dst", fn), _tile(src, "src", fn)
    _same_shape(fn, dst, src, "dst", "src")
    eng = _engine(engine, fn, (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD), Engine.VECTOR)
    emit(fn, Opcode.TENSOR_COPY, eng, dst, (src,), {}, name=name)


def memset(dst, value, engine=engine.unknown, name=None):
    """Fill ``dst`` with the constant ``value`` on VectorE or GpSimd."""
    fn = "memset"
    dst = _tile(dst, "dst", fn)
    eng = _engine(engine, fn, (Engine.VECTOR, Engine.GPSIMD), Engine.VECTOR)
    emit(fn, Opcode.MEMSET, eng, dst, (), {"value": float(value)}, name=name)


def reciprocal(dst, data, name=None):
    """``dst = 1 / data`` on VectorE."""
    fn = "reciprocal"
    dst, data = _tile(dst, "dst", fn), _tile(data, "data", fn)
    _same_shape(fn, dst, data, "dst", "data")
    imm = {
        "op0": AluOp.reciprocal,
        "operand0": 0.0,
        "reverse0": False,
        "op1": None,
        "operand1": 0.0,
        "reverse1": False,
        "operand0_is_tile": False,
        "operand1_is_tile": False,
    }
    emit(fn, Opcode.TENSOR_SCALAR, Engine.VECTOR, dst, (data,), imm, name=name, roles=("data",))


def _reduce_axes(fn: str, data: NkiTensor, axis) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, int) else tuple(int(a) for a in axis)
    nd = len(data.shape)
    axes = tuple(sorted(a + nd if a < 0 else a for a in axes))
    free_start = 1 if data.on_chip and data.ppair is None else 0
    if not axes or axes[0] < max(free_start, 1) or axes != tuple(range(axes[0], nd)):
        raise _fail(
            fn,
            f"axis={axis} must be the last contiguous free dimension(s) of {_describe(data)} "
            f"(e.g. {tuple(range(max(1, nd - 1), nd))}); the partition dimension cannot be reduced",
        )
    return axes


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    """Reduce the trailing free ``axis`` dims of ``data`` with ``op`` on VectorE."""
    fn = "tensor_reduce"
    dst, data = _tile(dst, "dst", fn), _tile(data, "data", fn)
    axes = _reduce_axes(fn, data, axis)
    kept = math.prod(data.shape[1 : axes[0]]) if data.ppair is None else math.prod(data.shape[: axes[0]])
    if dst.partitions != data.partitions or dst.free_size != kept:
        raise _fail(
            fn,
            f"dst {_describe(dst)} must have {data.partitions} partitions and {kept} elements per "
            f"partition after reducing axes {axes} of {_describe(data)}",
        )
    if len(data.ap_pattern()) - 1 != len(data.shape) - (1 if data.ppair is None and data.on_chip else 0):
        raise _fail(fn, f"{_describe(data)} has too many free dims to reduce", UnsupportedError)
    imm = {"op": alu_op(op), "num_axes": len(axes), "negate": bool(negate)}
    emit(fn, Opcode.TENSOR_REDUCE, Engine.VECTOR, dst, (data,), imm, name=name, roles=("data",))


def tensor_scalar_reduce(
    dst,
    data,
    op0,
    operand0,
    reduce_op,
    reduce_res,
    reverse0=False,
    reduce_cmd=reduce_cmd.reset_reduce,
    reduce_init=None,
    name=None,
):
    """``tensor_scalar`` with one operator, then its result reduced along the free dims (two instructions)."""
    if reduce_cmd not in (_RC.reset_reduce, "reset_reduce"):
        raise _fail(
            "tensor_scalar_reduce",
            f"reduce_cmd={reduce_cmd} is not simulated; use reset_reduce",
            UnsupportedError,
        )
    tensor_scalar(dst, data, op0, operand0, reverse0=reverse0, name=name)
    flat = dst.reshape((dst.shape[0], dst.free_size)) if dst.is_contiguous() and dst.ppair is None else dst
    tensor_reduce(reduce_res, reduce_op, flat, axis=tuple(range(1, len(flat.shape))), name=name)


def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None):
    """Scan along the free dim: ``dst[:, i] = (data0[:, i] op0 dst[:, i-1]) op1 data1[:, i]`` on VectorE."""
    fn = "tensor_tensor_scan"
    dst, data0, data1 = _tile(dst, "dst", fn), _tile(data0, "data0", fn), _tile(data1, "data1", fn)
    if reverse0 or reverse1:
        raise _fail(fn, "reverse0/reverse1 are not simulated", UnsupportedError)
    _same_shape(fn, data0, data1, "data0", "data1")
    _same_shape(fn, dst, data0, "dst", "data0")
    v, t = _scalar_or_vector(fn, initial, data0, "initial")
    srcs, roles = [data0, data1], ["data0", "data1"]
    if t is not None:
        srcs.append(t)
        roles.append("initial")
    imm = {
        "op0": alu_op(op0, "op0"),
        "op1": alu_op(op1, "op1"),
        "initial": v,
        "initial_is_tile": t is not None,
    }
    emit(fn, Opcode.TENSOR_TENSOR_SCAN, Engine.VECTOR, dst, srcs, imm, name=name, roles=roles)


def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
    """Copy ``src`` into ``dst`` where ``predicate`` is true (false with ``reverse_pred``), on VectorE."""
    fn = "tensor_copy_predicated"
    dst, predicate = _tile(dst, "dst", fn), _tile(predicate, "predicate", fn)
    if predicate.buf.dtype not in (DType.uint8, DType.uint16, DType.uint32, DType.bool_):
        raise _fail(fn, f"predicate must be uint8/uint16/uint32; got {_describe(predicate)}", DtypeError)
    if not _is_tile(src):
        from neuronsim.nki import language

        src = language.full(dst.shape, float(src), dtype=dst.dtype)
    _same_shape(fn, dst, src, "dst", "src")
    _same_shape(fn, dst, predicate, "dst", "predicate")
    emit(
        fn,
        Opcode.TENSOR_COPY_PREDICATED,
        Engine.VECTOR,
        dst,
        (src, predicate),
        {"reverse_pred": bool(reverse_pred)},
        name=name,
        roles=("src", "predicate"),
    )


def _broadcast_operand(value, like: NkiTensor, dtype) -> NkiTensor:
    """A view shaped like ``like`` of a scalar or [P, 1] operand (step-0 free dims)."""
    from neuronsim.nki import language

    if not _is_tile(value):
        value = language.full((like.partitions, 1), float(value), dtype=dtype)
    col = value.reshape((value.shape[0], 1)) if value.free_size == 1 and value.ppair is None else value
    return NkiTensor(col.buf, col.offset, (col.dims[0],) + tuple((0, n) for n in like.shape[1:]))


def select_reduce(
    dst,
    predicate,
    on_true,
    on_false,
    reduce_res=None,
    reduce_cmd=reduce_cmd.idle,
    reduce_op=AluOp.maximum,
    reverse_pred=False,
    name=None,
):
    """``dst = where(predicate, on_true, on_false)`` on VectorE, with an optional max into ``reduce_res``."""
    fn = "select_reduce"
    dst, predicate, on_true = (
        _tile(dst, "dst", fn),
        _tile(predicate, "predicate", fn),
        _tile(on_true, "on_true", fn),
    )
    _same_shape(fn, dst, on_true, "dst", "on_true")
    _same_shape(fn, dst, predicate, "dst", "predicate")
    if _is_tile(on_false) and on_false.free_size == on_true.free_size:
        other = on_false
    else:
        other = _broadcast_operand(on_false, on_true, DType.float32)
    a, b = (other, on_true) if reverse_pred else (on_true, other)
    emit(
        fn,
        Opcode.SELECT,
        Engine.VECTOR,
        dst,
        (predicate, a, b),
        {},
        name=name,
        roles=("predicate", "on_true", "on_false"),
    )
    if reduce_res is not None:
        flat = dst.reshape((dst.shape[0], dst.free_size)) if dst.is_contiguous() else dst
        tensor_reduce(reduce_res, reduce_op, flat, axis=tuple(range(1, len(flat.shape))), name=name)


def bn_stats(dst, data, name=None):
    """Per-partition mean/variance statistics of ``data`` (<= 512 elements) into ``dst`` [P, 6] (VectorE)."""
    fn = "bn_stats"
    dst, data = _tile(dst, "dst", fn), _tile(data, "data", fn)
    limit = current_trace().chip.bn_stats_free_max
    if data.free_size > limit:
        raise _fail(
            fn,
            f"data {_describe(data)} has {data.free_size} elements per partition; the limit is {limit} "
            f"(nl.tile_size.bn_stats_fmax)",
        )
    if dst.partitions != data.partitions or dst.free_size != 6:
        raise _fail(fn, f"dst must be [{data.partitions}, 6]; got {_describe(dst)}")
    emit(fn, Opcode.BN_STATS, Engine.VECTOR, dst, (data,), {}, name=name, roles=("data",))


def bn_aggr(dst, data, name=None):
    """Aggregate ``bn_stats`` outputs into ``dst`` [P, 2] = (mean, variance), on VectorE."""
    fn = "bn_aggr"
    dst, data = _tile(dst, "dst", fn), _tile(data, "data", fn)
    if data.free_size % 6 and data.free_size % 3:
        raise _fail(fn, f"data {_describe(data)} must hold bn_stats results (a multiple of 6 per partition)")
    if dst.partitions != data.partitions or dst.free_size != 2:
        raise _fail(fn, f"dst must be [{data.partitions}, 2]; got {_describe(dst)}")
    emit(fn, Opcode.BN_AGGR, Engine.VECTOR, dst, (data,), {}, name=name, roles=("data",))


def max8(dst, src, name=None):
    """The 8 largest values of each partition of ``src``, descending, into ``dst`` [P, 8] (VectorE)."""
    fn = "max8"
    dst, src = _tile(dst, "dst", fn), _tile(src, "src", fn)
    if not 8 <= src.free_size <= 16384:
        raise _fail(fn, f"src {_describe(src)} must have 8 to 16384 elements per partition")
    if dst.partitions != src.partitions or dst.free_size != 8:
        raise _fail(fn, f"dst must be [{src.partitions}, 8]; got {_describe(dst)}")
    emit(fn, Opcode.MAX8, Engine.VECTOR, dst, (src,), {}, name=name)


def nc_find_index8(dst, data, vals, name=None):
    """Index of the first occurrence of each of the 8 ``vals`` in each partition of ``data`` (VectorE)."""
    fn = "nc_find_index8"
    dst, data, vals = _tile(dst, "dst", fn), _tile(data, "data", fn), _tile(vals, "vals", fn)
    if vals.free_size != 8 or dst.free_size != 8:
        raise _fail(fn, f"vals and dst need 8 elements per partition ({_describe(vals)}, {_describe(dst)})")
    emit(fn, Opcode.NC_FIND_INDEX8, Engine.VECTOR, dst, (data, vals), {}, name=name, roles=("data", "vals"))


# ---------------------------------------------------------------- GpSimd


def _pattern(fn: str, pattern) -> tuple[tuple[int, int], ...]:
    pairs = tuple((int(s), int(n)) for s, n in pattern)
    if not 1 <= len(pairs) <= 4:
        raise _fail(fn, f"pattern {pattern} must have 1 to 4 [step, num] pairs")
    return pairs


def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    """``dst[p, ...] = offset + p * channel_multiplier + sum(i_k * step_k)`` on GpSimd."""
    fn = "iota"
    dst = _tile(dst, "dst", fn)
    pairs = _pattern(fn, pattern)
    if math.prod(n for _, n in pairs) != dst.free_size:
        raise _fail(
            fn,
            f"pattern {pattern} has {math.prod(n for _, n in pairs)} elements but dst {_describe(dst)} "
            f"has {dst.free_size} per partition",
        )
    imm = {"pattern": pairs, "offset": int(offset), "channel_multiplier": int(channel_multiplier)}
    emit(fn, Opcode.IOTA, Engine.GPSIMD, dst, (), imm, name=name)


def affine_select(
    dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=AluOp.equal, offset=0, name=None
):
    """``dst = on_true_tile`` where ``cmp_op(affine(p, i), 0)`` holds, else ``on_false_value`` (GpSimd)."""
    fn = "affine_select"
    dst, on_true_tile = _tile(dst, "dst", fn), _tile(on_true_tile, "on_true_tile", fn)
    pairs = _pattern(fn, pattern)
    _same_shape(fn, dst, on_true_tile, "dst", "on_true_tile")
    if math.prod(n for _, n in pairs) != dst.free_size:
        raise _fail(
            fn,
            f"pattern {pattern} has {math.prod(n for _, n in pairs)} elements but dst has "
            f"{dst.free_size} per partition",
        )
    imm = {
        "pattern": pairs,
        "offset": int(offset),
        "channel_multiplier": int(channel_multiplier),
        "cmp_op": alu_op(cmp_op, "cmp_op"),
        "on_false_value": float(on_false_value),
    }
    emit(
        fn, Opcode.AFFINE_SELECT, Engine.GPSIMD, dst, (on_true_tile,), imm, name=name, roles=("on_true_tile",)
    )


def tensor_partition_reduce(dst, op, data, name=None):
    """Reduce ``data`` [P, F] across partitions into ``dst`` [1, F] on GpSimd."""
    fn = "tensor_partition_reduce"
    dst, data = _tile(dst, "dst", fn), _tile(data, "data", fn)
    if dst.partitions != 1 or dst.free_size != data.free_size:
        raise _fail(fn, f"dst must be [1, {data.free_size}]; got {_describe(dst)}")
    emit(
        fn,
        Opcode.TENSOR_PARTITION_REDUCE,
        Engine.GPSIMD,
        dst,
        (data,),
        {"op": alu_op(op)},
        name=name,
        roles=("data",),
    )


# ---------------------------------------------------------------- DMA


def _check_dma(fn: str, dst: NkiTensor, src: NkiTensor) -> None:
    psum = Memory.PSUM
    if dst.buf.memory is not psum and src.buf.memory is not psum and dst.size == src.size:
        return
    for role, v in (("dst", dst), ("src", src)):
        if v.buf.memory is psum:
            raise _fail(
                fn,
                f"DMA engines cannot access PSUM; {role} is {_describe(v)} (copy it to SBUF with "
                f"nisa.tensor_copy first)",
                EngineAccessError,
            )
    raise _fail(
        fn,
        f"src {_describe(src)} has {src.size} elements but dst {_describe(dst)} has {dst.size}; "
        f"element counts must match",
    )


def dma_copy(
    dst,
    src,
    priority=None,
    oob_mode=oob_mode.error,
    dge_mode=dge_mode.unknown,
    engine=engine.unknown,
    name=None,
):
    """Copy ``src`` to ``dst`` (HBM/SBUF <-> HBM/SBUF) on the DMA engines (casts through fp32)."""
    fn = "dma_copy"
    if type(dst) is not NkiTensor or type(src) is not NkiTensor:
        dst, src = _tile(dst, "dst", fn), _tile(src, "src", fn)
    _check_dma(fn, dst, src)
    emit(fn, Opcode.DMA_COPY, Engine.DMA, dst, (src,), {}, name=name, queue=current_trace().next_dma_queue())


def dma_transpose(
    dst, src, axes=None, priority=None, dge_mode=dge_mode.unknown, oob_mode=oob_mode.error, name=None
):
    """2-D transpose ``src`` [A, B] (HBM or SBUF) into ``dst`` [B, A] in SBUF with the DMA engines."""
    fn = "dma_transpose"
    dst, src = _tile(dst, "dst", fn), _tile(src, "src", fn)
    if axes not in (None, (1, 0), [1, 0]):
        raise _fail(fn, f"axes={axes} is not simulated; only 2-D (1, 0) transposes are", UnsupportedError)
    _check_dma(fn, dst, src)
    if dst.memory is not Memory.SBUF:
        raise _fail(fn, f"dst must be in SBUF; got {_describe(dst)}", EngineAccessError)
    emit(
        fn,
        Opcode.DMA_TRANSPOSE,
        Engine.DMA,
        dst,
        (src,),
        {},
        name=name,
        queue=current_trace().next_dma_queue(),
    )


# ---------------------------------------------------------------- multi-core and misc


def core_barrier(data, cores, engine=engine.gpsimd, name=None):
    """Synchronize the cores of an LNC=2 launch: every core finishes what came before before any goes on."""
    trace = current_trace()
    if tuple(cores) != (0, 1):
        raise _fail("core_barrier", f"cores={cores}; only (0, 1) is supported")
    trace.barriers.append(len(trace.records))


def get_nc_version():
    """The nc_version of the chip being traced for (gen3 = trn2, gen4 = trn3)."""
    return nc_version(current_trace().chip.nki_target)


def _unsupported(fn: str):
    def call(*args, **kwargs):
        raise UnsupportedError(
            f"nisa.{fn} is not simulated by neuronsim (it has no instruction in the IR, docs/ir.md)",
            instruction=f"nisa.{fn}",
            location=caller_location(),
        )

    call.__name__ = fn
    call.__qualname__ = fn
    call.__doc__ = f"Not simulated: raises UnsupportedError (``nisa.{fn}`` has no IR instruction)."
    return call


for _fn in (
    "nc_matmul_mx",
    "activate2",
    "tensor_scalar_cumulative",
    "local_gather",
    "nc_n_gather",
    "nc_stream_shuffle",
    "rng",
    "dropout",
    "set_rng_seed",
    "rand_set_state",
    "rand_get_state",
    "rand2",
    "exponential",
    "sequence_bounds",
    "dma_compute",
    "quantize_mx",
    "range_select",
    "sendrecv",
    "register_alloc",
    "register_move",
    "register_load",
    "register_store",
    "nc_match_replace8",
    "nonzero_with_count",
):
    globals()[_fn] = _unsupported(_fn)
del _fn
