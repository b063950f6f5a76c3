"""The Numba executor: a whole Program runs in one compiled call, no Python per instruction.

The Program arrives encoded (``encoding.py``) and validated: every address is known to be in
bounds, so the kernels do no checks — except where an address is read at run time (indirect DMA):
such a kernel returns nonzero on an out-of-bounds index and the run stops there, returning the
instruction's position. Dispatch is one branch per opcode to its engine's kernel.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from neuronsim.sim.engines import OPDEFS
from neuronsim.sim.ir import Opcode


@njit(cache=True)
def _not_implemented(row, frow, bases):
    pass  # unreachable: the validator rejects opcodes without an OpDef


def _kernel(op: Opcode):
    opdef = OPDEFS.get(op)
    return _not_implemented if opdef is None else opdef.kernel


OP_NC_MATMUL, K_NC_MATMUL = int(Opcode.NC_MATMUL), _kernel(Opcode.NC_MATMUL)
OP_NC_TRANSPOSE, K_NC_TRANSPOSE = int(Opcode.NC_TRANSPOSE), _kernel(Opcode.NC_TRANSPOSE)
OP_NC_MATMUL_MX, K_NC_MATMUL_MX = int(Opcode.NC_MATMUL_MX), _kernel(Opcode.NC_MATMUL_MX)
OP_QUANTIZE_MX, K_QUANTIZE_MX = int(Opcode.QUANTIZE_MX), _kernel(Opcode.QUANTIZE_MX)
OP_ACTIVATION, K_ACTIVATION = int(Opcode.ACTIVATION), _kernel(Opcode.ACTIVATION)
OP_TENSOR_TENSOR, K_TENSOR_TENSOR = int(Opcode.TENSOR_TENSOR), _kernel(Opcode.TENSOR_TENSOR)
OP_TENSOR_SCALAR, K_TENSOR_SCALAR = int(Opcode.TENSOR_SCALAR), _kernel(Opcode.TENSOR_SCALAR)
OP_SCALAR_TENSOR_TENSOR, K_SCALAR_TENSOR_TENSOR = (int(Opcode.SCALAR_TENSOR_TENSOR),
                                                   _kernel(Opcode.SCALAR_TENSOR_TENSOR))
OP_TENSOR_REDUCE, K_TENSOR_REDUCE = int(Opcode.TENSOR_REDUCE), _kernel(Opcode.TENSOR_REDUCE)
OP_TENSOR_COPY, K_TENSOR_COPY = int(Opcode.TENSOR_COPY), _kernel(Opcode.TENSOR_COPY)
OP_TENSOR_TENSOR_SCAN, K_TENSOR_TENSOR_SCAN = int(Opcode.TENSOR_TENSOR_SCAN), _kernel(Opcode.TENSOR_TENSOR_SCAN)
OP_MEMSET, K_MEMSET = int(Opcode.MEMSET), _kernel(Opcode.MEMSET)
OP_TENSOR_COPY_PREDICATED, K_TENSOR_COPY_PREDICATED = (int(Opcode.TENSOR_COPY_PREDICATED),
                                                       _kernel(Opcode.TENSOR_COPY_PREDICATED))
OP_SELECT, K_SELECT = int(Opcode.SELECT), _kernel(Opcode.SELECT)
OP_BN_STATS, K_BN_STATS = int(Opcode.BN_STATS), _kernel(Opcode.BN_STATS)
OP_BN_AGGR, K_BN_AGGR = int(Opcode.BN_AGGR), _kernel(Opcode.BN_AGGR)
OP_MAX8, K_MAX8 = int(Opcode.MAX8), _kernel(Opcode.MAX8)
OP_NC_FIND_INDEX8, K_NC_FIND_INDEX8 = int(Opcode.NC_FIND_INDEX8), _kernel(Opcode.NC_FIND_INDEX8)
OP_RNG, K_RNG = int(Opcode.RNG), _kernel(Opcode.RNG)
OP_DROPOUT, K_DROPOUT = int(Opcode.DROPOUT), _kernel(Opcode.DROPOUT)
OP_IOTA, K_IOTA = int(Opcode.IOTA), _kernel(Opcode.IOTA)
OP_AFFINE_SELECT, K_AFFINE_SELECT = int(Opcode.AFFINE_SELECT), _kernel(Opcode.AFFINE_SELECT)
OP_TENSOR_PARTITION_REDUCE, K_TENSOR_PARTITION_REDUCE = (int(Opcode.TENSOR_PARTITION_REDUCE),
                                                         _kernel(Opcode.TENSOR_PARTITION_REDUCE))
OP_DMA_COPY, K_DMA_COPY = int(Opcode.DMA_COPY), _kernel(Opcode.DMA_COPY)
OP_DMA_TRANSPOSE, K_DMA_TRANSPOSE = int(Opcode.DMA_TRANSPOSE), _kernel(Opcode.DMA_TRANSPOSE)
OP_DMA_COPY_INDIRECT, K_DMA_COPY_INDIRECT = int(Opcode.DMA_COPY_INDIRECT), _kernel(Opcode.DMA_COPY_INDIRECT)

DISPATCHED = frozenset(Opcode)  # the branches below cover every opcode (tests/sim check OPDEFS)


@njit(cache=True)
def run_encoded(itab, ftab, bases):
    for i in range(itab.shape[0]):
        row = itab[i]
        frow = ftab[i]
        op = row[0]
        if op == OP_NC_MATMUL:
            K_NC_MATMUL(row, frow, bases)
        elif op == OP_NC_TRANSPOSE:
            K_NC_TRANSPOSE(row, frow, bases)
        elif op == OP_ACTIVATION:
            K_ACTIVATION(row, frow, bases)
        elif op == OP_TENSOR_TENSOR:
            K_TENSOR_TENSOR(row, frow, bases)
        elif op == OP_TENSOR_SCALAR:
            K_TENSOR_SCALAR(row, frow, bases)
        elif op == OP_SCALAR_TENSOR_TENSOR:
            K_SCALAR_TENSOR_TENSOR(row, frow, bases)
        elif op == OP_TENSOR_REDUCE:
            K_TENSOR_REDUCE(row, frow, bases)
        elif op == OP_TENSOR_COPY:
            K_TENSOR_COPY(row, frow, bases)
        elif op == OP_TENSOR_TENSOR_SCAN:
            K_TENSOR_TENSOR_SCAN(row, frow, bases)
        elif op == OP_MEMSET:
            K_MEMSET(row, frow, bases)
        elif op == OP_TENSOR_COPY_PREDICATED:
            K_TENSOR_COPY_PREDICATED(row, frow, bases)
        elif op == OP_SELECT:
            K_SELECT(row, frow, bases)
        elif op == OP_BN_STATS:
            K_BN_STATS(row, frow, bases)
        elif op == OP_BN_AGGR:
            K_BN_AGGR(row, frow, bases)
        elif op == OP_MAX8:
            K_MAX8(row, frow, bases)
        elif op == OP_NC_FIND_INDEX8:
            K_NC_FIND_INDEX8(row, frow, bases)
        elif op == OP_RNG:
            K_RNG(row, frow, bases)
        elif op == OP_DROPOUT:
            K_DROPOUT(row, frow, bases)
        elif op == OP_IOTA:
            K_IOTA(row, frow, bases)
        elif op == OP_AFFINE_SELECT:
            K_AFFINE_SELECT(row, frow, bases)
        elif op == OP_TENSOR_PARTITION_REDUCE:
            K_TENSOR_PARTITION_REDUCE(row, frow, bases)
        elif op == OP_DMA_COPY:
            K_DMA_COPY(row, frow, bases)
        elif op == OP_DMA_TRANSPOSE:
            K_DMA_TRANSPOSE(row, frow, bases)
        elif op == OP_NC_MATMUL_MX:
            K_NC_MATMUL_MX(row, frow, bases)
        elif op == OP_QUANTIZE_MX:
            K_QUANTIZE_MX(row, frow, bases)
        elif op == OP_DMA_COPY_INDIRECT:
            if K_DMA_COPY_INDIRECT(row, frow, bases) != 0:
                return i
    return -1


def execute(itab: np.ndarray, ftab: np.ndarray, bases: np.ndarray) -> int:
    """Run the encoded Program; -1, or the position of the instruction that stopped it."""
    if itab.shape[0]:
        return run_encoded(itab, ftab, bases)
    return -1
