"""The engines' XORWOW generator: ``rand_set_state``, ``rand_get_state`` and ``rand2`` (S16).

Each engine keeps, per compute lane (partition), its XORWOW state: 6 uint32 words on GpSimd, 24 on
VectorE (NeuronCore-v4). The simulator keeps that state in a [128, words] uint32 SBUF tile per
engine and trace (hardware keeps it inside the engine), so it is an operand like any other:
``rand_set_state`` is a bit-exact copy of the seeds into it on that engine, ``rand_get_state`` a copy
out, and every ``rand2`` reads and advances VectorE's (sim/engines/vector_rand2.py). A state never
set starts from a fixed seed (word ``w`` of lane ``p`` is ``p * words + w + 1``, written by one
GpSimd iota: assumed, the power-on state is not published), so an unseeded kernel is deterministic.
"""

from __future__ import annotations

import weakref

from neuronsim.errors import DtypeError
from neuronsim.nki.isa.common import _describe, _engine, _fail, _scalar_or_vector, _tile, emit
from neuronsim.nki.isa.enums import engine
from neuronsim.nki.tensor import TensorView
from neuronsim.nki.trace import caller_location, current_trace
from neuronsim.sim.dtypes import DType
from neuronsim.sim.engines.vector_rand2 import GPSIMD_STATE_WORDS, VECTOR_STATE_WORDS
from neuronsim.sim.ir import Engine, Memory, Opcode

LANES = 128
_WORDS = {Engine.GPSIMD: GPSIMD_STATE_WORDS, Engine.VECTOR: VECTOR_STATE_WORDS}
_STATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Trace -> {Engine: state tile}


def _state(fn: str, eng: Engine) -> TensorView:
    trace = current_trace()
    states = _STATES.setdefault(trace, {})
    if eng not in states:
        words = _WORDS[eng]
        buf = trace.new_tile(f"xorwow_state.{eng.name.lower()}", Memory.SBUF, (LANES, words), DType.uint32,
                             caller_location(3), "xorwow_state")
        states[eng] = state = TensorView.whole(buf)
        emit(fn, Opcode.IOTA, Engine.GPSIMD, state, (),
             {"pattern": ((1, words),), "offset": 1, "channel_multiplier": words}, name="xorwow_default_seed")
    return states[eng]


def _state_engine(fn: str, value) -> Engine:
    eng = _engine(value, fn, (Engine.GPSIMD, Engine.VECTOR), Engine.GPSIMD)
    if eng is Engine.VECTOR and current_trace().chip.nki_target != "gen4":
        raise _fail(fn, "VectorE's XORWOW state exists on NeuronCore-v4 (trn3) and newer; NeuronCore-v3 "
                    "keeps it on GpSimd (engine=nisa.engine.gpsimd)")
    return eng


def _lanes(fn: str, role: str, v: TensorView, eng: Engine) -> TensorView:
    words = _WORDS[eng]
    if v.buf.dtype is not DType.uint32:
        raise _fail(fn, f"{role} must be uint32; got {_describe(v)}", DtypeError)
    if v.free_size != words:
        raise _fail(fn, f"{role} must hold {words} uint32 words per lane on {eng.name.lower()} (XORWOW); got "
                    f"{_describe(v)}")
    return v


def rand_set_state(src_seeds, engine=engine.gpsimd, name=None):
    """Seed the engine's XORWOW state: partition ``p`` of ``src_seeds`` (uint32, SBUF; 6 words on
    GpSimd, 24 on VectorE) becomes lane ``p``'s state (a bit-exact copy on that engine)."""
    fn = "rand_set_state"
    eng = _state_engine(fn, engine)
    src = _lanes(fn, "src_seeds", _tile(src_seeds, "src_seeds", fn), eng)
    if src.buf.memory is not Memory.SBUF:
        raise _fail(fn, f"src_seeds must be in SBUF; got {_describe(src)}")
    state = _state(fn, eng)[0:src.partitions, :]
    emit(fn, Opcode.TENSOR_COPY, eng, state, (src,), {}, name=name or fn, roles=("src_seeds",))


def rand_get_state(dst, engine=engine.gpsimd, name=None):
    """Copy the engine's XORWOW state of lanes ``0..P-1`` into ``dst`` (uint32; SBUF, or PSUM from
    VectorE), on that engine."""
    fn = "rand_get_state"
    eng = _state_engine(fn, engine)
    dst = _lanes(fn, "dst", _tile(dst, "dst", fn), eng)
    state = _state(fn, eng)[0:dst.partitions, :]
    emit(fn, Opcode.TENSOR_COPY, eng, dst, (state,), {}, name=name or fn, roles=("xorwow_state",))


def rand2(dst, min, max, name=None):  # noqa: A002 (the stub's parameter names)
    """Uniform values in [min, max] (fp32 floats or [P, 1] fp32 tiles) from VectorE's XORWOW state,
    converted to dst's dtype (NeuronCore-v4; sim/engines/vector_rand2.py)."""
    fn = "rand2"
    dst = _tile(dst, "dst", fn)
    if current_trace().chip.nki_target != "gen4":
        raise _fail(fn, "rand2 exists on NeuronCore-v4 (trn3) and newer")
    state = _state(fn, Engine.VECTOR)[0:dst.partitions, :]
    srcs, roles, imm = [state], ["xorwow_state"], {}
    for key, value in (("min", min), ("max", max)):
        v, t = _scalar_or_vector(fn, value, dst, key)
        imm[key], imm[f"{key}_is_tile"] = v, t is not None
        if t is not None:
            srcs.append(t)
            roles.append(key)
    if not (imm["min_is_tile"] or imm["max_is_tile"]) and not imm["min"] < imm["max"]:
        raise _fail(fn, f"min={min} must be below max={max}")
    emit(fn, Opcode.RAND2, Engine.VECTOR, dst, srcs, imm, name=name, dst2=state, roles=roles)
