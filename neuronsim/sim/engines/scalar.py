"""ScalarE: activation — checks, semantics and cost.

``y = func(data * scale + bias)`` elementwise, ``scale`` and ``bias`` each a float immediate or a
``[P, 1]`` tile (broadcast along the free dim; a scale tile is fp32, a bias tile any dtype but
tfloat32, read as fp32, S16). ``data * scale`` and ``+ bias`` are each
rounded to fp32; ``func`` is computed in float64 from that fp32 argument and rounded to fp32 once,
then to the destination dtype on the write. With ``reduce``, ``dst2[p, 0]`` receives the fp32 sum
of row ``p`` of the fp32 results (before the destination rounding), added left to right (S16:
ActReadAccumulator after a reset_reduce).

``copy`` / ``identity`` with ``scale == 1``, ``bias == 0`` (immediates) and matching dtypes move
bits (v3 on, ScalarE copies are bit-accurate, S10): NaN payloads, -0.0 and int32 beyond 2^24 survive.
Otherwise they cast through fp32 like every other function.

Numerics of ``func``. Exact operations (sqrt, division, products) are correctly rounded in any
implementation. exp (also inside sigmoid, silu and softplus), erf and gelu are float64 range
reductions and polynomials of our own (``transcendentals.py``): the same IEEE operations in both
executors, vectorized by LLVM, within 1 fp32 ulp of the exact value and almost always the correctly
rounded fp32 (ScalarE's own fp32 tables are not published; a float64 evaluation rounded once keeps
the simulator's "func on the fp32 argument, rounded once" contract, and in float64 the two
executors agree by construction, where an fp32 minimax polynomial would add its own error on top of
the hardware's unknown one). The other transcendental ones (log, log1p, tanh, sin) call the C math
library in both executors: Numba's ``math.*`` compiles to libm calls, and the reference calls Python's
``math.*`` (the same libm) element by element. numpy's float64 ufuncs are not used for them: on
AVX-512 machines numpy has its own SIMD exp/log/tanh/log1p (and scipy's erf is cephes), which differ
from libm in the last float64 bit for ~5-15% of inputs (measured), so a rare fp32 rounding could
differ. (Numba must run without Intel SVML, which would vectorize the libm calls; the float64 twin
test in tests/sim/engines/test_scalar.py checks the agreement.) Edge cases (domain errors,
infinities) are spelled out identically on both sides instead of relying on libm's or Python's
conventions. Hardware input ranges (S16-shared: sin in [-pi, pi] with no range reduction, log in
[2^-64, 2^64], reciprocal +-[2^-42, 2^42]) are not enforced: outside them the hardware result is
undocumented and the simulator returns the float64 function's value (libm's sin does full range
reduction).

Activation tables: a function is computed from a table of its function set (S25: a NEFF lists
the sets it loads, e.g. ``natural_log_exp_and_others``). Before an activation whose function is
not in the loaded set, ScalarE loads that set: ``act_table_load_ns`` (~1.33 us in the DMA
overview's profiles), a step of its own on ScalarE (sim/schedule.py). Which function is in which
set is chip data (``[activation_tables]``, assumed from the set names).

Cost (S23): ``max(MIN_II, N)`` ScalarE cycles, N = elements per partition, plus
``act_read_accumulator_cycles`` (ActReadAccumulator, ~64) with ``reduce``. When data and dst are
both 16-bit floats the streaming part runs ``scalar_engine_16bit_speedup`` times faster (v4: 256
lanes for 16-bit, S11): ``max(MIN_II, N / speedup)``. MIN_II is the instruction's fixed overhead and
the accumulator read-out a separate step, so neither is divided. That is the issue interval; the
results land ``scalar_engine_pipeline_latency_cycles`` (~300 ns, fitted) later.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
from numba import njit

from neuronsim.errors import DtypeError
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.encoding import DST, DST2, IMM, SRC0, SRC1
from neuronsim.sim.engines.common import OpDef, fail, max_ii, require, require_operands, require_same_shape
from neuronsim.sim.engines.transcendentals import (
    CENTRAL_TOP,
    INV_SQRT2,
    erf64,
    erf_central,
    erf_np,
    erf_outer,
    exp64,
    exp_np,
    gelu64,
    gelu_central,
    gelu_dx64,
    gelu_dx_central,
    gelu_dx_np,
    gelu_dx_outer,
    gelu_np,
    gelu_outer,
)
from neuronsim.sim.ir import ActFunc, Instruction, Opcode
from neuronsim.sim.memory.access import (
    AP_WIDTH,
    ap_free,
    ap_parts,
    block_rows,
    f32_row,
    f32_rows,
    gather_f32,
    load_rows_f32,
    row_offsets,
    same_or_disjoint,
    scatter_f32,
    store_rows_f32,
    u32_row,
    u32_rows,
)
from neuronsim.sim.memory.copy import copy_raw
from neuronsim.sim.memory.numerics import canonical_f32_bits
from neuronsim.sim.memory.reference import RefMemory

_ACTIVATION_IMM = frozenset({"func", "scale", "bias", "bias_is_tile", "scale_is_tile", "reduce"})
_COPIES = frozenset({ActFunc.copy, ActFunc.identity})

_GELU_TANH_C = math.sqrt(2.0 / math.pi)
_GELU_TANH_CUBIC = 0.044715

# Codes as plain ints: Numba freezes globals into constants.
_COPY, _IDENTITY, _EXP, _LOG = int(ActFunc.copy), int(ActFunc.identity), int(ActFunc.exp), int(ActFunc.log)
_TANH, _SIGMOID, _RELU, _GELU = int(ActFunc.tanh), int(ActFunc.sigmoid), int(ActFunc.relu), int(ActFunc.gelu)
_GELU_TANH, _SILU, _SOFTPLUS = int(ActFunc.gelu_apprx_tanh), int(ActFunc.silu), int(ActFunc.softplus)
_SQRT, _RSQRT, _RECIP, _SQUARE = (int(ActFunc.sqrt), int(ActFunc.rsqrt), int(ActFunc.reciprocal),
                                  int(ActFunc.square))
_ERF, _SIN, _ABS, _SIGN = int(ActFunc.erf), int(ActFunc.sin), int(ActFunc.abs), int(ActFunc.sign)
_GELU_DX = int(ActFunc.gelu_dx)
_GELU_SIGMOID = int(ActFunc.gelu_apprx_sigmoid)
# gelu_apprx_sigmoid(x) = x * sigmoid(1.702 x): nki-library's torch references of it (ActFnType.Swish)
_GELU_SIGMOID_SLOPE = 1.702


# ---------------------------------------------------------------- the functions, Numba (scalar float64)

@njit(cache=True, inline="always")
def _sigmoid64(x):
    if x >= 0:
        return 1.0 / (1.0 + exp64(-x))
    e = exp64(x)
    return e / (1.0 + e)


@njit(cache=True)
def act_f64(func, x):
    """``func(x)`` for a float64 ``x`` holding an fp32 value (see the module docstring)."""
    if func == _COPY or func == _IDENTITY:
        return x
    if func == _EXP:
        return exp64(x)
    if func == _LOG:
        if x > 0:
            return math.log(x)
        return -math.inf if x == 0 else math.nan
    if func == _TANH:
        return math.tanh(x)
    if func == _SIGMOID:
        return _sigmoid64(x)
    if func == _RELU:
        if x != x:
            return x
        return x if x > 0 else 0.0
    if func == _GELU:
        return gelu64(x)
    if func == _GELU_DX:
        return gelu_dx64(x)
    if func == _GELU_TANH or func == _SILU or func == _GELU_SIGMOID:
        if math.isinf(x):  # the limits; the formulas give inf * 0 = NaN at -inf
            return x if x > 0 else 0.0
        if func == _GELU_TANH:
            return 0.5 * x * (1.0 + math.tanh(_GELU_TANH_C * (x + _GELU_TANH_CUBIC * x * x * x)))
        if func == _GELU_SIGMOID:
            return x * _sigmoid64(_GELU_SIGMOID_SLOPE * x)
        return x * _sigmoid64(x)
    if func == _SOFTPLUS:  # log1p(exp(x)) = max(x, 0) + log1p(exp(-|x|)), no overflow
        return (x if x > 0 else 0.0) + math.log1p(exp64(-abs(x)))
    if func == _SQRT:
        return math.sqrt(x) if x >= 0 else math.nan
    if func == _RSQRT:
        if x != x or x < 0:
            return math.nan
        return math.inf if x == 0 else 1.0 / math.sqrt(x)
    if func == _RECIP:
        return math.copysign(math.inf, x) if x == 0 else 1.0 / x
    if func == _SQUARE:
        return x * x
    if func == _ERF:
        return erf64(x)
    if func == _SIN:
        return math.nan if math.isinf(x) else math.sin(x)
    if func == _ABS:
        return abs(x)
    if func == _SIGN:
        if x > 0:
            return 1.0
        return -1.0 if x < 0 else x  # +-0 and NaN pass through
    return math.nan


# ---------------------------------------------------------------- the same functions, numpy (float64 arrays)

def _elementwise(scalar_fn):
    ufunc = np.frompyfunc(scalar_fn, 1, 1)
    return lambda x: ufunc(x).astype(np.float64)


_libm_log = _elementwise(math.log)
_libm_log1p = _elementwise(math.log1p)
_libm_tanh = _elementwise(math.tanh)
_libm_sin = _elementwise(math.sin)


def _sigmoid_np(x):
    e = exp_np(-np.abs(x))  # exp(-x) where x >= 0, exp(x) where x < 0 (and NaN)
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _at_infinity_limit(x, values):
    return np.where(np.isinf(x), np.where(x > 0, x, 0.0), values)


def _log_np(x):
    positive = x > 0
    return np.where(positive, _libm_log(np.where(positive, x, 1.0)), np.where(x == 0, -np.inf, np.nan))


def _gelu_tanh_np(x):
    f = np.where(np.isinf(x), 0.0, x)
    inner = _GELU_TANH_C * (f + _GELU_TANH_CUBIC * f * f * f)
    return _at_infinity_limit(x, 0.5 * f * (1.0 + _libm_tanh(inner)))


def _silu_np(x):
    finite = np.where(np.isinf(x), 0.0, x)
    return _at_infinity_limit(x, finite * _sigmoid_np(finite))


def _gelu_sigmoid_np(x):
    finite = np.where(np.isinf(x), 0.0, x)
    return _at_infinity_limit(x, finite * _sigmoid_np(_GELU_SIGMOID_SLOPE * finite))


def _rsqrt_np(x):
    r = 1.0 / np.sqrt(np.where(x > 0, x, 1.0))
    return np.where(np.isnan(x) | (x < 0), np.nan, np.where(x == 0, np.inf, r))


def _reciprocal_np(x):
    return np.where(x == 0, np.copysign(np.inf, x), 1.0 / np.where(x == 0, 1.0, x))


ACT_NP = {
    ActFunc.copy: lambda x: x,
    ActFunc.identity: lambda x: x,
    ActFunc.exp: exp_np,
    ActFunc.log: _log_np,
    ActFunc.tanh: _libm_tanh,
    ActFunc.sigmoid: _sigmoid_np,
    ActFunc.relu: lambda x: np.where(np.isnan(x) | (x > 0), x, 0.0),
    ActFunc.gelu: gelu_np,
    ActFunc.gelu_dx: gelu_dx_np,
    ActFunc.gelu_apprx_tanh: _gelu_tanh_np,
    ActFunc.gelu_apprx_sigmoid: _gelu_sigmoid_np,
    ActFunc.silu: _silu_np,
    ActFunc.softplus: lambda x: np.where(x > 0, x, 0.0) + _libm_log1p(exp_np(-np.abs(x))),
    ActFunc.sqrt: lambda x: np.where(x >= 0, np.sqrt(np.where(x >= 0, x, 0.0)), np.nan),  # keeps -0.0
    ActFunc.rsqrt: _rsqrt_np,
    ActFunc.reciprocal: _reciprocal_np,
    ActFunc.square: lambda x: x * x,
    ActFunc.erf: erf_np,
    ActFunc.sin: lambda x: np.where(np.isinf(x), np.nan, _libm_sin(np.where(np.isinf(x), 0.0, x))),
    ActFunc.abs: np.abs,
    ActFunc.sign: lambda x: np.where(x > 0, 1.0, np.where(x < 0, -1.0, x)),
}


def act_np(func: ActFunc, x: np.ndarray) -> np.ndarray:
    """Reference of :func:`act_f64` on a float64 array."""
    with np.errstate(all="ignore"):
        return np.asarray(ACT_NP[ActFunc(func)](np.asarray(x, dtype=np.float64)), dtype=np.float64)


# ---------------------------------------------------------------- activation: operands and checks

def act_func(ins: Instruction) -> ActFunc:
    func = ins.imm.get("func")
    try:
        return ActFunc[func] if isinstance(func, str) else ActFunc(func)
    except (KeyError, ValueError, TypeError):
        raise fail(ins, f"func={func!r} is not an activation function; known: "
                   f"{[f.name for f in ActFunc]}") from None


def _flag(ins: Instruction, name: str) -> bool:
    return bool(ins.imm.get(name, False))


def _scale_index(ins: Instruction) -> int:
    return 1 + int(_flag(ins, "bias_is_tile"))


def is_bit_copy(ins: Instruction) -> bool:
    """A copy that moves bits: copy/identity, unit scale, zero bias, one dtype in and out."""
    return (act_func(ins) in _COPIES and not _flag(ins, "bias_is_tile") and not _flag(ins, "scale_is_tile")
            and float(ins.imm.get("scale", 1.0)) == 1.0 and float(ins.imm.get("bias", 0.0)) == 0.0
            and ins.dst.dtype == ins.srcs[0].dtype)


def _check_activation(ins: Instruction, chip: ChipSpec) -> None:
    unknown = sorted(set(ins.imm) - _ACTIVATION_IMM)
    require(not unknown, ins, f"has unknown immediates {unknown}; known: {sorted(_ACTIVATION_IMM)}")
    require("func" in ins.imm, ins, "needs the immediate func (an ActFunc)")
    act_func(ins)
    bias_tile, scale_tile = _flag(ins, "bias_is_tile"), _flag(ins, "scale_is_tile")
    require_operands(ins, 1 + int(bias_tile) + int(scale_tile))
    data = ins.srcs[0]
    require_same_shape(ins, ins.dst, data, "dst", "data")
    for name, is_tile, index in (("bias", bias_tile, 1), ("scale", scale_tile, _scale_index(ins))):
        if is_tile:
            tile = ins.srcs[index]
            require(tile.partitions == data.partitions and tile.free_size == 1, ins,
                    f"{name} tile is {tile.partitions}x{tile.free_size} (partitions x free); it must be "
                    f"[{data.partitions}, 1] like data's partitions")
            # S16 (nisa.activation, data types): scale must be float32; bias may be any dtype but
            # tfloat32, cast to float32 on read as data is.
            if name == "scale" and tile.dtype is not DType.float32:
                raise fail(ins, f"scale tile dtype {tile.dtype.name} is not allowed; scale tiles are "
                           f"float32", DtypeError)
            if name == "bias" and tile.dtype is DType.tfloat32:
                raise fail(ins, "bias tile dtype tfloat32 is not allowed; a bias tile may be any dtype "
                           "but tfloat32", DtypeError)
        else:
            value = ins.imm.get(name, 1.0 if name == "scale" else 0.0)
            require(isinstance(value, numbers.Real) and not isinstance(value, bool), ins,
                    f"{name}={value!r} must be a float (or a [P, 1] tile with {name}_is_tile=True)")
    if _flag(ins, "reduce"):
        require(ins.dst2 is not None, ins, "reduce=True needs dst2 (reduce_res, [P, 1])")
        require(ins.dst2.partitions == data.partitions and ins.dst2.free_size == 1, ins,
                f"dst2 (reduce_res) is {ins.dst2.partitions}x{ins.dst2.free_size} (partitions x free); "
                f"it must be [{data.partitions}, 1]")
    else:
        require(ins.dst2 is None, ins, "has dst2 (reduce_res) but reduce=False")


def activation_table(ins: Instruction, chip: ChipSpec) -> str | None:
    """The activation-table set ``ins`` needs loaded (None for table-free functions and for the
    arithmetic ScalarE runs without a table); the sets are chip data (``[activation_tables]``)."""
    if ins.opcode is not Opcode.ACTIVATION:
        return None
    return chip.activation_table(act_func(ins).name)


def _activation_cycles(ins: Instruction, chip: ChipSpec) -> float:
    """``max(MIN_II, N / speedup)`` ScalarE cycles, ``+ act_read_accumulator_cycles`` with reduce
    (S23; speedup = scalar_engine_16bit_speedup for 16-bit float in and out, S11)."""
    data = ins.srcs[0]
    sixteen_bit = data.dtype.is_16bit_float and ins.dst.dtype.is_16bit_float
    speedup = chip.scalar_engine_16bit_speedup if sixteen_bit else 1
    cycles = max_ii(data.free_size / speedup, chip)
    if _flag(ins, "reduce"):
        cycles += chip.act_read_accumulator_cycles
    return cycles


# ---------------------------------------------------------------- activation: semantics

def _ref_activation(ins: Instruction, mem: RefMemory) -> None:
    data = mem.read(ins.srcs[0])
    if _flag(ins, "scale_is_tile"):
        scale = mem.read(ins.srcs[_scale_index(ins)])  # [P, 1] broadcasts along the free dim
    else:
        scale = np.float32(ins.imm.get("scale", 1.0))
    bias = mem.read(ins.srcs[1]) if _flag(ins, "bias_is_tile") else np.float32(ins.imm.get("bias", 0.0))
    with np.errstate(all="ignore"):  # overflow to inf and NaN are values here, not faults
        arg = (data * scale).astype(np.float32) + bias  # two fp32 roundings
        y = act_np(act_func(ins), arg).astype(np.float32)
    if is_bit_copy(ins):
        mem.copy(ins.dst, ins.srcs[0])
    else:
        mem.write(ins.dst, y)
    if _flag(ins, "reduce"):
        with np.errstate(all="ignore"):
            running = np.add.accumulate(y, axis=1, dtype=np.float32)  # fp32, left to right
        mem.write(ins.dst2, running[:, -1:])


def _encode_activation(ins: Instruction) -> tuple[list[int], list[float]]:
    ints = [int(act_func(ins)), int(_flag(ins, "bias_is_tile")), int(_flag(ins, "scale_is_tile")),
            int(_flag(ins, "reduce")), int(is_bit_copy(ins))]
    return ints, [float(ins.imm.get("scale", 1.0)), float(ins.imm.get("bias", 0.0))]


_CHUNK = 4096  # elements per pass of _central_then_tails: its buffers stay in L1/L2


@njit(cache=True)
def _central_then_tails(func, flat):
    """erf, gelu or gelu_dx (``func``) of every element of ``flat``, in place, chunk by chunk: the
    elements outside the central region are flagged (vectorized), their indices compacted and values
    gathered, the outer formula runs on those (vectorized), then the central one on all
    (vectorized), and the gathered results are put back. Each element gets its function's value
    (erf64 / gelu64 / gelu_dx64 are the same select between the two)."""
    gelu = func != _ERF  # gelu and gelu_dx: the central region is |x| / sqrt2 < 1
    outside = np.empty(_CHUNK, dtype=np.uint8)
    where = np.empty(_CHUNK + 1, dtype=np.int64)
    tails = np.empty(_CHUNK, dtype=np.float32)
    for c0 in range(0, flat.size, _CHUNK):
        x = flat[c0:c0 + _CHUNK]
        n = x.size
        flagged = np.uint8(0)
        if gelu:
            for i in range(n):
                outside[i] = not abs(np.float64(x[i]) * INV_SQRT2) < CENTRAL_TOP  # NaN included
                flagged |= outside[i]
        else:
            for i in range(n):
                outside[i] = not abs(np.float64(x[i])) < CENTRAL_TOP
                flagged |= outside[i]
        m = 0
        if flagged:  # small activations often have none: no compaction then
            for i in range(n):  # branch-free compaction: always write, advance only past a flagged one
                where[m] = i
                m += np.int64(outside[i])
        for k in range(m):  # a gather loop of its own: the function loop then reads contiguous memory
            tails[k] = x[where[k]]
        if func == _GELU:
            for k in range(m):
                tails[k] = np.float32(gelu_outer(np.float64(tails[k])))
            for i in range(n):
                x[i] = np.float32(gelu_central(np.float64(x[i])))
        elif func == _GELU_DX:
            for k in range(m):
                tails[k] = np.float32(gelu_dx_outer(np.float64(tails[k])))
            for i in range(n):
                x[i] = np.float32(gelu_dx_central(np.float64(x[i])))
        else:
            for k in range(m):
                tails[k] = np.float32(erf_outer(np.float64(tails[k])))
            for i in range(n):
                x[i] = np.float32(erf_central(np.float64(x[i])))
        for k in range(m):
            x[where[k]] = tails[k]


@njit(cache=True)
def _act_rows(func, data, scale, bias, y):
    """``y = func(data * scale + bias)`` row by row. The functions that need no libm get their own
    loops over the flat rows (the same values act_f64 gives, without its dispatch per element:
    LLVM vectorizes them); the rest go through act_f64."""
    parts, n = data.shape
    for p in range(parts):
        s, b = scale[p], bias[p]
        for j in range(n):
            y[p, j] = np.float32(np.float32(data[p, j] * s) + b)
    if func == _COPY or func == _IDENTITY:
        return
    if func == _RELU:
        for p in range(parts):
            for j in range(n):
                x = y[p, j]
                if not (x != x or x > 0):
                    y[p, j] = np.float32(0.0)
    elif func == _SQUARE:  # x * x is exact in float64 for an fp32 x: one rounding either way
        for p in range(parts):
            for j in range(n):
                x = np.float64(y[p, j])
                y[p, j] = np.float32(x * x)
    elif func == _EXP:
        flat = y.reshape(-1)  # y is C-contiguous
        for i in range(flat.size):
            flat[i] = np.float32(exp64(np.float64(flat[i])))
    elif func == _SQRT:  # act_f64's values in loops of their own, written branch-free: vectorized
        flat = y.reshape(-1)
        for i in range(flat.size):
            x = np.float64(flat[i])
            flat[i] = np.float32(math.sqrt(x) if x >= 0 else math.nan)
    elif func == _RSQRT:
        flat = y.reshape(-1)
        for i in range(flat.size):
            x = np.float64(flat[i])
            root = math.sqrt(x) if x > 0 else (0.0 if x == 0 else math.nan)  # +-0 -> inf; < 0, NaN -> NaN
            flat[i] = np.float32(np.true_divide(1.0, root))  # true_divide: no ZeroDivisionError branch
    elif func == _ERF or func == _GELU or func == _GELU_DX:
        _central_then_tails(func, y.reshape(-1))
    else:
        for p in range(parts):
            for j in range(n):
                y[p, j] = np.float32(act_f64(func, np.float64(y[p, j])))


@njit(cache=True)
def _row_sums(y, sums, p0):
    """``sums[p0 + p, 0]`` = fp32 sum of row ``p`` of ``y``, left to right."""
    for p in range(y.shape[0]):
        acc = np.float32(-0.0)  # the additive identity: a lone -0.0 stays -0.0
        for j in range(y.shape[1]):
            acc = np.float32(acc + y[p, j])
        sums[p0 + p, 0] = acc


@njit(cache=True)
def _affine_rows_f32(a, o, scale, bias, sums, reduce):
    """copy / identity in one pass over plain rows: ``o[p] = bits(a[p] * scale[p] + bias[p])``
    (NaNs canonical, as the store would make them), with the row sums of ``_row_sums`` when
    ``reduce`` (a NaN's payload never reaches a result: the sums are stored canonicalized too)."""
    parts, n = a.shape
    for p in range(parts):
        x, d = f32_row(a, p), u32_row(o, p)
        s, b = scale[p], bias[p]
        if reduce:
            acc = np.float32(-0.0)
            for j in range(n):
                y = np.float32(np.float32(x[j] * s) + b)
                d[j] = canonical_f32_bits(y)
                acc = np.float32(acc + y)
            sums[p, 0] = acc
        else:
            for j in range(n):
                d[j] = canonical_f32_bits(np.float32(np.float32(x[j] * s) + b))


@njit(cache=True)
def _nb_activation(row, frow, bases):
    func, bias_tile, scale_tile = row[IMM], row[IMM + 1], row[IMM + 2]
    reduce, bit_copy = row[IMM + 3], row[IMM + 4]
    parts, n = ap_parts(row, SRC0), ap_free(row, SRC0)
    if scale_tile:
        scale = gather_f32(row, SRC1 + AP_WIDTH * bias_tile, bases)[:, 0]
    else:
        scale = np.full(parts, np.float32(frow[0]), dtype=np.float32)
    if bias_tile:
        bias = gather_f32(row, SRC1, bases)[:, 0]
    else:
        bias = np.full(parts, np.float32(frow[1]), dtype=np.float32)
    sums = np.zeros((parts, 1), dtype=np.float32)
    if not same_or_disjoint(row, DST, SRC0, bases):  # a shifted in-place update: read all, then write
        y = np.empty((parts, n), dtype=np.float32)
        _act_rows(func, gather_f32(row, SRC0, bases), scale, bias, y)
        if bit_copy:
            copy_raw(row, DST, SRC0, bases)
        else:
            scatter_f32(row, DST, bases, y)
        if reduce:
            _row_sums(y, sums, 0)
            scatter_f32(row, DST2, bases, sums)
        return
    off_src, off_dst = row_offsets(row, SRC0), row_offsets(row, DST)
    if (func == _COPY or func == _IDENTITY) and not bit_copy:
        a, o = f32_rows(row, SRC0, bases, off_src), u32_rows(row, DST, bases, off_dst)
        if a.size and o.size:  # plain fp32 rows, dst the same elements or disjoint: one pass
            _affine_rows_f32(a, o, scale, bias, sums, reduce)
            if reduce:
                scatter_f32(row, DST2, bases, sums)
            return
    # Blocks of partitions through one cache-sized buffer: no tile-sized temporaries (fresh pages
    # of a big allocation cost more than the arithmetic), each block read, computed, written.
    block = block_rows(parts, n)
    buf = np.empty(block * n, dtype=np.float32)
    for p0 in range(0, parts, block):
        k = min(block, parts - p0)
        x = buf[:k * n]
        load_rows_f32(row, SRC0, bases, p0, off_src, x)
        y = x.reshape(k, n)
        _act_rows(func, y, scale[p0:p0 + k], bias[p0:p0 + k], y)  # element by element: in place is fine
        if not bit_copy:
            store_rows_f32(row, DST, bases, p0, off_dst, x)
        if reduce:
            _row_sums(y, sums, p0)
    if bit_copy:
        copy_raw(row, DST, SRC0, bases)
    if reduce:
        scatter_f32(row, DST2, bases, sums)


OPS = [
    OpDef(Opcode.ACTIVATION, _check_activation, _activation_cycles, _ref_activation, _encode_activation,
          _nb_activation),
]
