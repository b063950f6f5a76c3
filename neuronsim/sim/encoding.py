"""The row layout of an encoded instruction, shared by the Numba executor and the engine kernels.

Row (int64): ``[opcode, engine, dst AP, dst2 AP, src0..src3 AP, int immediates]``; a parallel
float64 row holds float immediates. Each engine's ``encode`` returns its own immediates; its Numba
kernel reads them back from ``IMM`` / the float row by position.
"""

from __future__ import annotations

import numpy as np

from neuronsim.sim.ir import Instruction, Memory
from neuronsim.sim.memory.access import AP_WIDTH, empty_ap_fields, encode_ap

ROW_OPCODE = 0
ROW_ENGINE = 1
DST = 2
DST2 = DST + AP_WIDTH
SRC0 = DST2 + AP_WIDTH
SRC1 = SRC0 + AP_WIDTH
SRC2 = SRC1 + AP_WIDTH
SRC3 = SRC2 + AP_WIDTH
MAX_SRCS = 4
IMM = SRC3 + AP_WIDTH
N_INT_IMM = 8
ROW_WIDTH = IMM + N_INT_IMM
N_FLOAT_IMM = 8
SRC_SLOTS = (SRC0, SRC1, SRC2, SRC3)


def encode_instruction(ins: Instruction, pitch: dict[Memory, int], ints: list[int], floats: list[float]):
    if len(ins.srcs) > MAX_SRCS or len(ints) > N_INT_IMM or len(floats) > N_FLOAT_IMM:
        raise AssertionError(f"{ins.describe()}: too many operands or immediates to encode")
    row = [int(ins.opcode), int(ins.engine)]
    for ap in (ins.dst, ins.dst2, *ins.srcs, *([None] * (MAX_SRCS - len(ins.srcs)))):
        row += empty_ap_fields() if ap is None else encode_ap(ap, pitch)
    row += [int(v) for v in ints] + [0] * (N_INT_IMM - len(ints))
    frow = [float(v) for v in floats] + [0.0] * (N_FLOAT_IMM - len(floats))
    return row, frow


def encode_rows(rows: list[list[int]], frows: list[list[float]]) -> tuple[np.ndarray, np.ndarray]:
    itab = np.array(rows, dtype=np.int64).reshape(len(rows), ROW_WIDTH)
    ftab = np.array(frows, dtype=np.float64).reshape(len(frows), N_FLOAT_IMM)
    return itab, ftab
