"""VectorE exponential (NeuronCore-v4 on): ``exp(src - max_value)`` with an optional running sum —
checks, semantics (numpy reference and Numba) and cost side by side.

S16 (``nisa.exponential``): ``dst = exp(src - max_value)``, computed in fp32 and written in dst's
dtype; ``max_value`` is a float immediate or a ``[P, 1]`` fp32 tile (``max_is_tile``). ``src -
max_value`` is rounded to fp32 and exp is evaluated in float64 from it and rounded to fp32 once, as
ScalarE's exp is (``transcendentals.exp64``), so both executors agree bit for bit. With ``dst2``
(``reduce_res``, ``[P, 1]``) the accumulator starts at ``reduce_init`` (0 for reset_reduce) and adds
each fp32 result left to right, before dst's rounding.

Cost (assumed; S16 gives none): an elementwise VectorE pass, ``max(MIN_II, N)`` VectorE cycles with
the stride penalty (``common.elementwise_cycles``); the fused sum is free, as range_select's is.
"""

from __future__ import annotations

import numbers

import numpy as np
from numba import njit

from neuronsim.errors import DtypeError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, DST2, IMM, SRC0, SRC1
from neuronsim.sim.engines.common import (
    OpDef,
    elementwise_cycles,
    fail,
    require,
    require_free_limit,
    require_known_immediates,
    require_operands,
    require_same_shape,
    require_shape,
)
from neuronsim.sim.engines.tensor import core_generation
from neuronsim.sim.engines.transcendentals import exp64, exp_np
from neuronsim.sim.ir import Instruction, Opcode
from neuronsim.sim.memory.access import gather_f32, scatter_f32
from neuronsim.sim.memory.reference import RefMemory

EXPONENTIAL_FROM_GENERATION = 4  # S16: "Available only on NeuronCore-v4 and newer"


def _check_exponential(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset({"max_value", "max_is_tile", "reduce_init"}))
    require(core_generation(chip) >= EXPONENTIAL_FROM_GENERATION, ins,
            f"exponential exists on NeuronCore-v4 (trn3) and newer; this chip is NeuronCore-"
            f"{chip.neuron_core_version}")
    tile = bool(ins.imm.get("max_is_tile", False))
    require_operands(ins, 2 if tile else 1)
    src = ins.srcs[0]
    require_same_shape(ins, ins.dst, src, "dst", "src")
    if tile:
        require_shape(ins, ins.srcs[1], src.partitions, 1, "max_value")
        if ins.srcs[1].dtype is not DType.float32:
            raise fail(ins, f"max_value is {ins.srcs[1].dtype.name}; a max_value tile is float32", DtypeError)
    for name in ("max_value", "reduce_init"):
        v = ins.imm.get(name, 0.0)
        require(isinstance(v, numbers.Real) and not isinstance(v, bool), ins, f"{name}={v!r} must be a float")
    if ins.dst2 is not None:
        require_shape(ins, ins.dst2, src.partitions, 1, "reduce_res")
        if not ins.dst2.dtype.is_float:
            raise fail(ins, f"reduce_res is {ins.dst2.dtype.name}; it holds a float sum", DtypeError)
    require_free_limit(ins, chip)


def _cycles_exponential(ins: Instruction, chip: ChipSpec) -> float:
    """Assumed: ``max(MIN_II, N)`` (with the stride penalty), as an elementwise VectorE pass."""
    return elementwise_cycles(ins, chip, ins.dst.free_size)


def _ref_exponential(ins: Instruction, mem: RefMemory) -> None:
    x = mem.read(ins.srcs[0])
    if ins.imm.get("max_is_tile", False):
        m = mem.read(ins.srcs[1])
    else:
        m = np.float32(ins.imm.get("max_value", 0.0))
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are values here
        arg = (x - m).astype(np.float32)
        y = exp_np(arg.astype(np.float64)).astype(np.float32)
    mem.write(ins.dst, y)
    if ins.dst2 is not None:
        acc = np.full(y.shape[0], np.float32(ins.imm.get("reduce_init", 0.0)), dtype=np.float32)
        for j in range(y.shape[1]):
            acc = (acc + y[:, j]).astype(np.float32)
        mem.write(ins.dst2, acc.reshape(-1, 1))


def _encode_exponential(ins: Instruction) -> tuple[list[int], list[float]]:
    ints = [int(bool(ins.imm.get("max_is_tile", False))), int(ins.dst2 is not None)]
    return ints, [float(ins.imm.get("max_value", 0.0)), float(ins.imm.get("reduce_init", 0.0))]


@njit(cache=True)
def _nb_exponential(row, frow, bases):
    tile, reduce = row[IMM], row[IMM + 1]
    x = gather_f32(row, SRC0, bases)
    parts, n = x.shape
    if tile:
        m = gather_f32(row, SRC1, bases)[:, 0]
    else:
        m = np.full(parts, np.float32(frow[0]), dtype=np.float32)
    y = np.empty((parts, n), dtype=np.float32)
    acc = np.empty((parts, 1), dtype=np.float32)
    for p in range(parts):
        s = np.float32(frow[1])
        for j in range(n):
            v = np.float32(exp64(np.float64(np.float32(x[p, j] - m[p]))))
            y[p, j] = v
            s = np.float32(s + v)
        acc[p, 0] = s
    scatter_f32(row, DST, bases, y)
    if reduce:
        scatter_f32(row, DST2, bases, acc)


OPS = [OpDef(Opcode.EXPONENTIAL, _check_exponential, _cycles_exponential, _ref_exponential,
             _encode_exponential, _nb_exponential)]
