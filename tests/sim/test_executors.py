"""Two executors, one truth (STYLE habit 4): random valid Programs leave bit-identical results.

Each example builds a Program over a random pool of tensors — HBM inputs, outputs and an inout;
SBUF tensors of random dtypes and partition counts, some placed at partitions 32/64/96; PSUM
tensors — then a random sequence of instructions drawn from the opcodes implemented in ``OPDEFS``
when the test runs, so engines join the fuzzing as they land. Operands use random access patterns:
strided, permuted, reversed and broadcast (step 0) free dims, partial partitions at legal start
partitions, HBM views with arbitrary partition steps. Inputs mix ordinary values, small integers,
specials (+-0, +-inf, NaN, subnormals, extremes) and raw random bit patterns.

Every example runs on the Numba and on the reference executor with zero-filled memory; every HBM
array and the bytes of every SBUF/PSUM tensor must be identical. A generated instruction the
validator rejects is dropped (the generators aim at valid ones; ``test_generators_make_valid_
instructions`` keeps them honest). Opcodes without a generator are listed in ``NO_GENERATOR`` with
the reason. Disagreements found here become the ``test_regression_*`` cases at the bottom.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuronsim import sim
from neuronsim.errors import NeuronSimError
from neuronsim.sim import ActFunc, AluOp, Engine, Instruction, Memory, Opcode, Program, ProgramBuilder
from neuronsim.sim.chips import get_chip
from neuronsim.sim.dtypes import DType
from neuronsim.sim.engines import OPDEFS
from neuronsim.sim.engines.control import BRANCH_CMPS
from neuronsim.sim.ir import BITVEC_ALU_OPS, CONTROL_OPS, OPCODE_ENGINES, REDUCE_ALU_OPS, AccessPattern
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


# ---------------------------------------------------------------- one generator per opcode

def gen_dma_copy(g: Gen) -> None:
    p, nums = g.partitions(), g.free_nums()
    direction = g.choice(["load", "store", "on_chip", "hbm"])
    dst_mem, src_mem = {"load": (SBUF, HBM), "store": (HBM, SBUF), "on_chip": (SBUF, SBUF),
                        "hbm": (HBM, HBM)}[direction]
    dst = g.operand([dst_mem], p, nums, write=True)
    src_nums = nums if direction == "on_chip" else g.refactor(math.prod(nums))
    g.emit(Opcode.DMA_COPY, dst, [g.operand([src_mem], p, src_nums)], queue=g.r.randrange(16))



def gen_dma_compute(g: Gen) -> None:
    p, nums = g.partitions(), g.free_nums()
    dst = g.operand(g.choice([[SBUF], [HBM]]), p, nums, write=True)
    srcs = [g.operand(g.choice([[SBUF], [HBM]]), p, g.refactor(math.prod(nums)))
            for _ in range(g.r.randint(1, 4))]
    g.emit(Opcode.DMA_COMPUTE, dst, srcs, queue=g.r.randrange(16))


def gen_dma_transpose(g: Gen) -> None:
    a, bdim = g.partitions(), g.r.randint(1, 128)
    two_four = frozenset(d for d in DType if d.itemsize in (2, 4))
    src = g.operand(g.choice([[HBM], [SBUF]]), a, [bdim], dtypes=two_four)
    if src is not None:
        dst = g.operand([SBUF], bdim, [a], write=True, dtypes={src.dtype})
        g.emit(Opcode.DMA_TRANSPOSE, dst, [src], queue=g.r.randrange(16))


def gen_matmul(g: Gen) -> None:
    k, stat_nums, mov_nums = g.partitions(), g.free_nums(hi=64), g.free_nums(hi=64)
    cls = g.choice([MATMUL_LOW, MATMUL_FP32])
    stationary = g.operand([SBUF], k, stat_nums, dtypes=cls)
    moving = g.operand([SBUF], k, mov_nums, dtypes=cls)
    dst = g.operand([PSUM], math.prod(stat_nums), [math.prod(mov_nums)], write=True, dtypes={DType.float32})
    g.emit(Opcode.NC_MATMUL, dst, [stationary, moving], accumulate=g.chance(0.5))


def gen_transpose(g: Gen) -> None:
    engine = g.engine(Opcode.NC_TRANSPOSE)
    limit = 128 if engine is Engine.TENSOR else 32
    p, nums = g.partitions(limit), g.free_nums(hi=limit)
    src = g.operand([SBUF] if engine is Engine.TENSOR else ON_CHIP, p, nums)
    if src is not None:
        dst_mem = [PSUM] if engine is Engine.TENSOR else ON_CHIP
        dst = g.operand(dst_mem, math.prod(nums), [p], write=True, dtypes={src.dtype})
        g.emit(Opcode.NC_TRANSPOSE, dst, [src], engine=engine)


def gen_activation(g: Gen) -> None:
    p, nums = g.partitions(), g.free_nums()
    srcs = [g.operand(ON_CHIP, p, nums)]
    imm = {"func": g.choice(ActFunc)}
    for name in ("bias", "scale"):
        if g.chance(0.3):
            imm[f"{name}_is_tile"] = True
            # S16: a scale tile is fp32, a bias tile any dtype but tfloat32
            dtypes = {DType.float32} if name == "scale" else set(DType) - {DType.tfloat32}
            srcs.append(g.operand(ON_CHIP, p, [1], dtypes=dtypes))
        else:
            imm[name] = small_float(g)
    dst2 = None
    if g.chance(0.3):
        imm["reduce"] = True
        dst2 = g.operand(ON_CHIP, p, [1], write=True) or False
    g.emit(Opcode.ACTIVATION, g.operand(ON_CHIP, p, nums, write=True), srcs, dst2=dst2, **imm)


def _psum_if(ap: AccessPattern | None) -> Memory | None:
    """The memory a second input must avoid: two inputs of one VectorE op cannot both be in PSUM."""
    return PSUM if ap is not None and ap.memory is PSUM else None


def _elementwise_memories(engine: Engine):
    return [SBUF] if engine is Engine.GPSIMD else ON_CHIP


def gen_tensor_tensor(g: Gen) -> None:
    engine = g.engine(Opcode.TENSOR_TENSOR)
    p, nums, mem = g.partitions(), g.free_nums(), _elementwise_memories(engine)
    bitvec = engine is Engine.VECTOR and g.chance(0.25)
    dtypes = INT_DTYPES if bitvec else None
    a = g.operand(mem, p, nums, dtypes=dtypes)
    b = g.operand(mem, p, nums, dtypes=dtypes, not_in=_psum_if(a))
    dst = g.operand(mem, p, nums, write=True, dtypes=dtypes)
    g.emit(Opcode.TENSOR_TENSOR, dst, [a, b], engine=engine, op=g.choice(BINARY_BITVEC if bitvec else ARITH))


def gen_tensor_scalar(g: Gen) -> None:
    engine = g.engine(Opcode.TENSOR_SCALAR)
    p, nums, mem = g.partitions(), g.free_nums(), _elementwise_memories(engine)
    bitvec = engine is Engine.VECTOR and g.chance(0.2)
    if engine is Engine.SCALAR:
        op0, op1 = g.choice([(AluOp.multiply, AluOp.add), (AluOp.multiply, None), (AluOp.add, None)])
    elif engine is Engine.GPSIMD:
        op0, op1 = AluOp.rsqrt, None
    elif bitvec:
        op0, op1 = g.choice(BINARY_BITVEC), g.choice([None, *BINARY_BITVEC])
    else:
        op0, op1 = g.choice(ARITH), g.choice([None, *ARITH])
    dtypes = INT_DTYPES if bitvec else None
    srcs = [g.operand(mem, p, nums, dtypes=dtypes)]
    imm = {"op0": op0}
    for i, op in ((0, op0), (1, op1)):
        if op is None:
            continue
        imm[f"op{i}"] = op
        if engine is Engine.VECTOR and not bitvec and g.chance(0.3):
            imm[f"operand{i}_is_tile"] = True
            srcs.append(g.operand(mem, p, [1], dtypes={DType.float32}))
        else:
            imm[f"operand{i}"] = g.r.randint(-3, 9) if bitvec else small_float(g)
        if engine is Engine.VECTOR and g.chance(0.3):
            imm[f"reverse{i}"] = True
    dst = g.operand(mem, p, nums, write=True, dtypes=dtypes)
    g.emit(Opcode.TENSOR_SCALAR, dst, srcs, engine=engine, **imm)


def gen_scalar_tensor_tensor(g: Gen) -> None:
    p, nums = g.partitions(), g.free_nums()
    data = g.operand(ON_CHIP, p, nums)
    srcs, imm = [data], {"op0": g.choice(ARITH), "op1": g.choice(ARITH)}
    if g.chance(0.3):
        imm["operand0_is_tile"] = True
        srcs.append(g.operand(ON_CHIP, p, [1], dtypes={DType.float32}))
    else:
        imm["operand0"] = small_float(g)
    srcs.append(g.operand(ON_CHIP, p, nums, not_in=_psum_if(data)))
    g.emit(Opcode.SCALAR_TENSOR_TENSOR, g.operand(ON_CHIP, p, nums, write=True), srcs, **imm)


def gen_tensor_copy(g: Gen) -> None:
    engine = g.engine(Opcode.TENSOR_COPY)
    p, nums, mem = g.partitions(), g.free_nums(), _elementwise_memories(engine)
    dst = g.operand(mem, p, g.refactor(math.prod(nums)), write=True)
    g.emit(Opcode.TENSOR_COPY, dst, [g.operand(mem, p, nums)], engine=engine)


def gen_memset(g: Gen) -> None:
    engine = g.engine(Opcode.MEMSET)
    dst = g.operand(_elementwise_memories(engine), g.partitions(), g.free_nums(), write=True)
    if dst is not None:
        value = g.r.randint(-5, 300) if dst.dtype.is_int else small_float(g)
        g.emit(Opcode.MEMSET, dst, engine=engine, value=value)


def gen_copy_predicated(g: Gen) -> None:
    p, nums = g.partitions(), g.free_nums()
    dst = g.operand(ON_CHIP, p, nums, write=True)
    if dst is not None:
        src = g.operand(ON_CHIP, p, nums, dtypes={dst.dtype})
        pred = g.operand(ON_CHIP, p, nums, dtypes=PREDICATE_DTYPES, not_in=_psum_if(src))
        g.emit(Opcode.TENSOR_COPY_PREDICATED, dst, [src, pred], reverse_pred=g.chance(0.5))


def gen_select(g: Gen) -> None:
    p, nums = g.partitions(), g.free_nums()
    pred = g.operand(ON_CHIP, p, nums, dtypes=PREDICATE_DTYPES)
    on_true, on_false = g.operand([SBUF], p, nums), g.operand([SBUF], p, nums)
    g.emit(Opcode.SELECT, g.operand(ON_CHIP, p, nums, write=True), [pred, on_true, on_false])


def gen_tensor_reduce(g: Gen) -> None:
    p, nums = g.partitions(), g.free_nums()
    op = g.choice(REDUCE_ALU_OPS)
    dtypes = INT_DTYPES if op in BITVEC_ALU_OPS else None
    num_axes = g.r.randint(1, len(nums))
    kept = nums[:len(nums) - num_axes] or [1]
    imm = {"op": op, "num_axes": num_axes}
    if op not in BITVEC_ALU_OPS and g.chance(0.3):
        imm["negate"] = True
    g.emit(Opcode.TENSOR_REDUCE, g.operand(ON_CHIP, p, kept, write=True, dtypes=dtypes),
           [g.operand(ON_CHIP, p, nums, dtypes=dtypes)], **imm)


def gen_scan(g: Gen) -> None:
    p, nums = g.partitions(), g.free_nums()
    a = g.operand(ON_CHIP, p, nums)
    srcs = [a, g.operand(ON_CHIP, p, nums, not_in=_psum_if(a))]
    imm = {"op0": g.choice(ARITH), "op1": g.choice(ARITH)}
    imm |= {"reverse0": g.chance(0.3), "reverse1": g.chance(0.3)}
    if g.chance(0.4):
        imm["initial_is_tile"] = True
        srcs.append(g.operand(ON_CHIP, p, [1]))
    else:
        imm["initial"] = small_float(g)
    g.emit(Opcode.TENSOR_TENSOR_SCAN, g.operand(ON_CHIP, p, nums, write=True), srcs, **imm)


CUMULATIVE_DTYPES = frozenset(DType) - {DType.int32, DType.uint32, DType.tfloat32, DType.bool_}


def gen_cumulative(g: Gen) -> None:
    """tensor_scalar_cumulative: a scalar op, then a running fold (reset or loaded accumulator)."""
    p, nums = g.partitions(), g.free_nums()
    src = g.operand(ON_CHIP, p, nums, dtypes=CUMULATIVE_DTYPES)
    srcs = [src]
    imm = {"op0": g.choice(ARITH), "op1": g.choice([AluOp.add, AluOp.subtract, AluOp.multiply, AluOp.maximum,
                                                   AluOp.minimum]), "reverse0": g.chance(0.3)}
    if g.chance(0.4):
        imm["imm0_is_tile"] = True
        srcs.append(g.operand(ON_CHIP, p, [1], dtypes={DType.float32}))
    else:
        imm["imm0"] = small_float(g)
    if g.chance(0.5):
        imm["load"] = True
        if g.chance(0.5):
            imm["imm1_is_tile"] = True
            srcs.append(g.operand(ON_CHIP, p, [1], dtypes={DType.float32}))
        else:
            imm["imm1"] = small_float(g)
    g.emit(Opcode.TENSOR_SCALAR_CUMULATIVE, g.operand(ON_CHIP, p, nums, write=True, dtypes=CUMULATIVE_DTYPES),
           srcs, **imm)


def gen_bn_stats(g: Gen) -> None:
    p = g.partitions()
    g.emit(Opcode.BN_STATS, g.operand(ON_CHIP, p, g.choice([[6], [2, 3]]), write=True),
           [g.operand(ON_CHIP, p, g.free_nums(hi=g.choice([16, 64, 512])))])


def gen_bn_aggr(g: Gen) -> None:
    p, k = g.partitions(), g.r.randint(1, 6)
    g.emit(Opcode.BN_AGGR, g.operand(ON_CHIP, p, [2], write=True),
           [g.operand(ON_CHIP, p, g.choice([[3 * k], [k, 3]]))])


def gen_max8(g: Gen) -> None:
    p = g.partitions()
    data = g.operand(ON_CHIP, p, g.free_nums(lo=8, hi=64))
    g.emit(Opcode.MAX8, g.operand(ON_CHIP, p, [8], write=True), [data])


def gen_find_index8(g: Gen) -> None:
    p = g.partitions()
    dst = g.operand(ON_CHIP, p, g.choice([[8], [2, 4]]), write=True, dtypes={DType.uint16, DType.uint32})
    data = g.operand(ON_CHIP, p, g.free_nums(lo=8, hi=64))
    g.emit(Opcode.NC_FIND_INDEX8, dst, [data, g.operand(ON_CHIP, p, [8])])


def gen_match_replace8(g: Gen) -> None:
    """Inputs mix small integers, so values repeat and the duplicate rule is exercised."""
    p, nums = g.partitions(), g.free_nums(lo=8, hi=64)
    data = g.operand(ON_CHIP, p, nums)
    vals = g.operand(ON_CHIP, p, [8], not_in=_psum_if(data))
    dst = data if data is not None and g.chance(0.3) else g.operand(ON_CHIP, p, nums, write=True)
    dst2 = None
    if g.chance(0.6):
        dst2 = g.operand(ON_CHIP, p, g.choice([[8], [2, 4]]), write=True,
                         dtypes={DType.uint16, DType.uint32}) or False
    g.emit(Opcode.NC_MATCH_REPLACE8, dst, [data, vals], dst2=dst2,
           imm=g.choice([float("-inf"), 0.0, -1.0, float("nan"), 3.5]))


def gen_range_select(g: Gen) -> None:
    p, nums = g.partitions(), g.free_nums()
    data = g.operand(ON_CHIP, p, nums, dtypes=FLOAT_DTYPES)
    bounds = [g.operand(ON_CHIP, p, [1], dtypes={DType.float32}) for _ in range(2)]
    dst2 = g.operand(ON_CHIP, p, [1], write=True, dtypes=FLOAT_DTYPES) or False if g.chance(0.6) else None
    g.emit(Opcode.RANGE_SELECT, g.operand(ON_CHIP, p, nums, write=True), [data, *bounds], dst2=dst2,
           cmp0=g.choice(RANGE_COMPARE), cmp1=g.choice(RANGE_COMPARE), range_start=g.r.randrange(0, 600),
           on_false=float(np.finfo(np.float32).min))


def _affine_imm(g: Gen, n: int) -> dict:
    pattern = [[g.choice([0, 1, -1, 2, -3, 7, 100]), num] for num in g.refactor(n)]
    return {"pattern": pattern, "offset": g.r.randint(-300, 300), "channel_multiplier": g.r.randint(-20, 20)}


def gen_iota(g: Gen) -> None:
    p, nums = g.partitions(), g.free_nums()
    g.emit(Opcode.IOTA, g.operand([SBUF], p, nums, write=True), **_affine_imm(g, math.prod(nums)))


def gen_affine_select(g: Gen) -> None:
    p, nums = g.partitions(), g.free_nums()
    value = g.choice([-3.0e38, 0.0, -1.0, 7.5, float("nan"), float("-inf")])
    g.emit(Opcode.AFFINE_SELECT, g.operand([SBUF], p, nums, write=True), [g.operand([SBUF], p, nums)],
           cmp_op=g.choice(COMPARE), on_false_value=value, **_affine_imm(g, math.prod(nums)))


def gen_partition_reduce(g: Gen) -> None:
    p, nums = g.partitions(), g.free_nums()
    op = g.choice([AluOp.add, AluOp.maximum, AluOp.bitwise_or, AluOp.bitwise_and])
    dtypes = INT_DTYPES if op in BITVEC_ALU_OPS else None
    g.emit(Opcode.TENSOR_PARTITION_REDUCE, g.operand([SBUF], 1, [math.prod(nums)], write=True, dtypes=dtypes),
           [g.operand([SBUF], p, nums, dtypes=dtypes)], op=op)


def gen_n_gather(g: Gen) -> None:
    """Random uint32 bits masked into range by a VectorE bitwise_and just before (an index outside data
    stops the run; tests/sim/engines/test_gpsimd_gather.py covers that)."""
    p, nums = g.partitions(), g.free_nums()
    data = g.operand([SBUF], p, g.free_nums(lo=2, hi=200))
    idx = g.operand([SBUF], p, nums, write=True, dtypes={DType.uint32})
    if data is None or idx is None:
        return
    before = len(g.instructions)
    g.emit(Opcode.TENSOR_SCALAR, idx, [idx], engine=Engine.VECTOR, op0=AluOp.bitwise_and,
           operand0=2 ** int(math.log2(data.free_size)) - 1)
    if len(g.instructions) > before:
        g.emit(Opcode.NC_N_GATHER, g.operand([SBUF], p, nums, write=True, dtypes={data.dtype}), [data, idx])


def gen_local_gather(g: Gen) -> None:
    """uint16 indices masked to below the source's elements (minus n) just before: a reach past the
    source stops the run (tests/sim/engines/test_gpsimd_gather.py covers that)."""
    p = g.choice([16, 32, 64, 128])
    n = g.choice([1, 2, 4])
    src = g.operand([SBUF], p, g.free_nums(lo=8, hi=64))
    idx = g.operand([SBUF], p, g.free_nums(hi=4), write=True, dtypes={DType.uint16})
    if src is None or idx is None:
        return
    before = len(g.instructions)
    reach = 2 ** int(math.log2(src.free_size - n + 1)) - 1
    g.emit(Opcode.TENSOR_SCALAR, idx, [idx], engine=Engine.VECTOR, op0=AluOp.bitwise_and, operand0=reach)
    if len(g.instructions) == before:
        return
    k = g.r.randint(1, min(idx.free_size * 16, 48))
    dst = g.operand([SBUF], p, [k * n], write=True, dtypes={src.dtype})
    g.emit(Opcode.LOCAL_GATHER, dst, [src, idx], num_elem_per_idx=n, num_valid_indices=k)


def gen_topk(g: Gen) -> None:
    """The K largest of n snake elements per 16-partition group: a bf16 source (the pool's values,
    NaN and ties among them), bf16 values and uint32 indices written at K snake positions only."""
    p = g.choice([16, 32, 64, 128])
    src = g.operand([SBUF], p, g.free_nums(lo=1, hi=12), dtypes={DType.bfloat16})
    if src is None:
        return
    n = g.r.randint(8, 16 * src.free_size) if src.free_size * 16 >= 8 else 8
    k = g.r.randint(1, min(n, 40))
    val = g.operand([SBUF], p, [k], write=True, dtypes={DType.bfloat16})
    idx = g.operand([SBUF], p, [k], write=True, dtypes={DType.uint32})
    g.emit(Opcode.TOPK, val, [src], dst2=idx if idx is not None else False, n=n)


def gen_sequence_bounds(g: Gen) -> None:
    """Runs of segment ids on one partition: int32 ids masked to 0..3 just before (padding and repeats);
    float ids keep the pool's values (zeros, -0.0, NaN, repeats)."""
    nums = g.free_nums(hi=40)
    src = g.operand([SBUF], 1, nums, dtypes={DType.float32, DType.int32})
    if src is None:
        return
    if src.dtype is DType.int32:
        before = len(g.instructions)
        g.emit(Opcode.TENSOR_SCALAR, src, [src], engine=Engine.VECTOR, op0=AluOp.bitwise_and, operand0=3)
        if len(g.instructions) == before:
            return
    dst = g.operand([SBUF], 1, [2, math.prod(nums)], write=True, dtypes={DType.float32, DType.int32})
    g.emit(Opcode.SEQUENCE_BOUNDS, dst, [src])


def gen_nonzero(g: Gen) -> None:
    """Nonzero positions per GpSimd core's partition; int32 sources are masked to 0/1 just before so
    about half their elements are zero (float sources keep the pool's zeros, NaNs and -0.0)."""
    p, nums = g.partitions(), g.free_nums(hi=40)
    src = g.operand([SBUF], p, nums, dtypes={DType.float32, DType.int32})
    if src is None:
        return
    if src.dtype is DType.int32:
        before = len(g.instructions)
        g.emit(Opcode.TENSOR_SCALAR, src, [src], engine=Engine.VECTOR, op0=AluOp.bitwise_and, operand0=1)
        if len(g.instructions) == before:
            return
    dst = g.operand([SBUF], p, [math.prod(nums) + 1], write=True, dtypes={DType.int32})
    g.emit(Opcode.NONZERO_WITH_COUNT, dst, [src], index_offset=g.choice([0, 7, -3, 2**20]),
           padding_val=g.choice([-1, 0, 2**31 - 1]))


RNG_STATE_DTYPES = frozenset(d for d in DType if d.itemsize == 4)


def gen_rng(g: Gen) -> None:
    engine = g.engine(Opcode.RNG)
    dst = g.operand(_elementwise_memories(engine), g.partitions(), g.free_nums(), write=True,
                    dtypes=INT_DTYPES)
    g.emit(Opcode.RNG, dst, [g.operand(ON_CHIP, 1, [1], dtypes=RNG_STATE_DTYPES)], engine=engine,
           offset=g.r.randrange(2**32))


def gen_dropout(g: Gen) -> None:
    p, nums = g.partitions(), g.free_nums()
    dst = g.operand(ON_CHIP, p, nums, write=True)
    if dst is None:
        return
    srcs = [g.operand(ON_CHIP, p, nums, dtypes={dst.dtype}),
            g.operand(ON_CHIP, 1, [1], dtypes=RNG_STATE_DTYPES)]
    imm = {"offset": g.r.randrange(2**32)}
    if g.chance(0.3):
        srcs.append(g.operand(ON_CHIP, p, [1], dtypes={DType.float32}))
        imm["prob_is_tile"] = True
    else:
        imm["prob"] = g.choice([0.0, 0.1, 0.5, 0.9, 1.0, -1.0, 2.0, float("nan")])
    g.emit(Opcode.DROPOUT, dst, srcs, **imm)


def gen_stream_shuffle(g: Gen) -> None:
    """Random masks (some 255: keep dst) over partial, multi-quadrant, in-place or PSUM operands."""
    dst_p, nums = g.partitions(), g.free_nums()
    quadrants = (dst_p + 31) // 32
    src_p = g.choice([1, min(128, 32 * quadrants), dst_p]) if quadrants == 1 else min(128, 32 * quadrants)
    reach = min(32, src_p)
    mask = tuple(255 if g.chance(0.2) else g.r.randrange(reach) for _ in range(32))
    dst = g.operand(ON_CHIP, dst_p, nums, write=True)
    if dst is None:
        return
    src_nums = g.refactor(math.prod(nums))
    src = dst if g.chance(0.15) else g.operand(ON_CHIP, src_p, src_nums, dtypes={dst.dtype})
    g.emit(Opcode.NC_STREAM_SHUFFLE, dst, [src], mask=mask)


INDEX_DTYPES = frozenset({DType.int16, DType.uint16, DType.int32, DType.uint32})


def gen_dma_copy_indirect(g: Gen) -> None:
    """A gather or scatter on an HBM tensor; indices are random data, so many are out of bounds:
    oob_skip makes both executors skip the same ones."""
    vector, to_dst = g.chance(0.6), g.chance(0.5)
    p, nums = g.partitions(), g.free_nums()
    side = g.operand([HBM], p, nums, write=to_dst)
    other = g.operand([SBUF, HBM], p, nums if vector else g.refactor(math.prod(nums)), write=not to_dst)
    offsets = g.operand([SBUF], p if vector else 1, [1], dtypes=INDEX_DTYPES)
    if side is None or other is None:
        return
    if vector:
        side = AccessPattern(side.tensor, side.offset, ((0, p), *side.pattern[1:]))
    dst, src = (side, other) if to_dst else (other, side)
    g.emit(Opcode.DMA_COPY_INDIRECT, dst, [src, offsets], queue=g.r.randrange(16),
           indexed="dst" if to_dst else "src", vector=vector, stride=g.choice([1, 2, 7, 32, 100]),
           oob_skip=True)


def _control(g: Gen, opcode: Opcode, srcs=(), dst=None, **imm) -> int | None:
    """Emit a control instruction (no destination but a store's); its index, None if skipped."""
    if any(x is None for x in srcs) or (opcode is Opcode.REGISTER_STORE and dst is None):
        return None
    ins = Instruction(opcode, Engine.SYNC, dst, tuple(srcs), imm, location=f"fuzz:{len(g.instructions)}")
    try:
        validate_instruction(ins, g.chip, g.placement, g.ids)
    except NeuronSimError as err:
        g.rejected.append((opcode, str(err)))
        return None
    g.instructions.append(ins)
    return len(g.instructions) - 1


def _retarget(g: Gen, at: int) -> None:
    """Point the branch at ``at`` to the next instruction to be emitted."""
    ins = g.instructions[at]
    g.instructions[at] = Instruction(ins.opcode, ins.engine, None, (),
                                     {**ins.imm, "target": len(g.instructions)}, location=ins.location)


def gen_control(g: Gen) -> None:
    """Registers and branches: a load from random integer data and a store, a forward branch on the
    loaded value around one random instruction, and a counted loop (0..3 trips) around another,
    sometimes with a CORE_BARRIER in it (the run pauses there every trip and is resumed)."""
    body = [op for op in FUZZED if op not in CONTROL_OPS]
    reg = g.r.randrange(4)
    _control(g, Opcode.REGISTER_LOAD, [g.operand([SBUF, HBM], 1, [1], dtypes=INT_DTYPES)], dst_reg=reg)
    if g.chance(0.5):
        _control(g, Opcode.REGISTER_STORE, (), g.operand([SBUF, HBM], 1, [1], write=True,
                                                         dtypes={DType.int32, DType.uint32}),
                 src_reg=g.r.randrange(4))
    skip = _control(g, Opcode.BRANCH, reg=reg, cmp=g.choice(BRANCH_CMPS[1:]), value=g.r.randint(-5, 5),
                    target=0)
    GENERATORS[g.choice(body)](g)
    _retarget(g, skip)
    counter = 4 + g.r.randrange(2)
    _control(g, Opcode.REGISTER_MOVE, dst_reg=counter, src_reg=-1, value=g.r.randint(-1, 1))
    top = _control(g, Opcode.BRANCH, reg=counter, cmp="greater_equal", value=g.r.randint(0, 2), target=0)
    GENERATORS[g.choice(body)](g)
    if g.chance(0.5):
        _control(g, Opcode.CORE_BARRIER, barrier=g.r.randrange(3))
    _control(g, Opcode.REGISTER_MOVE, dst_reg=counter, src_reg=counter, value=1)
    _control(g, Opcode.BRANCH, cmp="always", target=top)
    _retarget(g, top)


GENERATORS = {
    Opcode.DMA_COPY: gen_dma_copy,
    Opcode.DMA_COPY_INDIRECT: gen_dma_copy_indirect,
    Opcode.DMA_COMPUTE: gen_dma_compute,
    Opcode.DMA_TRANSPOSE: gen_dma_transpose,
    Opcode.NC_MATMUL: gen_matmul,
    Opcode.NC_TRANSPOSE: gen_transpose,
    Opcode.ACTIVATION: gen_activation,
    Opcode.TENSOR_TENSOR: gen_tensor_tensor,
    Opcode.TENSOR_SCALAR: gen_tensor_scalar,
    Opcode.SCALAR_TENSOR_TENSOR: gen_scalar_tensor_tensor,
    Opcode.TENSOR_COPY: gen_tensor_copy,
    Opcode.MEMSET: gen_memset,
    Opcode.TENSOR_COPY_PREDICATED: gen_copy_predicated,
    Opcode.SELECT: gen_select,
    Opcode.TENSOR_REDUCE: gen_tensor_reduce,
    Opcode.TENSOR_TENSOR_SCAN: gen_scan,
    Opcode.TENSOR_SCALAR_CUMULATIVE: gen_cumulative,
    Opcode.BN_STATS: gen_bn_stats,
    Opcode.BN_AGGR: gen_bn_aggr,
    Opcode.MAX8: gen_max8,
    Opcode.NC_FIND_INDEX8: gen_find_index8,
    Opcode.NC_MATCH_REPLACE8: gen_match_replace8,
    Opcode.RANGE_SELECT: gen_range_select,
    Opcode.RNG: gen_rng,
    Opcode.DROPOUT: gen_dropout,
    Opcode.NC_STREAM_SHUFFLE: gen_stream_shuffle,
    Opcode.IOTA: gen_iota,
    Opcode.AFFINE_SELECT: gen_affine_select,
    Opcode.TENSOR_PARTITION_REDUCE: gen_partition_reduce,
    Opcode.NC_N_GATHER: gen_n_gather,
    Opcode.NONZERO_WITH_COUNT: gen_nonzero,
    Opcode.LOCAL_GATHER: gen_local_gather,
    Opcode.TOPK: gen_topk,
    Opcode.SEQUENCE_BOUNDS: gen_sequence_bounds,
    Opcode.BRANCH: gen_control,
}
NO_GENERATOR: dict[Opcode, str] = {  # opcode -> why it is not in the main fuzz
    Opcode.QUANTIZE_MX: "NeuronCore-v4 only: test_executors_mx.py fuzzes it on trn3",
    Opcode.NC_MATMUL_MX: "NeuronCore-v4 only: test_executors_mx.py fuzzes it on trn3",
    Opcode.EXPONENTIAL: "NeuronCore-v4 only: test_executors_mx.py fuzzes it on trn3",
    Opcode.RAND2: "NeuronCore-v4 only: test_executors_mx.py fuzzes it on trn3",
    Opcode.REGISTER_MOVE: "fuzzed by BRANCH's generator (gen_control)",
    Opcode.REGISTER_LOAD: "fuzzed by BRANCH's generator (gen_control)",
    Opcode.REGISTER_STORE: "fuzzed by BRANCH's generator (gen_control)",
    Opcode.CORE_BARRIER: "fuzzed by BRANCH's generator (gen_control)",
}
FUZZED = sorted(op for op in OPDEFS if op in GENERATORS)


def random_program(r: random.Random, seed: int, length: int | None = None) -> tuple[Gen, Program]:
    g = Gen(r, np.random.default_rng(seed))
    source = next(t for t in g.tensors if t.name == "h_in0")
    for t in g.tensors:  # most SBUF tensors start from input data
        if t.memory is SBUF and g.chance(0.8) and Opcode.DMA_COPY in OPDEFS:
            n = t.num_elements
            src = AccessPattern(source, g.r.randint(0, source.num_elements - n), ((t.free_size, t.partitions),
                                                                                     (1, t.free_size)))
            g.emit(Opcode.DMA_COPY, t.ap(), [src])
    for _ in range(g.r.randint(1, 8) if length is None else length):
        GENERATORS[g.choice(FUZZED)](g)
    return g, g.program()


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


@settings(max_examples=500, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.randoms(use_true_random=False), st.integers(0, 2**32 - 1))
def test_random_programs_agree_bit_for_bit(r, seed):
    _, program = random_program(r, seed)
    assert_executors_agree(program, _inputs(program, seed), f"(inputs: _inputs(program, seed={seed})) ")


def _inputs(program: Program, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {t.name: fill(rng, t) if t.kind in ("input", "inout") else np.zeros(t.shape, t.dtype.numpy)
            for t in program.hbm_tensors()}


@pytest.mark.slow
@settings(max_examples=5000, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.randoms(use_true_random=False), st.integers(0, 2**32 - 1))
def test_random_programs_agree_bit_for_bit_long(r, seed):
    """The same property with fresh randomness each run (``-m slow``)."""
    _, program = random_program(r, seed)
    assert_executors_agree(program, _inputs(program, seed))


# ---------------------------------------------------------------- the generators themselves

def test_generators_make_valid_instructions():
    """Each fuzzed opcode's generator yields instructions the validator accepts (a generator whose
    output is always rejected would fuzz nothing)."""
    accepted, rejected = Counter(), Counter()
    messages: dict[Opcode, list[str]] = {}
    for seed in range(40):
        g = Gen(random.Random(seed), np.random.default_rng(seed))
        for op in FUZZED:
            for _ in range(3):
                n_ok, n_bad = len(g.instructions), len(g.rejected)
                GENERATORS[op](g)
                accepted[op] += len(g.instructions) - n_ok
                rejected[op] += len(g.rejected) - n_bad
        for op, msg in g.rejected:
            messages.setdefault(op, []).append(msg)
    weak = {op.name: (accepted[op], rejected[op], messages.get(op, [])[:3]) for op in FUZZED
            if accepted[op] < 10 or rejected[op] > accepted[op]}
    assert not weak, f"generators mostly rejected or starved (accepted, rejected, examples): {weak}"


@pytest.mark.parametrize("opcode", list(Opcode), ids=lambda op: op.name)
def test_opcode_is_fuzzed(opcode):
    """The backlog: every opcode is fuzzed once it has an OpDef and a generator."""
    if opcode not in OPDEFS:
        pytest.skip(f"{opcode.name} has no OpDef yet (its engine is not written)")
    if opcode in NO_GENERATOR:
        pytest.skip(NO_GENERATOR[opcode])
    assert opcode in GENERATORS, f"{opcode.name} is implemented but has no fuzz generator"


# ---------------------------------------------------------------- regressions found by the fuzzer

def _activation_reduce_of_negative_zero() -> Program:
    """ACTIVATION with reduce over a row whose values are all -0.0: copy(0.0 * -1 + -0.0). Found as
    silu of tiny negative values underflowing to -0.0 (fuzz seeds 1141, 2987)."""
    b = ProgramBuilder("act_reduce_negative_zero")
    x = b.hbm("x", (1, 2), "float32")
    s, y, r = b.sbuf("s", (1, 2), "float32"), b.sbuf("y", (1, 2), "float32"), b.sbuf("r", (1, 1), "float32")
    b.emit(Opcode.DMA_COPY, s, [x])
    b.emit(Opcode.ACTIVATION, y, [s], dst2=r, func=ActFunc.copy, scale=-1.0, bias=-0.0, reduce=True)
    b.emit(Opcode.DMA_COPY, b.hbm("o", (1, 1), "float32", kind="output"), [r])
    return b.build()


def test_regression_activation_reduce_of_negative_zero():
    assert_executors_agree(_activation_reduce_of_negative_zero(), {"x": np.zeros((1, 2), np.float32)})
