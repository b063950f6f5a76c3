"""One random-instruction generator per opcode over program_fuzz's tensor pool, and
``random_program`` which strings them together (see test_executors.py's docstring)."""

from __future__ import annotations

import math
import random

import numpy as np
from program_fuzz import (
    ARITH,
    BINARY_BITVEC,
    COMPARE,
    FLOAT_DTYPES,
    HBM,
    INT_DTYPES,
    MATMUL_FP32,
    MATMUL_LOW,
    ON_CHIP,
    PREDICATE_DTYPES,
    PSUM,
    RANGE_COMPARE,
    SBUF,
    Gen,
    small_float,
)

from neuronsim.errors import NeuronSimError
from neuronsim.sim import ActFunc, AluOp, Engine, Instruction, Memory, Opcode, Program
from neuronsim.sim.dtypes import DType
from neuronsim.sim.engines import OPDEFS
from neuronsim.sim.engines.control import BRANCH_CMPS
from neuronsim.sim.ir import BITVEC_ALU_OPS, CONTROL_OPS, REDUCE_ALU_OPS, AccessPattern
from neuronsim.sim.validate import validate_instruction


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
