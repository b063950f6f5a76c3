"""GpSimd top-K (``nisa.topk``, NKI 0.6) — checks, semantics (numpy reference and Numba) and cost
side by side.

Layout (S16). Each group of 16 partitions (one GpSimd core's, counted from the source's first
partition) holds one sequence of ``n`` bf16 values as a "snake": position ``s`` sits in partition
``s % 16`` of the group, column ``s // 16`` (free dims flattened row-major). The instruction selects
the ``K`` largest of each group's ``n`` (K = ``val_dst``'s elements per partition) and writes them
in ascending order, again as a snake: result ``j`` goes to partition ``j % 16`` of the group,
column ``j // 16``, its value (bf16, bit for bit) in ``val_dst`` and its snake position (uint32) in
``idx_dst``. Only those K positions are written; the rest of both destinations keeps its contents
(nki-library's gpsimd_topk: "positions [k, k_pad) are unwritten"), so both count as read.

Assumed where the docs are silent: values compare as numbers (``-0.0 == 0.0``), NaN ranks above
every number, and among equal values the lower snake position ranks higher; the ascending output
is the reverse of that ranking (the largest, lowest-position element is result ``K - 1``).
Hardware orders its output differently from AWS's simulator (nki-library relies on neither); we
follow the stub's "ascending", as AWS's simulator does.

Cost (S16, the stub's estimate): ``4 n + K`` GpSimd cycles, the groups running in parallel on
their cores (``gpsimd_topk_cycles_per_element`` and ``_per_result`` in the chip file).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from neuronsim.errors import DtypeError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, DST2, IMM, SRC0
from neuronsim.sim.engines.common import (
    OpDef,
    fail,
    partition_rows,
    require,
    require_known_immediates,
    require_operands,
)
from neuronsim.sim.ir import AccessPattern, Instruction, Opcode
from neuronsim.sim.memory.access import gather_raw, scatter_raw
from neuronsim.sim.memory.reference import RefMemory

GROUP = 16  # partitions per GpSimd core: one snake each (S16)
N_MIN, N_LIMIT = 8, 65536  # 8 <= n < 65536 (S16)
K_LIMIT = 32768  # 1 <= K < 32768 and K <= n (S16)
_POSITION_SPAN = 1 << 17  # > N_LIMIT: a rank key is value key * span + (span - 1 - position)


def _check_topk(ins: Instruction, chip: ChipSpec) -> None:
    require_known_immediates(ins, frozenset({"n"}))
    require_operands(ins, 1)
    require(ins.dst2 is not None, ins, "needs dst2, the index destination (idx_dst)")
    src, val, idx = ins.srcs[0], ins.dst, ins.dst2
    for role, ap, want in (("src", src, DType.bfloat16), ("val_dst", val, DType.bfloat16),
                           ("idx_dst", idx, DType.uint32)):
        if ap.dtype is not want:
            raise fail(ins, f"{role} is {ap.dtype.name}; topk's {role} must be {want.name}", DtypeError)
    p = src.partitions
    require(p % GROUP == 0, ins, f"src has {p} partitions; topk works on groups of {GROUP} partitions, so "
            f"the partition count must be a multiple of {GROUP}")
    require(val.partitions == p and idx.partitions == p, ins, f"val_dst ({val.partitions} partitions) and "
            f"idx_dst ({idx.partitions}) must have src's {p} partitions")
    n = ins.imm.get("n")
    require(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and N_MIN <= n < N_LIMIT, ins,
            f"n={n!r} must be an int with {N_MIN} <= n < {N_LIMIT}")
    require(n <= GROUP * src.free_size, ins, f"n={n} snake elements need ceil(n / {GROUP}) = "
            f"{-(-n // GROUP)} columns; src has {src.free_size} per partition")
    k = val.free_size
    require(1 <= k < K_LIMIT and k <= n, ins, f"val_dst has K={k} elements per partition; topk needs "
            f"1 <= K < {K_LIMIT} and K <= n={n}")
    require(idx.free_size == k, ins, f"idx_dst has {idx.free_size} elements per partition; it must have "
            f"val_dst's K={k}")


def _cycles_topk(ins: Instruction, chip: ChipSpec) -> float:
    """S16: ``4 n + K`` (per group; the 8 GpSimd cores work in parallel)."""
    return float(chip.gpsimd_topk_cycles_per_element * ins.imm["n"]
                 + chip.gpsimd_topk_cycles_per_result * ins.dst.free_size)


def snake_prefix(ap: AccessPattern, count: int) -> list[AccessPattern]:
    """The elements of snake positions ``0..count-1`` of every 16-partition group of ``ap``: whole
    columns, then the partial column's first partitions, group by group. ``ap`` itself when its free
    dims are not one run (the position's column is then not one step away)."""
    runs = [(step, num) for step, num in ap.pattern[1:] if num > 1]
    if len(runs) > 1:
        return [ap]
    column_step = runs[0][0] if runs else 1
    pstep = ap.pattern[0][0]
    full, rest = divmod(count, GROUP)
    out = []
    if full:
        out.append(AccessPattern(ap.tensor, ap.offset, ((pstep, ap.partitions), (column_step, full))))
    if rest:
        last = AccessPattern(ap.tensor, ap.offset + full * column_step, ((pstep, ap.partitions), (1, 1)))
        out.extend(partition_rows(last, g, rest) for g in range(0, ap.partitions, GROUP))
    return out


def _touched_topk(ins: Instruction) -> list[tuple[AccessPattern, bool]]:
    k = ins.dst.free_size
    reads = [(ap, False) for ap in snake_prefix(ins.srcs[0], int(ins.imm["n"]))]
    return reads + [(ap, True) for dst in (ins.dst, ins.dst2) for ap in snake_prefix(dst, k)]


def _rank_keys(bits: np.ndarray, n: int) -> np.ndarray:
    """int64 keys of snake positions 0..n-1 from their bf16 bits; a larger key ranks higher."""
    magnitude = bits & 0x7FFF
    value = np.where(bits & 0x8000, -magnitude, magnitude)
    value = np.where(magnitude > 0x7F80, 0x10000, value)  # NaN above +inf (0x7F80)
    return value * _POSITION_SPAN + (_POSITION_SPAN - 1 - np.arange(n))


def _read_bits(mem: RefMemory, ap: AccessPattern) -> np.ndarray:
    return mem.read_raw(ap).view(f"u{ap.dtype.itemsize}").astype(np.int64)


def _write_bits(mem: RefMemory, ap: AccessPattern, bits: np.ndarray) -> None:
    mem.write_raw(ap, bits.astype(f"u{ap.dtype.itemsize}").view(ap.dtype.numpy))


def _ref_topk(ins: Instruction, mem: RefMemory) -> None:
    src, n, k = ins.srcs[0], int(ins.imm["n"]), ins.dst.free_size
    x, vals, idx = _read_bits(mem, src), _read_bits(mem, ins.dst), _read_bits(mem, ins.dst2)
    j = np.arange(k)
    for g in range(0, src.partitions, GROUP):
        snake = x[g:g + GROUP].T.reshape(-1)[:n]  # position s = column * 16 + partition
        chosen = np.argsort(_rank_keys(snake, n))[n - k:]  # ascending: the K best, largest last
        vals[g + j % GROUP, j // GROUP] = snake[chosen]
        idx[g + j % GROUP, j // GROUP] = chosen
    _write_bits(mem, ins.dst, vals)
    _write_bits(mem, ins.dst2, idx)


def _encode_topk(ins: Instruction) -> tuple[list[int], list[float]]:
    return [int(ins.imm["n"])], []


@njit(cache=True)
def _nb_topk(row, frow, bases):
    n = row[IMM]
    x = gather_raw(row, SRC0, bases)
    vals = gather_raw(row, DST, bases)
    idx = gather_raw(row, DST2, bases)
    parts, k = vals.shape
    keys = np.empty(n, dtype=np.int64)
    for g in range(0, parts, 16):  # GROUP
        for s in range(n):
            bits = x[g + s % 16, s // 16]
            magnitude = bits & 0x7FFF
            value = -magnitude if bits & 0x8000 else magnitude
            if magnitude > 0x7F80:
                value = 0x10000
            keys[s] = value * 131072 + (131071 - s)  # _POSITION_SPAN
        order = np.argsort(keys)
        for j in range(k):
            s = order[n - k + j]
            vals[g + j % 16, j // 16] = x[g + s % 16, s // 16]
            idx[g + j % 16, j // 16] = s
    scatter_raw(row, DST, bases, vals)
    scatter_raw(row, DST2, bases, idx)


OPS = [OpDef(Opcode.TOPK, _check_topk, _cycles_topk, _ref_topk, _encode_topk, _nb_topk,
             touched=_touched_topk)]
