"""The trace of one kernel instance: its buffers, instruction records and loops, and source lines.

A kernel runs once per signature (and SPMD instance) with tracer tensors. Every ``nisa`` call
appends one instruction record to the :class:`Trace` of this thread, with the ``file:line`` of the
kernel line that made it (:func:`caller_location`). Loops are Python loops, so they unroll;
``affine_range`` also records which loop an allocation happened in, for the allocator's rotating
buffers.

Instruction records keep views, not IR access patterns: on-chip addresses are only known once the
allocator has seen the whole trace (``allocate.py``); ``build.py`` turns the records into a Program.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

from neuronsim.errors import ConstraintError
from neuronsim.nki.buffer import Buffer, check_on_chip
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import ON_CHIP, Memory

_NKI_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# id(code) -> (code, its display file name, or None for code inside neuronsim/nki). Keyed by id: a
# code object's hash is recomputed from its contents (names, constants) at every lookup; the entry
# keeps the code alive, so its id is not reused.
_where: dict = {}
_lines: dict = {}  # (id(code), bytecode offset) -> "file:line": f_lineno walks the code's line table


def _display_name(code) -> str | None:
    filename = code.co_filename
    if filename.startswith(_NKI_DIR):
        name = None
    else:
        # relative to the working directory when the kernel file is under it, else its file name
        # (``kernel.py:12``, as errors read; a path outside says little more and buries the line)
        try:
            rel = os.path.relpath(filename)
        except ValueError:
            rel = ".."
        name = rel if not rel.startswith("..") else os.path.basename(filename)
    _where[id(code)] = (code, name)
    return name


class _LocationOverride(threading.local):
    location = None  # set while a deferred instruction is recorded: the line that made it


_location_override = _LocationOverride()
_overriding = 0  # threads with an override set: caller_location reads the thread-local only then
_override_lock = threading.Lock()


@contextlib.contextmanager
def overriding_location(location: str | None) -> Iterator[None]:
    """Instructions recorded inside are located at ``location`` (a deferred legacy result's line)."""
    global _overriding
    with _override_lock:
        _overriding += 1
    _location_override.location = location
    try:
        yield
    finally:
        _location_override.location = None
        with _override_lock:
            _overriding -= 1


def code_location(code, line: int | None = None) -> str:
    """``file:line`` of a code object (its first line unless ``line``), named as kernel lines are."""
    name = _display_name(code) or os.path.basename(code.co_filename)
    return f"{name}:{code.co_firstlineno if line is None else line}"


def caller_location(depth: int = 2) -> str | None:
    """``file:line`` of the innermost frame outside ``neuronsim/nki`` (the kernel's line)."""
    if _overriding and _location_override.location is not None:
        return _location_override.location
    f = sys._getframe(depth)
    where = _where
    while f is not None:
        code = f.f_code
        hit = where.get(id(code))
        name = hit[1] if hit is not None else _display_name(code)
        if name is not None:
            key = (id(code), f.f_lasti)
            location = _lines.get(key)
            if location is None:
                location = _lines[key] = f"{name}:{f.f_lineno}"
            return location
        f = f.f_back
    return None


class LoopFrame:
    __slots__ = ("kind", "location", "iteration")

    def __init__(self, kind: str, location: str | None):
        self.kind = kind
        self.location = location
        self.iteration = 0


class Trace:
    """Everything one kernel instance records: buffers, instruction records, loops, side data."""

    def __init__(self, name: str, chip: ChipSpec, program_id: tuple[int, ...], grid: tuple[int, ...]):
        self.name = name
        self.chip = chip
        self.program_id = program_id
        self.grid = grid
        self.buffers: list[Buffer] = []
        self.hbm_buffers: list[Buffer] = []  # those in HBM (tiles are most buffers; HBM checks skip them)
        self.records: list[tuple] = []  # (opcode, engine, dst, srcs, imm, location, name, queue, dst2)
        self.loops: list[LoopFrame] = []
        self.affine_key: tuple = ()  # locations of the enclosing affine_range loops
        self.aliases: dict[int, list[Buffer]] = {}
        self.site_counts: dict[Any, int] = {}
        self.dma_queue = 0
        self.matmul_flops = 0
        self.transpose_flops = 0
        self.prints: list[tuple[str, Buffer]] = []
        self.barriers: list[int] = []  # record index where each core_barrier split the program
        self.loop_barriers = 0  # CORE_BARRIER instructions recorded (barriers inside register loops)
        self.exchanges: list[tuple] = []  # sendrecv calls: (rank, send_to_rank, recv_from_rank, location)
        # The collective launch this trace is part of (nki.collectives): this rank and the world size,
        # and the collectives called, in order: (kind, group, staging buffer name, location).
        self.rank, self.world = launch_rank.value
        self.collectives: list[tuple] = []
        self.identity: dict = {}
        self.names: dict[str, int] = {}
        self.scalar_regs = None  # the ScalarE reduce registers' value (emulated, see isa.activation)
        self.hbm_fill: dict[int, float] = {}  # HBM buffer id -> value the host fills it with (nl.zeros/full)
        self.constants: dict = {}  # HBM buffer id -> numpy array (nl.shared_constant)
        # A result whose instruction waits for its destination (the legacy API's ``t[...] = nisa.op(...)``):
        # a callable emitting it into its own tile, run before any other instruction is recorded.
        self.pending = None
        self.registers = 0  # virtual registers allocated (isa/registers.py)
        self.dynamic_loops = 0  # loops on a register opened (their BRANCH records need resolving)
        self.open_whiles: dict = {}  # `while reg:` loops whose body is being traced

    def unique_name(self, name: str) -> str:
        n = self.names.get(name)
        self.names[name] = 1 if n is None else n + 1
        return name if n is None else f"{name}_{n}"

    def new_buffer(
        self,
        name: str,
        memory: Memory,
        shape,
        dtype,
        location,
        *,
        kind: str = "scratch",
        shared: bool = False,
        tag: str = "",
        register: bool = True,
    ) -> Buffer:
        buf = Buffer(
            len(self.buffers),
            self.unique_name(name),
            memory,
            shape if type(shape) is tuple else tuple(int(s) for s in shape),
            dtype,
            kind,
            location,
            shared,
        )
        self.buffers.append(buf)
        if memory is Memory.HBM:
            self.hbm_buffers.append(buf)
        if register and memory in ON_CHIP:
            affine = self.affine_key
            site = (location, tag, affine)
            buf.site = site
            buf.site_index = self.site_counts.get(site, 0)
            self.site_counts[site] = buf.site_index + 1
            buf.rotating = bool(affine)
        return buf

    def new_tile(self, name: str, memory: Memory, shape: tuple[int, ...], dtype: DType, location, tag: str):
        """An on-chip buffer that fits the chip (checked), registered at its allocation site."""
        check_on_chip(self.chip, shape, dtype, memory, name, location)
        n = self.names.get(name)
        self.names[name] = 1 if n is None else n + 1
        buf = Buffer(len(self.buffers), name if n is None else f"{name}_{n}", memory, shape, dtype, "scratch",
                     location)
        self.buffers.append(buf)
        affine = self.affine_key
        site = (location, tag, affine)
        buf.site = site
        index = buf.site_index = self.site_counts.get(site, 0)
        self.site_counts[site] = index + 1
        buf.rotating = bool(affine)
        return buf

    def next_dma_queue(self) -> int:
        q = self.dma_queue
        self.dma_queue = (q + 1) % self.chip.dma_queues_per_engine
        return q


class _LaunchRank(threading.local):
    value = (0, 1)  # (rank, world size) of the collective launch being traced (nki/collectives.py)


launch_rank = _LaunchRank()


class _CurrentTrace(threading.local):
    trace: Trace | None = None


_current = _CurrentTrace()


def current_trace() -> Trace:
    trace = _current.trace
    if trace is None:
        raise ConstraintError(
            "NKI language and ISA calls are only valid inside a kernel being traced "
            "(an @nki.jit function run through nki.simulate or called with arrays)",
            location=caller_location(),
        )
    return trace


def active_trace() -> Trace | None:
    return _current.trace


class tracing:
    """Context manager making ``trace`` the current trace of this thread."""

    def __init__(self, trace: Trace):
        self.trace = trace

    def __enter__(self) -> Trace:
        self.prev = _current.trace
        _current.trace = self.trace
        return self.trace

    def __exit__(self, *exc) -> None:
        _current.trace = self.prev


def loop(kind: str, start, stop=None, step=1):
    """The iterator behind ``affine_range`` / ``sequential_range`` / ``static_range``."""
    if stop is None:
        start, stop = 0, start
    r = range(int(start), int(stop), int(step))
    trace = _current.trace
    if trace is None:
        return iter(r)
    return _traced_loop(trace, kind, r, caller_location(3))


def _traced_loop(trace: Trace, kind: str, r: range, location):
    frame = LoopFrame(kind, location)
    trace.loops.append(frame)
    outer_key = trace.affine_key
    if kind == "affine":
        trace.affine_key = outer_key + (location,)
    try:
        for i in r:
            yield i
            frame.iteration += 1
    finally:
        trace.loops.remove(frame)
        trace.affine_key = outer_key
