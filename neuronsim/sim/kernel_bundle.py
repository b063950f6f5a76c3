"""One compile unit holding the kernels most Programs use: loaded in place of their own units.

Each opcode's kernel is a compile unit of its own (``execute_numba``), so a process compiles only
what it runs. Loading them costs per unit: Numba unserializes each unit's library and LLVM parses
its bitcode, which holds its own copy of the access-pattern and ALU helpers every kernel inlines.
A training step's 14 kernels took 0.20-0.23 s of CPU and ~14k page faults one by one, against
0.10 s and 7.3k as one library (docs/benchmarks.md, bench_compile).

The bundle is a Numba function whose library links the machine code of the ``COMMON`` kernels;
calling it writes each one's entry address into an array indexed by opcode, as ``ENTRIES`` is. It
is built only from kernels already in the cache (~9 s to link and optimise them), never in the
caller's thread: by the compile worker once it has nothing left to do (``compile_worker.py``:
after its caller exited) when every ``COMMON`` kernel is cached, and by ``neuronsim warmup``. A
process loads it — from the cache only, never compiling it — at its first use of a ``COMMON``
opcode, and fills the entries of those it has not loaded yet from it. The kernels' code in the
bundle is the same Numba IR as in their own units, optimised once more when linked (no fast-math:
the same IEEE operations; tests/sim/test_numba_cache.py runs random Programs in a process that
loaded the bundle against the reference executor).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from neuronsim.sim import tiers
from neuronsim.sim.execute_numba import ENTRIES, KERNEL_ARGS, kernel_for
from neuronsim.sim.ir import Opcode

UNIT = "common_kernels"  # its name among warmup.UNITS

# The kernels of a training step (examples/train_gpt.py, bench_compile's eager step: 14 opcodes);
# what Programs from PyTorch ops use most.
COMMON: tuple[Opcode, ...] = (
    Opcode.ACTIVATION, Opcode.BN_AGGR, Opcode.BN_STATS, Opcode.DMA_COPY, Opcode.DMA_TRANSPOSE,
    Opcode.MEMSET, Opcode.NC_MATMUL, Opcode.NC_TRANSPOSE, Opcode.SCALAR_TENSOR_TENSOR, Opcode.SELECT,
    Opcode.TENSOR_COPY, Opcode.TENSOR_REDUCE, Opcode.TENSOR_SCALAR, Opcode.TENSOR_TENSOR,
)

_SIG = (types.Array(types.int64, 1, "C"),)


@intrinsic
def _write_entries(typingctx, out):
    """Link every ``COMMON`` kernel's library into the caller's and store each kernel's native
    function address at ``out[opcode]``. Typing it compiles (or loads) the kernels."""
    if out != _SIG[0]:
        return None
    compiled = []
    for op in COMMON:
        kernel = kernel_for(op)
        kernel.compile(KERNEL_ARGS)
        compiled.append((int(op), kernel.overloads[KERNEL_ARGS]))

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        fnty = context.call_conv.get_function_type(types.none, KERNEL_ARGS)
        context.add_linking_libs([cres.library for _, cres in compiled])
        for op, cres in compiled:
            fn = cgutils.get_or_insert_function(builder.module, fnty, cres.fndesc.llvm_func_name)
            slot = builder.gep(array.data, [ir.Constant(ir.IntType(64), op)])
            builder.store(builder.ptrtoint(fn, ir.IntType(64)), slot)
        return context.get_dummy_value()

    return types.none(out), codegen


@njit(cache=True)
def common_entries(out):
    """Write the ``COMMON`` kernels' entry addresses into ``out`` (indexed by opcode)."""
    _write_entries(out)


_addresses: np.ndarray | None = None  # what common_entries wrote in this process
_tried = False  # whether this process looked for the bundle in the cache


def _load() -> np.ndarray | None:
    if not tiers.load_cached(common_entries, _SIG):
        return None
    out = np.zeros_like(ENTRIES)
    common_entries(out)
    return out if all(out[op] for op in COMMON) else None


def fill(op: Opcode) -> bool:
    """Give ``op`` its entry from the bundle if ``op`` is one of its kernels and the bundle is in the
    cache (loaded at the first call; compiles nothing), with every other ``COMMON`` entry still
    empty. Called with ``execute_numba``'s entries lock held."""
    global _addresses, _tried
    if op not in COMMON:
        return False
    if not _tried:
        _tried = True
        _addresses = _load()
    if _addresses is None:
        return False
    for common in COMMON:
        if not ENTRIES[common]:
            ENTRIES[common] = _addresses[common]
    return True


def bundled_opcodes() -> frozenset[Opcode]:
    """The opcodes whose entry in this process is the bundle's."""
    if _addresses is None:
        return frozenset()
    return frozenset(op for op in COMMON if ENTRIES[op] == _addresses[op])


def build() -> None:
    """Compile the bundle into the cache (or load it if it is there); compiles any ``COMMON``
    kernel not cached first (``neuronsim warmup``), each under the cache's compile lock on its own:
    the bundle's compile holds the lock only while it links them (not for all 14 compiles)."""
    for op in COMMON:
        kernel_for(op).compile(KERNEL_ARGS)
    common_entries.compile(_SIG)


def build_if_due() -> bool:
    """Build the bundle if every ``COMMON`` kernel is in the cache and the bundle is not (the
    compile worker, once it has nothing else to do); whether it built it."""
    if tiers.load_cached(common_entries, _SIG):
        return False
    if not all(tiers.load_cached(kernel_for(op), KERNEL_ARGS) for op in COMMON):
        return False
    build()
    return True
