"""The Numba executor: a whole Program runs in one compiled call, no Python per instruction.

The Program arrives encoded (``encoding.py``) and validated: every address is known to be in
bounds, so the kernels do no checks. The loop calls each instruction's engine kernel through a
table of entry addresses indexed by opcode. Each opcode's kernel is a compile unit of its own,
compiled (or loaded from the disk cache) the first time a Program uses that opcode: a process
compiles only what it runs, and the loop itself, which names no kernel, compiles in about a second.
When the loop meets an opcode whose entry is still empty it returns that instruction's index;
``execute`` fills the entry and resumes there, so instructions still run once each, in order.

Tiered (the default executor; Programs with branches too): nothing is compiled in the caller's thread. A unit
in the disk cache is loaded; one that is not is handed to the background compiler (``tiers.py``)
and, meanwhile, its instructions run on the reference executor over the same bytes — bit for bit
what the kernel computes (tests/sim/test_executors.py) — so results do not depend on the tier.

An entry is the kernel's native function, called with Numba's own calling convention from the loop
(the arguments by value in Numba's data model, the same ``(row, frow, bases)`` arrays the loop
holds), so the loop sees the status code a kernel that raised returns instead of Numba's C wrapper
printing the exception and carrying on. The status slot, the last element of ``bases``, records
why a run stopped: ``STATUS_OUT_OF_BOUNDS`` (an indirect DMA's index read from memory, the one check
made while running: ``engines/dma_indirect.py``) or ``STATUS_KERNEL_RAISED``; the loop stops at that
instruction and :func:`stop_error` names it.
"""

from __future__ import annotations

import ctypes
import threading
import time

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

from neuronsim.errors import KernelFaultError
from neuronsim.sim import tiers
from neuronsim.sim.engines import OPDEFS
from neuronsim.sim.engines.control import JUMP_FROM_END, REG0_FROM_END, STATUS_PAUSED
from neuronsim.sim.engines.dma_indirect import out_of_bounds
from neuronsim.sim.ir import Memory, Opcode, Program
from neuronsim.sim.memory.reference import RefMemory

# What every kernel is compiled for: one int64 row of ``itab``, its float64 row, the base addresses.
KERNEL_ARGS = (types.Array(types.int64, 1, "C"), types.Array(types.float64, 1, "C"),
               types.Array(types.int64, 1, "C"))

STATUS_OUT_OF_BOUNDS = 1  # set by a kernel whose run-time index check failed (indirect DMA, nc_n_gather)
STATUS_PATH_FULL = 2  # run_branching's path array is full (the caller grows it and resumes)
STATUS_KERNEL_RAISED = 3  # set by the loop when a kernel returned an error status
# STATUS_PAUSED (4, engines/control.py): a CORE_BARRIER stopped the run; it resumes after it

# Entry address of each opcode's compiled kernel (0: not loaded in this process yet).
ENTRIES = np.zeros(max(int(op) for op in Opcode) + 1, dtype=np.int64)
_entries_lock = threading.Lock()


@intrinsic
def _call_kernel(typingctx, address, row, frow, bases):
    """Call the kernel whose native function is at ``address`` with (row, frow, bases); True when
    it returned an error status (it raised)."""
    if (row, frow, bases) != KERNEL_ARGS:
        return None  # a typing error: the function's argument layout would not match

    def codegen(context, builder, signature, args):
        conv = context.call_conv
        fnty = conv.get_function_type(types.none, KERNEL_ARGS)
        callee = builder.inttoptr(args[0], fnty.as_pointer())
        retval = builder.alloca(conv.get_return_type(types.none).pointee)
        excinfo = builder.alloca(fnty.args[1].pointee)
        packed = list(conv._get_arg_packer(KERNEL_ARGS).as_arguments(builder, args[1:]))
        code = builder.call(callee, [retval, excinfo, *packed])
        status = conv._get_return_status(builder, code, builder.load(excinfo))
        return status.is_error

    return types.boolean(types.int64, *KERNEL_ARGS), codegen


@njit(cache=True)
def run_encoded(itab, ftab, bases, entries, start):
    """Run instructions ``start..`` in order; -1 when all ran, else the index of the first one whose
    opcode has no entry yet (nothing from it on has run) or of the one that set the status slot."""
    last = bases.shape[0] - 1
    for i in range(start, itab.shape[0]):
        row = itab[i]
        address = entries[row[0]]
        if address == 0:
            return i
        if _call_kernel(address, row, ftab[i], bases):
            bases[last] = STATUS_KERNEL_RAISED
        if bases[last] != 0:
            return i
    return -1


@njit(cache=True)
def run_branching(itab, ftab, bases, entries, start, path, n_taken):
    """``run_encoded`` for a Program with branches (``engines/control.py``): ``bases`` ends with its
    registers, the pending-jump slot and the status slot; each jump taken is recorded in ``path``
    as (branch index, target). (next, jumps recorded): next is -1 when the Program ended, else the
    instruction that stopped (no entry yet, a status set, or ``path`` full: status 2)."""
    jump = bases.shape[0] - 2
    status = bases.shape[0] - 1
    n = itab.shape[0]
    i = start
    while i < n:
        row = itab[i]
        address = entries[row[0]]
        if address == 0:
            return i, n_taken
        if _call_kernel(address, row, ftab[i], bases):
            bases[status] = STATUS_KERNEL_RAISED
        if bases[status] != 0:
            return i, n_taken
        if bases[jump] == 0:
            i += 1
            continue
        if n_taken == path.shape[0]:
            bases[status] = STATUS_PATH_FULL
            return i, n_taken
        path[n_taken, 0] = i
        path[n_taken, 1] = bases[jump] - 1
        n_taken += 1
        i = bases[jump] - 1
        bases[jump] = 0
    return -1, n_taken


def kernel_for(op: Opcode):
    """The Numba kernel (a dispatcher) that runs ``op``."""
    opdef = OPDEFS.get(op)
    if opdef is None:
        raise AssertionError(f"{op.name} has no OpDef: the validator should have rejected it")
    return opdef.kernel


def entry_address(dispatcher) -> int:
    """The native function of ``dispatcher``'s compile for ``KERNEL_ARGS`` (what the loop calls)."""
    result = dispatcher.overloads[KERNEL_ARGS]
    return result.library.get_pointer_to_function(result.fndesc.llvm_func_name)


def load_kernel(op: Opcode) -> None:
    """Make ``op`` runnable in this process: load its kernel from the disk cache (from the bundle of
    common kernels if it is there: ``kernel_bundle.py``), or compile it."""
    from neuronsim.sim import kernel_bundle

    op = Opcode(op)
    with _entries_lock:
        if ENTRIES[op] or kernel_bundle.fill(op):
            return
        kernel = kernel_for(op)
        kernel.compile(KERNEL_ARGS)
        ENTRIES[op] = entry_address(kernel)


def _load_cached_kernel(op: Opcode) -> bool:
    """Load ``op``'s kernel if its machine code is in the disk cache (compiling nothing)."""
    from neuronsim.sim import kernel_bundle

    with _entries_lock:
        if ENTRIES[op] or kernel_bundle.fill(op):
            return True
        kernel = kernel_for(op)
        if not tiers.load_cached(kernel, KERNEL_ARGS):
            return False
        ENTRIES[op] = entry_address(kernel)
        return True


def loaded_opcodes() -> frozenset[Opcode]:
    return frozenset(op for op in Opcode if ENTRIES[op])


def execute(itab: np.ndarray, ftab: np.ndarray, bases: np.ndarray, program: Program | None = None,
            pitch: dict | None = None, start: int = 0) -> int:
    """Run the encoded Program from instruction ``start``; -1, or the position of the instruction
    that stopped it (its status in ``bases[-1]``). Given ``program`` and the on-chip ``pitch``
    (bytes from one partition's row to the next, per memory), tiered: what is not compiled yet runs
    on the reference executor."""
    n = itab.shape[0]
    fallback = None
    while start < n:
        if program is None or _loop_available(itab, ftab, bases):
            start = run_encoded(itab, ftab, bases, ENTRIES, start)
            if start < 0:
                return -1
            if bases[-1] != 0:
                return start
        op = Opcode(int(itab[start, 0]))
        if program is None:
            load_kernel(op)
            continue
        fallback = _tiered_step(op, program, itab, ftab, bases, start, fallback, pitch)
        if bases[-1] != 0:
            return start
        start += 1
    return -1


def direct_runner(itab: np.ndarray, ftab: np.ndarray, bases: np.ndarray):
    """The compiled loop's entry point for arrays typed like these, once the loop and every
    opcode ``itab`` uses are loaded (None before): ``runner(itab, ftab, bases, ENTRIES, 0)`` is
    ``run_encoded`` without the dispatcher's type resolution or the tier checks, for a cached
    Program run many times. A stop with status 0 means an entry was unloaded since (tests do):
    resume with ``execute(..., start=stop)``."""
    if not run_encoded.overloads or not all(ENTRIES[op] for op in np.unique(itab[:, 0])):
        return None
    signature = tuple(run_encoded.typeof_pyval(a) for a in (itab, ftab, bases, ENTRIES, 0))
    found = run_encoded.overloads.get(signature)
    return None if found is None else found.entry_point


def execute_branching(itab: np.ndarray, ftab: np.ndarray, bases: np.ndarray, program: Program | None = None,
                      pitch: dict | None = None, start: int = 0) -> tuple[int, np.ndarray]:
    """Run an encoded Program with branches from instruction ``start``; (-1 or the instruction whose
    status stopped it — a CORE_BARRIER's is ``STATUS_PAUSED`` — the jumps taken as rows (branch
    index, target)). Given ``program`` and ``pitch``, tiered as :func:`execute` is: an instruction
    whose kernel is not compiled yet runs on the reference executor, over the same bytes and the
    same registers (those in ``bases``)."""
    from neuronsim.sim.execute_reference import MAX_JUMPS

    path = np.zeros((64, 2), np.int64)
    taken, n = 0, itab.shape[0]
    fallback = None
    while start < n:
        if program is None or _branching_loop_available(itab, ftab, bases, path):
            start, taken = run_branching(itab, ftab, bases, ENTRIES, start, path, taken)
            if start < 0:
                break
            if bases[-1] == STATUS_PATH_FULL:
                if taken >= MAX_JUMPS:
                    return start, path[:taken]
                path = np.concatenate([path, np.zeros_like(path)])
                bases[-1] = 0
                continue  # resumes at the branch: its jump is still pending in bases[-2]
            if bases[-1] != 0:
                return start, path[:taken]
        op = Opcode(int(itab[start, 0]))
        if program is None:
            load_kernel(op)
            continue
        fallback = _tiered_step(op, program, itab, ftab, bases, start, fallback, pitch)
        if bases[-1] != 0:
            return start, path[:taken]
        target = int(bases[-JUMP_FROM_END]) - 1
        if target < 0:
            start += 1
            continue
        if taken == path.shape[0]:
            if taken >= MAX_JUMPS:
                bases[-1] = STATUS_PATH_FULL
                return start, path[:taken]
            path = np.concatenate([path, np.zeros_like(path)])
        path[taken] = start, target
        taken += 1
        bases[-JUMP_FROM_END] = 0
        start = target
    return -1, path[:taken]


def _tiered_step(op: Opcode, program, itab, ftab, bases, start: int, fallback, pitch):
    """Run instruction ``start`` through its compiled kernel if its tier has one, else on the
    reference executor (its memory made on first need); returns that memory (or None)."""
    if ENTRIES[op] or tiers.available(op.name.lower(), lambda: _load_cached_kernel(op),
                                      lambda: load_kernel(op)):
        _call_one(op, itab, ftab, bases, start)  # the loop is not loaded yet, or stopped here
        return fallback
    if fallback is None:
        fallback = reference_memory(program, bases, pitch)
    _reference_step(op, program.instructions[start], fallback, bases)
    return fallback


def _reference_step(op: Opcode, ins, mem: RefMemory, bases: np.ndarray) -> None:
    """Run one instruction of a Program with branches on the reference executor; its registers
    and a jump it takes live in ``bases`` (``engines/control.py``) before and after."""
    count = bases.size - JUMP_FROM_END - len(mem.buffers)  # bases: tensors, registers, jump, status
    mem.registers = [int(bases[bases.size - REG0_FROM_END - r]) for r in range(count)]
    began = time.thread_time()
    with np.errstate(all="ignore"):
        OPDEFS[op].reference(ins, mem)
    tiers.ran_interpreted(op.name.lower(), time.thread_time() - began)
    for r, value in enumerate(mem.registers):
        bases[bases.size - REG0_FROM_END - r] = value
    if mem.jump is not None:
        bases[bases.size - JUMP_FROM_END] = mem.jump + 1
        mem.jump = None
    if mem.paused:
        bases[bases.size - 1] = STATUS_PAUSED
        mem.paused = False


def _loop_available(itab, ftab, bases) -> bool:
    if run_encoded.overloads:
        return True
    sig = tuple(run_encoded.typeof_pyval(a) for a in (itab, ftab, bases, ENTRIES, 0))
    return tiers.available("loop", lambda: tiers.load_cached(run_encoded, sig),
                           lambda: run_encoded.compile(sig))


def _branching_loop_available(itab, ftab, bases, path) -> bool:
    if run_branching.overloads:
        return True
    sig = tuple(run_branching.typeof_pyval(a) for a in (itab, ftab, bases, ENTRIES, 0, path, 0))
    return tiers.available("branch_loop", lambda: tiers.load_cached(run_branching, sig),
                           lambda: run_branching.compile(sig))


def _call_one(op: Opcode, itab, ftab, bases, i: int) -> None:
    """Run instruction ``i``'s kernel from Python (while the loop itself is not loaded)."""
    kernel = kernel_for(op)
    try:
        kernel(itab[i], ftab[i], bases)
    except Exception:  # noqa: BLE001 - the loop would see an error status: the same stop
        bases[-1] = STATUS_KERNEL_RAISED


def reference_memory(program: Program, bases: np.ndarray, pitch: dict[Memory, int]) -> RefMemory:
    """The reference executor's view of the bytes at ``bases``: each tensor's span from its base
    (an on-chip tensor's partitions ``pitch`` bytes apart), as a numpy array over that memory."""
    buffers = []
    for t in program.tensors:
        if t.memory is Memory.HBM:
            size = t.num_elements * t.dtype.itemsize
        else:
            size = (t.partitions - 1) * pitch[t.memory] + t.bytes_per_partition
        address = int(bases[t.id])
        buffers.append(np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(address)) if size
                       else np.zeros(0, np.uint8))
    return RefMemory(buffers, [0] * len(buffers), pitch)


def stop_error(program: Program, stopped: int, bases: np.ndarray) -> Exception:
    """The error for a run that stopped at instruction ``stopped`` with status ``bases[-1]``."""
    ins = program.instructions[stopped]
    if bases[-1] == STATUS_OUT_OF_BOUNDS:  # the instruction's own run-time check (an index out of range)
        return (OPDEFS[ins.opcode].runtime_error or out_of_bounds)(ins)
    return KernelFaultError(f"the {ins.opcode.name} kernel raised an exception while running (a simulator "
                            f"bug: the validator accepted an instruction the kernel cannot run)",
                            instruction=ins.describe(), location=ins.location)
