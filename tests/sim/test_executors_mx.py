"""Two executors, one truth, for the MX family and VectorE's exponential (NeuronCore-v4 only, so
fuzzed on trn3 apart from the main fuzz): random programs over all bit patterns agree bit for bit."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from program_fuzz import assert_executors_agree, fill

from neuronsim.sim import Opcode, Program, ProgramBuilder
from neuronsim.sim.chips import get_chip
from neuronsim.sim.dtypes import DType


def random_mx_program(r: random.Random) -> Program:
    """QUANTIZE_MX of a bf16/fp16 tile, then NC_MATMUL_MX of random x4 words and E8M0 scales (all bit
    patterns: NaN and inf values, NaN scales) into fp32 or bf16 PSUM, maybe accumulating."""
    b = ProgramBuilder("mx_fuzz")
    p, m, n, f = r.choice([32, 64, 96, 128]), r.choice([2, 6, 32]), r.choice([1, 5, 16, 40]), r.randint(1, 9)
    src = b.hbm("src", (p, 4 * f), r.choice(["bfloat16", "float16"]))
    src_sb = b.sbuf("src_sb", (p, 4 * f), src.dtype)
    q, qs = b.sbuf("q", (p, f), "uint32"), b.sbuf("qs", (p, f), "uint8")
    b.emit(Opcode.DMA_COPY, src_sb, [src])
    b.emit(Opcode.MEMSET, qs, value=0.0)
    b.emit(Opcode.QUANTIZE_MX, q, [src_sb], dst2=qs, fmt=r.choice([0, 1]))
    fmts = [r.choice([0, 1, 2]), r.choice([0, 1, 2])]
    tiles = []
    for name, width, fmt in (("s", m, fmts[0]), ("m", n, fmts[1])):
        storage = "uint16" if fmt == 2 else "uint32"
        for part, shape, dtype in (("data", (p, width), storage), ("scale", (p, width), "uint8")):
            h = b.hbm(f"{name}_{part}", shape, dtype)
            t = b.sbuf(f"{name}_{part}_sb", shape, dtype)
            b.emit(Opcode.DMA_COPY, t, [h])
            tiles.append(t)
    acc = b.psum("acc", (m, n), r.choice(["float32", "bfloat16"]))
    accumulate = r.random() < 0.5
    if accumulate:
        b.emit(Opcode.MEMSET, acc, value=r.choice([0.0, 1.5, -3.0]))
    b.emit(Opcode.NC_MATMUL_MX, acc, [tiles[0], tiles[2], tiles[1], tiles[3]], stationary_fmt=fmts[0],
           moving_fmt=fmts[1], accumulate=accumulate)
    return b.build()


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.randoms(use_true_random=False), st.integers(0, 2**32 - 1))
def test_random_mx_programs_agree_bit_for_bit(r, seed):
    program = random_mx_program(r)
    rng = np.random.default_rng(seed)
    inputs = {}
    for t in program.hbm_tensors():
        if t.dtype.is_float:
            inputs[t.name] = fill(rng, t)
        else:  # raw words and scale bytes, mostly near 2^0 so products stay finite
            top = 2 ** (8 * t.dtype.itemsize)
            bits = rng.integers(0, top, t.shape, dtype=np.uint64).astype(t.dtype.numpy)
            if t.dtype is DType.uint8 and rng.random() < 0.8:
                bits = rng.integers(110, 140, t.shape).astype(np.uint8)
            inputs[t.name] = bits
    assert_executors_agree(program, inputs, f"(seed={seed}) ", chip=get_chip("trn3"))


def random_exponential_program(r: random.Random) -> Program:
    """exp(src - max_value) of a random-dtype tile, the max an immediate or an fp32 [P, 1] tile,
    maybe with its running sum from a random reduce_init."""
    b = ProgramBuilder("exp_fuzz")
    p, f = r.choice([1, 7, 32, 128]), r.randint(1, 60)
    src = b.hbm("src", (p, f), r.choice(["float32", "bfloat16", "float16", "int32", "uint8"]))
    src_sb = b.sbuf("src_sb", (p, f), src.dtype)
    b.emit(Opcode.DMA_COPY, src_sb, [src])
    srcs, imm = [src_sb], {"max_value": r.choice([0.0, 3.5, -80.0, float("inf")])}
    if r.random() < 0.5:
        m = b.hbm("m", (p, 1), "float32")
        m_sb = b.sbuf("m_sb", (p, 1), "float32")
        b.emit(Opcode.DMA_COPY, m_sb, [m])
        srcs.append(m_sb)
        imm = {"max_is_tile": True}
    dst = b.sbuf("y", (p, f), r.choice(["float32", "bfloat16", "float8_e4m3"]))
    dst2 = b.sbuf("r", (p, 1), "float32") if r.random() < 0.5 else None
    if dst2 is not None:
        imm["reduce_init"] = r.choice([0.0, -1.25, 1e30])
    b.emit(Opcode.EXPONENTIAL, dst, srcs, dst2=dst2, **imm)
    for t in (dst, dst2):
        if t is not None:
            b.emit(Opcode.DMA_COPY, b.hbm(t.name + "_out", t.shape, t.dtype, kind="output"), [t])
    return b.build()


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.randoms(use_true_random=False), st.integers(0, 2**32 - 1))
def test_random_exponential_programs_agree_bit_for_bit(r, seed):
    program = random_exponential_program(r)
    rng = np.random.default_rng(seed)
    inputs = {t.name: fill(rng, t) for t in program.hbm_tensors() if t.kind != "output"}
    assert_executors_agree(program, inputs, f"(seed={seed}) ", chip=get_chip("trn3"))


def random_rand2_program(r: random.Random) -> Program:
    """Two RAND2 draws in a row from a random XORWOW state (all bit patterns), min/max immediates or
    fp32 [P, 1] tiles, into a random dtype; the state is read back too."""
    b = ProgramBuilder("rand2_fuzz")
    p, f = r.choice([1, 7, 32, 128]), r.randint(1, 40)
    seeds = b.hbm("seeds", (p, 24), "uint32")
    state = b.sbuf("state", (p, 24), "uint32")
    b.emit(Opcode.DMA_COPY, state, [seeds])
    srcs, imm = [state], {}
    for name, value in (("min", r.choice([-1.0, 0.0, 3.5])), ("max", r.choice([4.0, 1e3, 65536.0]))):
        if r.random() < 0.4:
            h, t = b.hbm(name, (p, 1), "float32"), b.sbuf(name + "_sb", (p, 1), "float32")
            b.emit(Opcode.DMA_COPY, t, [h])
            srcs.append(t)
            imm[f"{name}_is_tile"] = True
        else:
            imm[name] = value
    outs = []
    for k in range(2):
        dst = b.sbuf(f"y{k}", (p, f), r.choice(["float32", "bfloat16", "int32", "uint8", "float8_e5m2"]))
        b.emit(Opcode.RAND2, dst, srcs, dst2=state, **imm)
        outs.append(dst)
    for t in outs + [state]:
        b.emit(Opcode.DMA_COPY, b.hbm(t.name + "_out", t.shape, t.dtype, kind="output"), [t])
    return b.build()


@settings(max_examples=20, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.randoms(use_true_random=False), st.integers(0, 2**32 - 1))
def test_random_rand2_programs_agree_bit_for_bit(r, seed):
    program = random_rand2_program(r)
    rng = np.random.default_rng(seed)
    inputs = {t.name: fill(rng, t) for t in program.hbm_tensors() if t.kind != "output"}
    if "min" in inputs and "max" in inputs:  # min < max per partition (S16)
        inputs["max"] = np.maximum(inputs["max"], inputs["min"] + 1).astype(np.float32)
    assert_executors_agree(program, inputs, f"(seed={seed}) ", chip=get_chip("trn3"))
