"""``nl`` element-wise math: arithmetic and comparisons on VectorE, activation functions on ScalarE,
``where``; the functions with no instruction in the simulated ISA raise UnsupportedError.

``a + b``, ``a < b``... on tensors are these same operations (``language/tensor.py``).
"""

from __future__ import annotations

import numpy as np

from neuronsim.errors import ConstraintError, UnsupportedError
from neuronsim.nki import isa as _isa
from neuronsim.nki.language.creation import full
from neuronsim.nki.language.dtypes import bool_
from neuronsim.nki.language.tensor import (
    binary,
    is_tile,
    new_tile,
    partition_broadcast,
    result_dtype,
    sim_dtype,
    unary_alu,
)
from neuronsim.nki.trace import caller_location
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import ActFunc, AluOp


def _unary_act(x, func: ActFunc, dtype, tag: str):
    if not is_tile(x):
        raise TypeError(f"nl.{tag} takes a tile, got {type(x).__name__}")
    out = new_tile(x.shape, x.dtype if dtype is None else dtype, tag)
    _isa.activation(out, func, x)
    return out


def _make_binary(name: str, op: AluOp, default_dtype=None):
    def fn(x, y, dtype=default_dtype):
        return binary(x, y, op, dtype, name)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Element-wise ``{op.name}`` of two tiles, or a tile and a scalar (new SBUF tile; VectorE)."
    return fn


def _make_act(name: str, func: ActFunc):
    def fn(x, dtype=None):
        return _unary_act(x, func, dtype, name)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Element-wise ``{func.name}`` (new SBUF tile; ScalarE activation)."
    return fn


add = _make_binary("add", AluOp.add)
subtract = _make_binary("subtract", AluOp.subtract)
multiply = _make_binary("multiply", AluOp.multiply)
divide = _make_binary("divide", AluOp.divide)
maximum = _make_binary("maximum", AluOp.maximum)
minimum = _make_binary("minimum", AluOp.minimum)
power = _make_binary("power", AluOp.power)
abs_max = _make_binary("abs_max", AluOp.abs_max)
abs_min = _make_binary("abs_min", AluOp.abs_min)
fmod = _make_binary("fmod", AluOp.mod)
equal = _make_binary("equal", AluOp.equal, bool_)
not_equal = _make_binary("not_equal", AluOp.not_equal, bool_)
greater = _make_binary("greater", AluOp.greater, bool_)
greater_equal = _make_binary("greater_equal", AluOp.greater_equal, bool_)
less = _make_binary("less", AluOp.less, bool_)
less_equal = _make_binary("less_equal", AluOp.less_equal, bool_)
logical_and = _make_binary("logical_and", AluOp.logical_and, bool_)
logical_or = _make_binary("logical_or", AluOp.logical_or, bool_)
logical_xor = _make_binary("logical_xor", AluOp.logical_xor, bool_)
bitwise_and = _make_binary("bitwise_and", AluOp.bitwise_and)
bitwise_or = _make_binary("bitwise_or", AluOp.bitwise_or)
bitwise_xor = _make_binary("bitwise_xor", AluOp.bitwise_xor)
left_shift = _make_binary("left_shift", AluOp.left_shift)
right_shift = _make_binary("right_shift", AluOp.right_shift)

exp = _make_act("exp", ActFunc.exp)
log = _make_act("log", ActFunc.log)
tanh = _make_act("tanh", ActFunc.tanh)
sigmoid = _make_act("sigmoid", ActFunc.sigmoid)
relu = _make_act("relu", ActFunc.relu)
gelu = _make_act("gelu", ActFunc.gelu)
gelu_apprx_tanh = _make_act("gelu_apprx_tanh", ActFunc.gelu_apprx_tanh)
gelu_apprx_sigmoid = _make_act("gelu_apprx_sigmoid", ActFunc.gelu_apprx_sigmoid)
gelu_dx = _make_act("gelu_dx", ActFunc.gelu_dx)
silu = _make_act("silu", ActFunc.silu)
softplus = _make_act("softplus", ActFunc.softplus)
sqrt = _make_act("sqrt", ActFunc.sqrt)
rsqrt = _make_act("rsqrt", ActFunc.rsqrt)
reciprocal = _make_act("reciprocal", ActFunc.reciprocal)
square = _make_act("square", ActFunc.square)
erf = _make_act("erf", ActFunc.erf)
sin = _make_act("sin", ActFunc.sin)
abs = _make_act("abs", ActFunc.abs)
sign = _make_act("sign", ActFunc.sign)
identity = _make_act("identity", ActFunc.identity)


def mod(x, y, dtype=None):
    """``x mod y`` with the sign of ``y``, as Python's ``%`` (``fmod`` keeps the sign of ``x``):
    ``fmod(fmod(x, y) + y, y)``, three VectorE ALU passes."""
    r = binary(x, y, AluOp.mod, None, "mod")
    r = binary(r, y, AluOp.add, None, "mod")
    return binary(r, y, AluOp.mod, dtype, "mod")


def _operator_name(name: str, doc: str):
    """``nl.bypass``-style names that only select an operator (``op=nl.bypass``)."""
    def fn(*args, **kwargs):
        raise TypeError(f"nl.{name} is an operator for nisa calls (op=nl.{name}), not a function")

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


bypass = _operator_name("bypass", "No-op ALU operator: ``op0=nl.bypass`` skips a tensor_scalar stage.")
prelu = _operator_name("prelu", "Parametric ReLU activation (``op=nl.prelu``): not a simulated "
                       "ScalarE function, so an activation using it raises UnsupportedError.")
average = _operator_name("average", "The average operator of NKI's reductions: not simulated (a "
                         "reduction with it raises UnsupportedError).")


def negative(x, dtype=None):
    """``-x`` (new SBUF tile; VectorE)."""
    return unary_alu(x, AluOp.multiply, dtype, "negative", -1.0)


def invert(x, dtype=None):
    """Bitwise NOT of an integer tile (VectorE)."""
    return unary_alu(x, AluOp.invert, dtype, "invert")


bitwise_not = invert


def logical_not(x, dtype=bool_):
    return unary_alu(x, AluOp.equal, dtype, "logical_not", 0.0)


def where(condition, x, y, dtype=None):
    """``x`` where ``condition`` else ``y`` (new SBUF tile; VectorE select). Tiles broadcast as in
    ``numpy.where``: along free dims by access pattern, a 1-partition tile across partitions as
    ``nl.broadcast_to`` does it."""
    tiles = [v for v in (condition, x, y) if is_tile(v)]
    try:
        shape = tuple(int(n) for n in np.broadcast_shapes(*(v.shape for v in tiles)))
    except ValueError:
        raise ConstraintError(f"nl.where: operand shapes {[v.shape for v in tiles]} do not broadcast",
                              location=caller_location()) from None
    condition, x, y = (_broadcast_tile(v, shape) for v in (condition, x, y))
    like = x if is_tile(x) else y if is_tile(y) else condition
    d = (
        sim_dtype(dtype)
        if dtype is not None
        else (
            result_dtype(*(v for v in (x, y) if is_tile(v)))
            if is_tile(x) or is_tile(y)
            else DType.float32
        )
    )
    on_true = x if is_tile(x) else full(like.shape, float(x), d)
    out = new_tile(like.shape, d, "where")
    _isa.select_reduce(out, condition, on_true, y)
    return out


def _broadcast_tile(v, shape):
    if not is_tile(v) or v.shape == shape:
        return v
    if len(v.shape) != len(shape):
        v = v.reshape((1,) * (len(shape) - len(v.shape)) + tuple(v.shape))
    if v.shape[0] != shape[0]:
        v = partition_broadcast(v, shape[0], "where.broadcast")
    return v.broadcast_to(shape) if v.shape != shape else v


def _unsupported(name: str):
    def fn(*args, **kwargs):
        raise UnsupportedError(
            f"nl.{name} is not simulated (no instruction of the simulated ISA computes it)",
            location=caller_location(),
        )

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = "Not simulated: raises UnsupportedError."
    return fn


cos = _unsupported("cos")
tan = _unsupported("tan")
arctan = _unsupported("arctan")


def _rounded(x, dtype, tag: str, toward):
    """``trunc``/``floor``/``ceil`` on VectorE, exact for every float: ``t = x - fmod(x, 1)`` is
    ``x`` toward zero; ``floor`` subtracts 1 where ``t > x`` (a negative fraction), ``ceil`` adds 1
    where ``t < x``. Intermediates in float32 (the ALU's precision); the result in ``dtype``."""
    if not is_tile(x):
        raise TypeError(f"nl.{tag} takes a tile, got {type(x).__name__}")
    out = x.dtype if dtype is None else dtype
    f32 = DType.float32
    t = binary(x, binary(x, 1.0, AluOp.mod, f32, tag), AluOp.subtract, f32 if toward else out, tag)
    if not toward:
        return t
    step = binary(t, x, AluOp.greater if toward < 0 else AluOp.less, f32, tag)
    return binary(t, step, AluOp.subtract if toward < 0 else AluOp.add, out, tag)


def trunc(x, dtype=None):
    """``x`` rounded toward zero, element-wise (two VectorE ALU passes)."""
    return _rounded(x, dtype, "trunc", 0)


def floor(x, dtype=None):
    """The largest integer ``<= x``, element-wise (four VectorE ALU passes)."""
    return _rounded(x, dtype, "floor", -1)


def ceil(x, dtype=None):
    """The smallest integer ``>= x``, element-wise (four VectorE ALU passes)."""
    return _rounded(x, dtype, "ceil", 1)


gelu_apprx_sigmoid_dx = _unsupported("gelu_apprx_sigmoid_dx")
silu_dx = _unsupported("silu_dx")
erf_dx = _unsupported("erf_dx")
mish = _unsupported("mish")
gather_flattened = _unsupported("gather_flattened")
atomic_rmw = _unsupported("atomic_rmw")
all_reduce = _unsupported("all_reduce")
