"""What every ``nki.isa`` call shares: operator names, checks, and recording an instruction."""

from __future__ import annotations

from neuronsim.errors import ConstraintError, EngineAccessError, UnsupportedError
from neuronsim.nki.isa.enums import (
    _ENGINES,
    _UNKNOWN,
    engine,
)
from neuronsim.nki.tensor import TensorView
from neuronsim.nki.trace import caller_location, current_trace
from neuronsim.nki.types import to_sim_dtype
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import MATMUL_OPS, ActFunc, AluOp, Engine, Memory, Opcode
from neuronsim.sim.validate import ENGINE_READS, ENGINE_WRITES

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


def _tile(x, role: str, fn: str) -> TensorView:
    if not isinstance(x, TensorView):
        raise ConstraintError(f"{role} must be an NKI tensor (a kernel argument or a tile), got "
                              f"{type(x).__name__}", instruction=f"nisa.{fn}", location=caller_location())
    return x


def _is_tile(x) -> bool:
    return isinstance(x, TensorView)


def _scratch_tile(shape: tuple[int, ...], dtype, tag: str) -> TensorView:
    """An SBUF tile a call needs beside its operands (a constant operand as a tile, a register)."""
    buf = current_trace().new_tile(tag, Memory.SBUF, shape, to_sim_dtype(dtype), caller_location(), tag)
    return TensorView.whole(buf)


def _describe(v: TensorView) -> str:
    dims = "x".join(map(str, v.shape))
    return f"{v.buf.memory.name} tile '{v.buf.name}' [{dims}] {v.dtype}"


def _box(v: TensorView) -> tuple[int, int, int, int]:
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
    dst: TensorView | None,
    srcs=(),
    imm=None,
    *,
    name=None,
    dst2: TensorView | None = None,
    queue: int = 0,
    roles=None,
) -> int:
    """Check engine/memory access, update liveness and PSUM accumulation state, record the instruction."""
    trace = current_trace()
    if trace.pending is not None:  # a deferred result is emitted first, in program order
        flush, trace.pending = trace.pending, None
        flush()
    records = trace.records
    idx = len(records)
    location = caller_location()
    reads = ENGINE_READS[eng]
    hbm = Memory.HBM
    for v in srcs:
        if v.indirect is not None:
            _indirect_operand(fn, v, location)
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
        if dst.indirect is not None:
            _indirect_operand(fn, dst, location)
        _write(fn, eng, dst, idx, location, opcode)
    if dst2 is not None:
        _write(fn, eng, dst2, idx, location, opcode)
    records.append((opcode, eng, dst, tuple(srcs), {} if imm is None else imm, location, name, queue, dst2))
    return idx


def _indirect_operand(fn: str, v: TensorView, location) -> None:
    raise UnsupportedError(
        f"nisa.{fn}: {_describe(v)} is an indirect view (scalar_offset / vector_offset); only "
        f"nisa.dma_copy moves indirect views",
        instruction=f"nisa.{fn}",
        location=location,
    )


def _write(fn: str, eng: Engine, v: TensorView, idx: int, location, opcode) -> None:
    b = v.buf
    if b.memory not in ENGINE_WRITES[eng]:
        writes = ENGINE_WRITES[eng]
        raise EngineAccessError(
            f"the {eng.name.lower()} engine cannot write {b.memory.name}; the destination is "
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
        if b.acc_boxes is not None and opcode not in MATMUL_OPS:
            b.acc_boxes.append(_box(v))


def _access_error(fn, eng, v, srcs, roles, location, reads, verb):
    pos = next(i for i, s in enumerate(srcs) if s is v)
    role = roles[pos] if roles else "src"
    raise EngineAccessError(
        f"the {eng.name.lower()} engine cannot {verb} {v.buf.memory.name}; "
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
    return cls(what, instruction=f"nisa.{fn}", location=caller_location())


def _same_shape(fn: str, a: TensorView, b: TensorView, ra: str, rb: str) -> None:
    if a.partitions != b.partitions or a.free_size != b.free_size:
        raise _fail(
            fn,
            f"{ra} is {a.partitions}x{a.free_size} (partitions x free elements) but {rb} is "
            f"{b.partitions}x{b.free_size}; {ra} = {_describe(a)}, {rb} = {_describe(b)}",
        )


def _scalar_or_vector(fn: str, x, data: TensorView, role: str):
    """(float immediate, tile or None) for an operand that is a constant or a [P, 1] tile."""
    if x is None:
        return 0.0, None
    if _is_tile(x):
        if x.partitions != data.partitions or x.free_size != 1:
            raise _fail(fn, f"{role} must be a scalar or a [{data.partitions}, 1] tile; got {_describe(x)}")
        return 0.0, x
    return float(x), None
