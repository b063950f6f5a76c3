"""What one tile of an element-wise op computes: the engine-instruction chains of elementwise.py.

Each chain is ``compute(dst, *input_tiles, **params)`` on SBUF tiles of one ``[partitions, free]``
tile of the output (``elementwise.tile_loop`` loads and stores them). The fp32 path computes in
fp32 on ScalarE / VectorE and rounds once on the write to ``dst``; the int32 path is exact on
GpSimd's integer ALU; bit operators run on VectorE on any integer dtype. ``fused.py`` reuses some
of them inside its regions.
"""

from __future__ import annotations

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.sim.ir import ActFunc, AluOp

A = AluOp
F32 = nl.float32


def _tmp(like, dtype=F32):
    return nl.ndarray(like.shape, dtype=dtype, buffer=nl.sbuf)


# ---------------------------------------------------------------- tile computations (fp32 path)


def act(dst, x, func, scale=1.0, bias=None):
    nisa.activation(dst=dst, op=func, data=x, scale=scale, bias=bias)


def act_then(dst, x, func, op, value, scale=1.0):
    """``func(x * scale) op value``: ScalarE, then one VectorE step (log2, log10, softplus(beta))."""
    t = _tmp(x)
    act(t, x, func, scale)
    nisa.tensor_scalar(dst=dst, data=t, op0=op, operand0=value)


def alu(dst, x, op0, v0=0.0, op1=None, v1=None, reverse0=False):
    nisa.tensor_scalar(dst=dst, data=x, op0=op0, operand0=v0, reverse0=reverse0, op1=op1, operand1=v1)


def alu2(dst, x, y, op, alpha=1.0):
    """``x op y``; with ``alpha``, ``(y * alpha) op x`` (add and rsub are written that way)."""
    if alpha == 1.0:
        nisa.tensor_tensor(dst=dst, data1=x, data2=y, op=op)
    else:
        nisa.scalar_tensor_tensor(dst=dst, data=y, op0=A.multiply, operand0=alpha, op1=op, operand1=x)


def sign(dst, x):  # (x > 0) - (x < 0): 0 for NaN, as ATen (ScalarE's sign passes NaN through)
    pos = _tmp(x)
    alu(pos, x, A.greater, 0.0)
    nisa.scalar_tensor_tensor(dst=dst, data=x, op0=A.less, operand0=0.0, op1=A.subtract, operand1=pos,
                              reverse1=True)


def mish(dst, x):  # x * tanh(softplus(x))
    t = _tmp(x)
    act(t, x, ActFunc.softplus)
    act(t, t, ActFunc.tanh)
    alu2(dst, t, x, A.multiply)


def hardsigmoid(dst, x):  # min(max(x + 3, 0), 6) / 6, ATen's order of operations
    t = _tmp(x)
    alu(t, x, A.add, 3.0, A.maximum, 0.0)
    alu(dst, t, A.minimum, 6.0, A.divide, 6.0)


def hardswish(dst, x):  # x * min(max(x + 3, 0), 6) / 6
    t = _tmp(x)
    alu(t, x, A.add, 3.0, A.maximum, 0.0)
    nisa.scalar_tensor_tensor(dst=t, data=t, op0=A.minimum, operand0=6.0, op1=A.multiply, operand1=x)
    alu(dst, t, A.divide, 6.0)


def leaky_relu(dst, x, slope):  # x > 0 ? x : slope * x, as one max (slope <= 1) or min (slope > 1)
    pick = A.maximum if slope <= 1.0 else A.minimum
    nisa.scalar_tensor_tensor(dst=dst, data=x, op0=A.multiply, operand0=slope, op1=pick, operand1=x)


def elu(dst, x, alpha, scale, input_scale):
    """``max(x, 0) * scale + (exp(min(x, 0) * input_scale) - 1) * alpha * scale``."""
    pos, neg = _tmp(x), _tmp(x)
    alu(pos, x, A.maximum, 0.0, A.multiply, scale)
    alu(neg, x, A.minimum, 0.0)
    act(neg, neg, ActFunc.exp, input_scale)
    alu(neg, neg, A.subtract, 1.0, A.multiply, alpha * scale)
    alu2(dst, pos, neg, A.add)


def threshold(dst, x, th, value):  # x <= th ? value : x
    pred = _tmp(x, nl.uint8)
    alu(pred, x, A.less_equal, th)
    nisa.tensor_copy(dst=dst, src=x)
    nisa.tensor_copy_predicated(dst=dst, src=value, predicate=pred)


def threshold_backward(dst, grad, x, th):  # x <= th ? 0 : grad
    pred = _tmp(x, nl.uint8)
    alu(pred, x, A.less_equal, th)
    nisa.tensor_copy(dst=dst, src=grad)
    nisa.tensor_copy_predicated(dst=dst, src=0.0, predicate=pred)


def leaky_relu_backward(dst, grad, x, slope):  # x > 0 ? grad : grad * slope (NaN x: the product)
    pos = _tmp(x, nl.uint8)
    alu(pos, x, A.greater, 0.0)
    alu(dst, grad, A.multiply, slope)  # rounded once, as ATen's product
    nisa.tensor_copy_predicated(dst=dst, src=grad, predicate=pos)


def hardtanh_backward(dst, grad, x, lo, hi):
    """``lo < x < hi ? grad : 0``: ATen-CPU's vectorized form (NaN x gives 0; its scalar tail differs)."""
    keep, high = _tmp(x, nl.uint8), _tmp(x, nl.uint8)
    alu(keep, x, A.greater, lo)
    alu(high, x, A.less, hi)
    alu2(keep, keep, high, A.logical_and)
    alu(keep, keep, A.equal, 0.0)
    nisa.tensor_copy(dst=dst, src=grad)
    nisa.tensor_copy_predicated(dst=dst, src=0.0, predicate=keep)


def sigmoid_backward(dst, grad, y):  # grad * (1 - y) * y
    t = _tmp(y)
    nisa.scalar_tensor_tensor(dst=t, data=y, op0=A.subtract, operand0=1.0, reverse0=True, op1=A.multiply,
                              operand1=grad)
    alu2(dst, t, y, A.multiply)


def tanh_backward(dst, grad, y):  # grad * (1 - y * y)
    t = _tmp(y)
    alu2(t, y, y, A.multiply)
    nisa.scalar_tensor_tensor(dst=dst, data=t, op0=A.subtract, operand0=1.0, reverse0=True, op1=A.multiply,
                              operand1=grad)


def silu_backward(dst, grad, x):  # grad * s * (1 + x * (1 - s)), s = sigmoid(x)
    s, t = _tmp(x), _tmp(x)
    act(s, x, ActFunc.sigmoid)
    nisa.scalar_tensor_tensor(dst=t, data=s, op0=A.subtract, operand0=1.0, reverse0=True, op1=A.multiply,
                              operand1=x)
    nisa.scalar_tensor_tensor(dst=t, data=t, op0=A.add, operand0=1.0, op1=A.multiply, operand1=s)
    alu2(dst, t, grad, A.multiply)


def gelu_backward(dst, grad, x):  # grad * gelu'(x): ScalarE's gelu_dx, then one VectorE product
    d = _tmp(x)
    act(d, x, ActFunc.gelu_dx)
    alu2(dst, d, grad, A.multiply)


_GELU_BETA = 0.7978845608028654  # sqrt(2 / pi): ATen's kBeta = M_SQRT2 * M_2_SQRTPI * 0.5
_GELU_KAPPA = 0.044715


def gelu_tanh_backward(dst, grad, x):
    """``grad * d/dx [x/2 (1 + tanh(b (x + k x^3)))]`` in ATen's terms: ``0.5 (1 + t)`` plus
    ``0.5 x (1 - t^2) b (1 + 3 k x^2)``, with ``t`` the tanh (ScalarE) of ``b x (1 + k x^2)``."""
    xsq, t, left, right = _tmp(x), _tmp(x), _tmp(x), _tmp(x)
    alu2(xsq, x, x, A.multiply)
    alu(t, xsq, A.multiply, _GELU_KAPPA, A.add, 1.0)
    alu2(t, t, x, A.multiply)
    act(t, t, ActFunc.tanh, scale=_GELU_BETA)
    alu(left, t, A.add, 1.0, A.multiply, 0.5)
    alu2(right, t, t, A.multiply)
    alu(right, right, A.subtract, 1.0, reverse0=True)  # 1 - t^2
    alu(t, xsq, A.multiply, 3.0 * _GELU_KAPPA * _GELU_BETA, A.add, _GELU_BETA)
    alu2(right, right, t, A.multiply)
    alu2(right, right, x, A.multiply)
    alu(right, right, A.multiply, 0.5)
    alu2(left, left, right, A.add)
    alu2(dst, left, grad, A.multiply)


def clamp2(dst, x, lo, hi):  # min(max(x, lo), hi) with tensor bounds (either may be absent)
    if lo is not None and hi is not None:
        t = _tmp(x)
        alu2(t, x, lo, A.maximum)
        alu2(dst, t, hi, A.minimum)
    else:
        alu2(dst, x, lo if hi is None else hi, A.maximum if hi is None else A.minimum)


def fill(dst, value):
    nisa.memset(dst=dst, value=value)


# ---------------------------------------------------------------- tile computations (int32 path)


def int_binary(dst, x, y=None, *, op, value=None, alpha=1):
    """``x op y`` (or ``x op value``) exactly on GpSimd's integer ALU; bool results via an int32 tile."""
    if y is None:
        y = nl.full(x.shape, value, dtype=nl.int32)
    if alpha != 1:
        scaled = _tmp(x, nl.int32)
        nisa.tensor_tensor(dst=scaled, data1=y, data2=nl.full(x.shape, alpha, dtype=nl.int32), op=A.multiply)
        y = scaled
    if dst.dtype == nl.int32:
        nisa.tensor_tensor(dst=dst, data1=x, data2=y, op=op)
    else:
        t = _tmp(x, nl.int32)
        nisa.tensor_tensor(dst=t, data1=x, data2=y, op=op)
        nisa.tensor_copy(dst=dst, src=t)


def int_unary(dst, x, *, op, value=0, reverse=False):
    """``value op x`` (``reverse``) or ``x op value`` with ``value`` an int32 tile: neg, abs."""
    c = nl.full(x.shape, value, dtype=nl.int32)
    nisa.tensor_tensor(dst=dst, data1=c if reverse else x, data2=x if reverse else c, op=op)


def int_sign(dst, x):
    """``(x > 0) - (x < 0)`` on GpSimd's integer ALU (DeBERTa's relative-position buckets)."""
    zero = nl.full(x.shape, 0, dtype=nl.int32)
    pos, neg = _tmp(x, nl.int32), _tmp(x, nl.int32)
    nisa.tensor_tensor(dst=pos, data1=x, data2=zero, op=A.greater)
    nisa.tensor_tensor(dst=neg, data1=x, data2=zero, op=A.less)
    nisa.tensor_tensor(dst=dst, data1=pos, data2=neg, op=A.subtract)


def int_clamp(dst, x, lo, hi):
    t = x
    if lo is not None:
        t = _tmp(x, nl.int32) if hi is not None else dst
        nisa.tensor_tensor(dst=t, data1=x, data2=nl.full(x.shape, lo, dtype=nl.int32), op=A.maximum)
    if hi is not None:
        nisa.tensor_tensor(dst=dst, data1=t, data2=nl.full(x.shape, hi, dtype=nl.int32), op=A.minimum)


def bits(dst, x, y=None, *, op, value=0):
    """Bit operators on VectorE (integers as bit patterns)."""
    if y is None:
        nisa.tensor_scalar(dst=dst, data=x, op0=op, operand0=value, engine=nisa.vector_engine)
    else:
        nisa.tensor_tensor(dst=dst, data1=x, data2=y, op=op, engine=nisa.vector_engine)
