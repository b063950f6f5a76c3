"""Virtual registers and the loops they drive (S16 ``nisa.register_*``, ``nl.dynamic_range``,
``nl.fori_loop``/``while_loop``, ``while reg:``), recorded as the IR's control instructions
(``sim/engines/control.py``).

A register's value is known only when the kernel runs. A loop on one is recorded once, as the
compiler emits it: its body between a test that leaves the loop and a jump back to that test. The
test and the jump are ``BRANCH`` records whose targets ``resolve_branches`` fills in when the
Program is built (records may still be inserted before then). A tile used both inside a dynamic
loop and outside it stays live over the whole loop (``nki/control_flow.py``): every trip reuses it.
"""

from __future__ import annotations

import linecache
import sys

from neuronsim.errors import ConstraintError
from neuronsim.nki.isa.common import _describe, _fail, _tile, emit
from neuronsim.nki.tensor import TensorView
from neuronsim.nki.trace import LoopFrame, caller_location, current_trace
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import Engine, Memory, Opcode


class VirtualRegister:
    """A 32-bit register of the engine sequencers (``nisa.register_alloc``). Its value is known only
    while the kernel runs: use it as a loop bound, a ``while`` condition, or a ``scalar_offset``."""

    def __init__(self, number: int | None = None, frozen: bool = False, state=None):
        # number: the IR register; None for a register whose value the tracer knows (a rank id,
        # ``collectives.RankRegister``, which sets ``known_value``)
        self.number, self.frozen, self.state = number, frozen, state

    def __repr__(self) -> str:
        return f"VirtualRegister(r{self.number})"

    def __bool__(self):
        """``while reg:`` — the loop test at the ``while`` line (its first evaluation opens the loop,
        the next one, after the body, closes it); other truth tests cannot be traced."""
        if self.number is None:
            raise TypeError(f"{self!r}: Python control flow on a register is not traced")
        return _while_test(self, sys._getframe(1))

    def __int__(self):
        raise TypeError(f"{self!r}: a register's value is not known while the kernel is traced; "
                        "use it as a loop bound (nl.dynamic_range, nl.fori_loop), a while condition "
                        "or a scalar_offset")

    __index__ = __int__

    def offset_word(self, fn: str = "dma_copy") -> TensorView:
        """An SBUF int32 word holding this register's value now (a register used as a ``scalar_offset``)."""
        return register_word(self, fn)


class DynamicLoop:
    """The two BRANCH records of one loop on a register: the test at its top, the jump at its end."""

    __slots__ = ("location", "closed")

    def __init__(self, location):
        self.location, self.closed = location, False


def _new_register() -> VirtualRegister:
    trace = current_trace()
    trace.registers += 1
    return VirtualRegister(trace.registers - 1)


def _register(x, role: str, fn: str) -> VirtualRegister:
    if not isinstance(x, VirtualRegister):
        raise _fail(fn, f"{role} must be a VirtualRegister (nisa.register_alloc); got {type(x).__name__}")
    if x.number is None:
        raise _fail(fn, f"{role} {x!r} is a value the tracer knows, not a device register")
    return x


def _word(x, role: str, fn: str) -> TensorView:
    v = _tile(x, role, fn)
    if v.free_size * v.partitions != 1:
        raise _fail(fn, f"{role} must hold one element (shape [1] or [1, 1]); got {_describe(v)}")
    return v


def _known(x):
    """A register whose value the tracer knows (a rank id) as that int; anything else unchanged."""
    value = getattr(x, "known_value", None)
    return x if value is None else int(value)


def _move(dst: VirtualRegister, src, fn: str, add: int = 0) -> None:
    src = _known(src)
    if isinstance(src, VirtualRegister):
        emit(fn, Opcode.REGISTER_MOVE, Engine.SYNC, None, (), {"dst_reg": dst.number, "src_reg": src.number,
                                                             "value": int(add)})
    elif isinstance(src, (int,)) and not isinstance(src, bool):
        emit(fn, Opcode.REGISTER_MOVE, Engine.SYNC, None, (), {"dst_reg": dst.number, "src_reg": -1,
                                                             "value": int(src) + add})
    else:
        raise _fail(fn, f"src must be an int or a VirtualRegister; got {type(src).__name__}")


def register_alloc(x=None) -> VirtualRegister:
    """A new register: uninitialized (reads 0), set to the int ``x``, or loaded from the one-element
    tensor ``x`` (as AWS's MoE kernels write ``register_alloc(t[0, 0])``)."""
    reg = _new_register()
    if isinstance(x, TensorView):
        register_load(reg, x)
    elif x is not None:
        _move(reg, x, "register_alloc")
    return reg


def register_move(dst, src) -> None:
    """``dst = src``: an int constant or another register."""
    dst = _register(dst, "dst", "register_move")
    if dst.frozen:
        raise _fail("register_move", f"{dst!r} is a loop's induction register; the loop sets it")
    _move(dst, src, "register_move")


def register_load(dst, src) -> None:
    """``dst`` = the one integer element of ``src`` (SBUF or HBM)."""
    dst = _register(dst, "dst", "register_load")
    v = _word(src, "src", "register_load")
    if not v.buf.dtype.is_int or v.buf.dtype is DType.bool_:
        raise _fail("register_load", f"src must be an integer tensor (a register holds 32 bits); got "
                    f"{_describe(v)}")
    emit("register_load", Opcode.REGISTER_LOAD, Engine.SYNC, None, (v,), {"dst_reg": dst.number})


def register_store(dst, src) -> None:
    """The one int32/uint32 element of ``dst`` (SBUF or HBM) = ``src``'s value."""
    src = _register(src, "src", "register_store")
    v = _word(dst, "dst", "register_store")
    if v.buf.dtype not in (DType.int32, DType.uint32):
        raise _fail("register_store",
                    f"dst must be int32 or uint32 (a register holds 32 bits); got {_describe(v)}")
    emit("register_store", Opcode.REGISTER_STORE, Engine.SYNC, v, (), {"src_reg": src.number})


def register_word(reg: VirtualRegister, fn: str) -> TensorView:
    if reg.number is None:
        raise _fail(fn, f"{reg!r} is not a device register")
    """An SBUF int32 word holding ``reg``'s value now (a register used as a ``scalar_offset``)."""
    trace = current_trace()
    buf = trace.new_tile(f"r{reg.number}_word", Memory.SBUF, (1, 1), DType.int32, caller_location(),
                         "register")
    word = TensorView.whole(buf)
    emit(fn, Opcode.REGISTER_STORE, Engine.SYNC, word, (), {"src_reg": reg.number})
    return word


# ---------------------------------------------------------------- loops


def _branch(fn: str, loop: DynamicLoop, role: str, **imm) -> None:
    emit(fn, Opcode.BRANCH, Engine.SYNC, None, (), {"loop": loop, "role": role, **imm})


def _open(trace, loop: DynamicLoop, fn: str, **test) -> None:
    _branch(fn, loop, "exit", **test)
    trace.dynamic_loops += 1
    trace.loops.append(LoopFrame("dynamic", loop.location))


def _close(trace, loop: DynamicLoop, fn: str) -> None:
    _branch(fn, loop, "back", cmp="always")
    loop.closed = True
    for i in range(len(trace.loops) - 1, -1, -1):
        if trace.loops[i].kind == "dynamic" and trace.loops[i].location == loop.location:
            del trace.loops[i]
            break


def dynamic_loop(start, stop, step, fn: str, location, fresh_induction: bool = False):
    """``for i in range(start, stop, step)`` on the device: the body is traced once and ``i`` is a
    register. ``start``/``stop`` are ints or registers; ``step`` a positive int."""
    if isinstance(step, VirtualRegister) or int(step) <= 0:
        raise ConstraintError(f"nl.{fn}: step={step!r}; a dynamic loop's step is a positive int constant",
                              location=location)
    trace = current_trace()
    start, stop = _known(start), _known(stop)
    counter = _new_register()
    _move(counter, start, fn)
    loop = DynamicLoop(location)
    if isinstance(stop, VirtualRegister):
        bound = {"rhs_reg": stop.number}
    else:
        bound = {"rhs_reg": -1, "value": int(stop)}
    _open(trace, loop, fn, cmp="greater_equal", reg=counter.number, **bound)
    induction = VirtualRegister(counter.number, frozen=True)
    if fresh_induction:  # passed by value: the body may write it without changing the loop
        induction = _new_register()
        _move(induction, counter, fn)
    yield induction
    _move(counter, counter, fn, add=int(step))
    _close(trace, loop, fn)


def while_register(cond: VirtualRegister, body, fn: str, location) -> None:
    """``nl.while_loop(init, body_fun)``: while the register is nonzero, ``cond = body_fun(cond)``."""
    trace = current_trace()
    reg = _new_register()
    _move(reg, _register(cond, "init", fn), fn)
    loop = DynamicLoop(location)
    _open(trace, loop, fn, cmp="equal", reg=reg.number, rhs_reg=-1, value=0)
    nxt = body(reg)
    if nxt is not None and nxt is not reg:
        _move(reg, _register(nxt, "body_fun's result", fn), fn)
    _close(trace, loop, fn)


def _while_test(reg: VirtualRegister, frame) -> bool:
    code, line = frame.f_code, frame.f_lineno
    if not linecache.getline(code.co_filename, line).lstrip().startswith("while"):
        raise TypeError(f"{reg!r}: a register's value is not known while the kernel is traced; it can be "
                        f"the condition of a `while` loop, not of an `if` (use nl.fori_loop / while_loop)")
    trace = current_trace()
    key = (code, line, reg.number)  # the `while reg:` loops being traced
    loop = trace.open_whiles.pop(key, None)
    if loop is not None:  # the test after the body: the loop is recorded
        _close(trace, loop, "while")
        return False
    loop = DynamicLoop(caller_location())
    _open(trace, loop, "while", cmp="equal", reg=reg.number, rhs_reg=-1, value=0)
    trace.open_whiles[key] = loop
    return True


def in_dynamic_loop(trace) -> bool:
    """Whether the trace is inside a loop on a register (a barrier there is an instruction: a loop
    cannot span the Programs that barriers elsewhere split the kernel into)."""
    return any(f.kind == "dynamic" for f in trace.loops) or bool(trace.open_whiles)


def barrier(fn: str) -> None:
    """The cores meet here: a phase boundary (a new Program), or inside a loop on a register a
    ``CORE_BARRIER`` instruction, at which each core's run pauses until every core has reached it
    (``nki/launch.py``)."""
    trace = current_trace()
    if in_dynamic_loop(trace):
        emit(fn, Opcode.CORE_BARRIER, Engine.SYNC, None, (), {"barrier": trace.loop_barriers})
        trace.loop_barriers += 1
    else:
        trace.barriers.append(len(trace.records))
