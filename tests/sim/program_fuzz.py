"""Random valid Programs for the executor fuzz (test_executors.py, whose docstring describes them):
the tensor pool the opcode generators (opcode_generators.py) draw on, inputs for it, and both
executors' results compared byte for byte. Also used by test_executors_mx.py, the tier tests and
the warm-cache guard."""


from __future__ import annotations

import math
import random

import numpy as np

from neuronsim import sim
from neuronsim.errors import NeuronSimError
from neuronsim.sim import AluOp, Engine, Instruction, Memory, Opcode, Program, ProgramBuilder
from neuronsim.sim.chips import get_chip
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import BITVEC_ALU_OPS, OPCODE_ENGINES, AccessPattern
from neuronsim.sim.memory.layout import place_tensors
from neuronsim.sim.memory.state import core_memory
from neuronsim.sim.validate import validate_instruction

CHIP = get_chip("trn2")
SBUF, PSUM, HBM = Memory.SBUF, Memory.PSUM, Memory.HBM
ON_CHIP = (SBUF, PSUM)
INT_DTYPES = frozenset(d for d in DType if d.is_int and d is not DType.bool_)
PREDICATE_DTYPES = frozenset({DType.uint8, DType.uint16, DType.uint32})
MATMUL_LOW = frozenset({DType.float8_e4m3, DType.float8_e5m2, DType.bfloat16, DType.float16})
MATMUL_FP32 = frozenset({DType.float32, DType.tfloat32})
UNARY = frozenset({AluOp.abs, AluOp.square, AluOp.relu, AluOp.rsqrt, AluOp.reciprocal, AluOp.invert})
BINARY_BITVEC = sorted(BITVEC_ALU_OPS - UNARY)
ARITH = sorted(set(AluOp) - BITVEC_ALU_OPS - UNARY)
FLOAT_DTYPES = frozenset(d for d in DType if d.is_float)
RANGE_COMPARE = [AluOp.equal, AluOp.less, AluOp.less_equal, AluOp.greater, AluOp.greater_equal]
COMPARE = [AluOp.equal, AluOp.not_equal, AluOp.greater, AluOp.greater_equal, AluOp.less, AluOp.less_equal]
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-45, 65504.0, 3e38, -3e38, 1.0, -1.0, 0.5],
                    dtype=np.float32)
RAW_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32}


# ---------------------------------------------------------------- program generator

class Gen:
    """A random tensor pool and the instructions emitted over it. ``r`` makes every structural
    choice (hypothesis records and shrinks it); ``rng`` fills the input arrays."""

    def __init__(self, r: random.Random, rng: np.random.Generator, chip=CHIP):
        self.r, self.rng, self.chip = r, rng, chip
        self.b = ProgramBuilder("fuzz")
        self.instructions: list[Instruction] = []
        self.rejected: list[tuple[Opcode, str]] = []
        self._make_pool()
        self.tensors = self.b.build().tensors
        self.placement = place_tensors(self.b.build(), chip)
        self.ids = {id(t) for t in self.tensors}

    # -- random helpers
    def choice(self, seq):
        seq = list(seq)
        return seq[self.r.randrange(len(seq))]

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def any_dtype(self) -> DType:
        return self.choice(DType)

    def _make_pool(self) -> None:
        b, r = self.b, self.r
        b.hbm("h_in0", (128, 320), self.any_dtype())
        b.hbm("h_in1", (40, 100), self.any_dtype())
        b.hbm("h_out", (128, 64), self.any_dtype(), kind="output")
        b.hbm("h_io", (64, 32), self.any_dtype(), kind="inout")
        b.sbuf("s_f32", (128, r.randint(16, 200)), "float32")
        b.sbuf("s_idx", (128, 48), self.choice([DType.uint8, DType.uint16, DType.uint32]))
        high = 160_000  # explicitly placed tensors live far above the bump allocator's bytes
        for i in range(3):
            parts = self.choice([128, 128, 96, 64, 33, 32, 16])
            shape = (parts, r.randint(8, 260))
            address = None
            if self.chance(0.4):
                starts = [s for s in (0, 32, 64, 96) if s + parts <= 128]
                address = (self.choice(starts), high + 8192 * i)
            b.sbuf(f"s_{i}", shape, self.any_dtype(), address=address)
        b.psum("p_f32", (128, 512), "float32")
        b.psum("p_bf16", (128, 512), "bfloat16")
        b.psum("p_any", (128, 128), self.any_dtype())
        b.sbuf("s_bf16", (128, 96), "bfloat16")  # GpSimd topk's values
        b.sbuf("s_u32", (128, 64), "uint32")  # and its indices

    # -- shapes
    def partitions(self, limit: int = 128) -> int:
        return min(limit, self.choice([1, 2, 3, 8, 16, 31, 32, 33, 64, 65, 100, 128]))

    def free_nums(self, lo: int = 1, hi: int = 48) -> list[int]:
        for _ in range(20):
            dims = self.choice([1, 1, 2, 2, 3, 4])
            if dims == 1:
                nums = [self.r.randint(lo, hi)]
            else:
                nums = [self.choice([1, 2, 3, 4, 5, 8]) for _ in range(dims)]
            if lo <= math.prod(nums) <= hi:
                return nums
        return [lo]

    def refactor(self, n: int) -> list[int]:
        """A random split of ``n`` into 1-3 dims (another view of the same element count)."""
        nums = []
        for _ in range(self.r.randint(0, 2)):
            divisors = [d for d in range(2, n + 1) if n % d == 0]
            if not divisors:
                break
            d = self.choice(divisors)
            nums.append(d)
            n //= d
        nums.append(n)
        self.r.shuffle(nums)
        return nums

    # -- access patterns
    def _free_steps(self, nums: list[int], write: bool) -> list[int]:
        """Dense steps for a random memory order of the dims, then maybe strided / reversed /
        (reads only) broadcast. Writes stay injective."""
        order = list(range(len(nums)))
        if self.chance(0.25):
            self.r.shuffle(order)
        steps = [0] * len(nums)
        stride = 1
        for d in reversed(order):
            steps[d] = stride
            stride *= nums[d]
        if self.chance(0.3):
            k = self.choice([2, 3])
            steps = [s * k for s in steps]
        if self.chance(0.2):
            d = self.r.randrange(len(nums))
            steps[d] = -steps[d]
        if not write and self.chance(0.25):
            steps[self.r.randrange(len(nums))] = 0
        return steps

    @staticmethod
    def _extent(pairs) -> tuple[int, int]:
        pairs = list(pairs)
        lo = sum(min(0, s * (n - 1)) for s, n in pairs)
        hi = sum(max(0, s * (n - 1)) for s, n in pairs)
        return lo, hi

    def _dense(self, nums):
        return [math.prod(nums[d + 1:]) for d in range(len(nums))]

    def chip_ap(self, t, partitions: int, nums: list[int], write: bool) -> AccessPattern | None:
        if partitions > t.partitions:
            return None
        quantum = 128 if partitions > 64 else 64 if partitions > 32 else 32
        first = self.placement.start_partition[t.id]
        rows = [row for row in range(t.partitions - partitions + 1) if (first + row) % quantum == 0]
        if not rows:
            return None
        for steps in (self._free_steps(nums, write), self._dense(nums)):
            lo, hi = self._extent(zip(steps, nums, strict=True))
            if hi - lo < t.free_size:
                col0 = self.r.randint(-lo, t.free_size - 1 - hi)
                offset = self.choice(rows) * t.free_size + col0
                return AccessPattern(t, offset, ((t.free_size, partitions), *zip(steps, nums, strict=True)))
        return None

    def hbm_ap(self, t, partitions: int, nums: list[int], write: bool) -> AccessPattern | None:
        for dense in (False, True):
            steps = self._dense(nums) if dense else self._free_steps(nums, write)
            lo, hi = self._extent(zip(steps, nums, strict=True))
            p_step = (hi - lo + 1) * (1 if dense else self.choice([1, 1, 2]) * self.choice([1, -1]))
            if not dense and not write and self.chance(0.15):
                p_step = 0
            pairs = [(p_step, partitions), *zip(steps, nums, strict=True)]
            lo, hi = self._extent(pairs)
            if hi - lo < t.num_elements:
                return AccessPattern(t, self.r.randint(-lo, t.num_elements - 1 - hi), tuple(pairs))
        return None

    def operand(self, memories, partitions: int, nums: list[int], write: bool = False, dtypes=None,
                not_in=None) -> AccessPattern | None:
        """An AP of [partitions, nums] on a random fitting tensor (None if there is none)."""
        cands = [t for t in self.tensors if t.memory in memories and (dtypes is None or t.dtype in dtypes)]
        if write:
            cands = [t for t in cands if not (t.memory is HBM and t.kind == "input")]
        if not_in is not None:
            cands = [t for t in cands if t.memory is not not_in]
        self.r.shuffle(cands)
        for t in cands:
            ap = (self.hbm_ap if t.memory is HBM else self.chip_ap)(t, partitions, nums, write)
            if ap is not None:
                return ap
        return None

    # -- emission
    def emit(self, opcode: Opcode, dst, srcs=(), engine: Engine | None = None, dst2=None, queue: int = 0,
             **imm) -> None:
        """Validate and keep the instruction; operands that could not be found (None) skip it."""
        if dst is None or any(s is None for s in srcs) or dst2 is False:
            return
        ins = Instruction(opcode, OPCODE_ENGINES[opcode][0] if engine is None else engine, dst, tuple(srcs),
                          imm, location=f"fuzz:{len(self.instructions)}", queue=queue, dst2=dst2)
        try:
            validate_instruction(ins, self.chip, self.placement, self.ids)
        except NeuronSimError as err:
            self.rejected.append((opcode, str(err)))
            return
        self.instructions.append(ins)

    def engine(self, opcode: Opcode, *engines: Engine) -> Engine:
        allowed = [e for e in (engines or OPCODE_ENGINES[opcode]) if e in OPCODE_ENGINES[opcode]]
        return self.choice(allowed)

    def program(self) -> Program:
        return Program("fuzz", self.tensors, tuple(self.instructions))


def fill(rng: np.random.Generator, t) -> np.ndarray:
    n, dt = t.num_elements, t.dtype
    if dt is DType.bool_:
        return (rng.random(n) < 0.5).reshape(t.shape)
    if dt.is_int:
        info = np.iinfo(dt.numpy)
        small = rng.integers(max(info.min, -6), min(info.max, 6), n, endpoint=True)
        full = rng.integers(info.min, info.max, n, endpoint=True, dtype=np.int64)
        return np.where(rng.random(n) < 0.6, small, full).astype(dt.numpy).reshape(t.shape)
    kind = rng.random(n)
    values = (rng.standard_normal(n) * 10.0 ** rng.integers(-2, 3, n)).astype(np.float32)
    values = np.where(kind < 0.25, rng.integers(-4, 5, n).astype(np.float32), values)
    values = np.where((kind >= 0.25) & (kind < 0.35), rng.choice(SPECIALS, n), values)
    with np.errstate(all="ignore"):
        out = values.astype(dt.numpy)
    bits = out.view(RAW_UINT[dt.itemsize])
    raw = kind >= 0.95  # raw bit patterns: NaN payloads, subnormals, extremes
    bits[raw] = rng.integers(0, 2 ** (8 * dt.itemsize), int(raw.sum()), dtype=np.uint64).astype(bits.dtype)
    return out.reshape(t.shape)


def small_float(g: Gen) -> float:
    return g.choice([0.0, 1.0, -1.0, 0.5, 2.0, -3.0, 1e-3, 100.0, round(g.r.gauss(0, 3), 3)])


# ---------------------------------------------------------------- running both executors

def run_snapshot(program: Program, inputs: dict[str, np.ndarray], executor: str,
                 chip=CHIP) -> dict[str, np.ndarray]:
    """Every HBM array and every on-chip tensor's bytes after running ``program`` (resumed after
    each CORE_BARRIER it pauses at), and where it paused with which registers."""
    arrays = {name: a.copy() for name, a in inputs.items()}
    result = sim.run(program, arrays, chip, executor=executor, uninitialized_memory="zero")
    pauses = []
    while result.paused is not None:
        pauses.append((result.paused.at, result.paused.barrier, *result.paused.registers))
        result = sim.run(program, arrays, chip, executor=executor, uninitialized_memory="zero",
                         resume=result.paused)
    core = core_memory(result.prepared.chip)
    placement = result.prepared.placement
    snap = {name: a.reshape(-1).view(np.uint8).copy() for name, a in arrays.items()}
    snap["(pauses)"] = np.array([v for p in pauses for v in (*p, -1)], np.int64)
    for t in program.tensors:
        if t.memory is not HBM:
            mem = core.sbuf if t.memory is SBUF else core.psum
            start, off = placement.start_partition[t.id], placement.byte_offset[t.id]
            snap[t.name] = mem[start:start + t.partitions, off:off + t.bytes_per_partition].copy()
    return snap


def describe(program: Program) -> str:
    lines = []
    for i, ins in enumerate(program.instructions):
        srcs = ", ".join(s.describe() for s in ins.srcs)
        extra = f" dst2={ins.dst2.describe()}" if ins.dst2 is not None else ""
        dst = ins.dst.describe() if ins.dst is not None else None
        lines.append(f"  {i}: {ins.opcode.name} on {ins.engine.name} dst={dst}{extra} "
                     f"srcs=[{srcs}] imm={ins.imm}")
    return "\n".join(lines)


def assert_executors_agree(program: Program, inputs: dict[str, np.ndarray], label: str = "",
                           chip=CHIP) -> None:
    numba = run_snapshot(program, inputs, "numba", chip)
    reference = run_snapshot(program, inputs, "reference", chip)
    bad = [name for name in numba if not np.array_equal(numba[name], reference[name])]
    if bad:
        where = {name: np.flatnonzero(numba[name].reshape(-1) != reference[name].reshape(-1))[:8].tolist()
                 for name in bad}
        raise AssertionError(f"executors disagree on {bad} (first differing bytes {where}) {label}for\n"
                             f"{describe(program)}")


def random_inputs(program: Program, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {t.name: fill(rng, t) if t.kind in ("input", "inout") else np.zeros(t.shape, t.dtype.numpy)
            for t in program.hbm_tensors()}
