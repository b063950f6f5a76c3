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
the reason (both in opcode_generators.py; the tensor pool and the comparison are in
program_fuzz.py). Disagreements found here become the ``test_regression_*`` cases at the bottom.
"""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opcode_generators import FUZZED, GENERATORS, NO_GENERATOR, random_program
from program_fuzz import Gen, assert_executors_agree, random_inputs

from neuronsim.sim import ActFunc, Opcode, Program, ProgramBuilder
from neuronsim.sim.engines import OPDEFS


@settings(max_examples=500, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.randoms(use_true_random=False), st.integers(0, 2**32 - 1))
def test_random_programs_agree_bit_for_bit(r, seed):
    _, program = random_program(r, seed)
    assert_executors_agree(program, random_inputs(program, seed),
                           f"(inputs: random_inputs(program, seed={seed})) ")


@pytest.mark.slow
@settings(max_examples=5000, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.randoms(use_true_random=False), st.integers(0, 2**32 - 1))
def test_random_programs_agree_bit_for_bit_long(r, seed):
    """The same property with fresh randomness each run (``-m slow``)."""
    _, program = random_program(r, seed)
    assert_executors_agree(program, random_inputs(program, seed))


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
