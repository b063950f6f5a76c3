"""The Numba executor: a whole Program runs in one compiled call, no Python per instruction.

The Program arrives encoded (``encoding.py``) and validated: every address is known to be in
bounds, so the kernels do no checks. The loop calls each instruction's engine kernel through a
table of entry addresses indexed by opcode. Each opcode's kernel is a compile unit of its own,
compiled (or loaded from the disk cache) the first time a Program uses that opcode: a process
compiles only what it runs, and the loop itself, which names no kernel, compiles in about a second.
When the loop meets an opcode whose entry is still empty it returns that instruction's index;
``execute`` fills the entry and resumes there, so instructions still run once each, in order.

An entry is the C wrapper Numba builds for every compiled function (``llvm_cfunc_wrapper_name``):
the arguments by value in Numba's data model, the same ``(row, frow, bases)`` arrays the loop
holds. A kernel that raised would have its exception printed by that wrapper, not propagated; the
kernels raise nothing (the validator checked every operand before encoding). The one check made
while running — an indirect DMA's index read from memory (``engines/dma_indirect.py``) — sets the
status slot, the last element of ``bases``, and the loop stops at that instruction.
"""

from __future__ import annotations

import threading

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from neuronsim.sim.engines import OPDEFS
from neuronsim.sim.ir import Opcode

# What every kernel is compiled for: one int64 row of ``itab``, its float64 row, the base addresses.
KERNEL_ARGS = (types.Array(types.int64, 1, "C"), types.Array(types.float64, 1, "C"),
               types.Array(types.int64, 1, "C"))

STATUS_PATH_FULL = 2  # run_branching's path array is full (the caller grows it and resumes)

# Entry address of each opcode's compiled kernel (0: not loaded in this process yet).
ENTRIES = np.zeros(max(int(op) for op in Opcode) + 1, dtype=np.int64)
_entries_lock = threading.Lock()


@intrinsic
def _call_kernel(typingctx, address, row, frow, bases):
    """Call the kernel whose C wrapper is at ``address`` with (row, frow, bases)."""
    if (row, frow, bases) != KERNEL_ARGS:
        return None  # a typing error: the wrapper's argument layout would not match

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(context.get_value_type(types.none),
                               [context.get_value_type(t) for t in KERNEL_ARGS])
        builder.call(builder.inttoptr(args[0], fnty.as_pointer()), args[1:])
        return context.get_dummy_value()

    return types.void(types.int64, *KERNEL_ARGS), codegen


@njit(cache=True)
def run_encoded(itab, ftab, bases, entries, start):
    """Run instructions ``start..`` in order; -1 when all ran, else the index of the first one whose
    opcode has no entry yet (nothing from it on has run)."""
    for i in range(start, itab.shape[0]):
        row = itab[i]
        address = entries[row[0]]
        if address == 0:
            return i
        _call_kernel(address, row, ftab[i], bases)
        if bases[bases.shape[0] - 1] != 0:
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
        _call_kernel(address, row, ftab[i], bases)
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


def load_kernel(op: Opcode) -> None:
    """Make ``op`` runnable in this process: load its kernel from the disk cache, or compile it."""
    op = Opcode(op)
    with _entries_lock:
        if ENTRIES[op]:
            return
        kernel = kernel_for(op)
        kernel.compile(KERNEL_ARGS)
        result = kernel.overloads[KERNEL_ARGS]
        ENTRIES[op] = result.library.get_pointer_to_function(result.fndesc.llvm_cfunc_wrapper_name)


def loaded_opcodes() -> frozenset[Opcode]:
    return frozenset(op for op in Opcode if ENTRIES[op])


def execute(itab: np.ndarray, ftab: np.ndarray, bases: np.ndarray) -> int:
    """Run the encoded Program; -1, or the position of the instruction that stopped it (its status
    in ``bases[-1]``)."""
    start = 0
    while start < itab.shape[0]:
        start = run_encoded(itab, ftab, bases, ENTRIES, start)
        if start < 0:
            return -1
        if bases[-1] != 0:
            return start
        load_kernel(Opcode(int(itab[start, 0])))
    return -1


def execute_branching(itab: np.ndarray, ftab: np.ndarray, bases: np.ndarray) -> tuple[int, np.ndarray]:
    """Run an encoded Program with branches; (-1 or the instruction whose status stopped it, the
    jumps taken as rows (branch index, target))."""
    from neuronsim.sim.execute_reference import MAX_JUMPS

    path = np.zeros((64, 2), np.int64)
    taken, start = 0, 0
    while start < itab.shape[0]:
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
        load_kernel(Opcode(int(itab[start, 0])))
    return -1, path[:taken]
