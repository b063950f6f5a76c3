"""Element-wise ops: binary arithmetic with broadcasting (VectorE) and activations (ScalarE).

Each tile of the output is loaded operand by operand (DMA, broadcasting through stride-0 access
patterns), computed by one instruction and stored:

- ``a op b``: ``tensor_tensor``; ``a + alpha * b``: one ``scalar_tensor_tensor``
  (``(b * alpha) + a``; ``sub`` is ``add`` with ``-alpha``); a scalar ``b`` (a Python number or a
  0-dim CPU tensor, a trace-time constant): ``tensor_scalar``.
- ``exp``, ``tanh``, ``relu``, ``sigmoid``, ``gelu`` (erf or tanh form): one ScalarE ``activation``.

Inputs and outputs are float32, bfloat16 or float16 (the engines compute in fp32 and round on the
write, as ATen-CPU does for the 16-bit types). Other dtypes fall back to the host.
"""

from __future__ import annotations

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.registry import IN, OUT, Call, Launch, native
from neuronsim.kernels.tiling import elementwise_tiles
from neuronsim.sim.ir import ActFunc, AluOp

Tensor = torch.Tensor

_BINARY = {"add": AluOp.add, "sub": AluOp.subtract, "mul": AluOp.multiply, "div": AluOp.divide}


def _tile_loop(out, ins, compute):
    """For every tile: load ``ins`` (broadcast to ``out``), ``compute(dst, *loaded)``, store."""
    views = [out, *(v.broadcast_to(out.shape) for v in ins)]
    tiles = elementwise_tiles(views)
    for i in nl.affine_range(len(tiles)):
        tile = tiles[i]
        shape = (tile.partitions, tile.free)
        loaded = []
        for k, v in enumerate(views[1:], start=1):
            t = nl.ndarray(shape, dtype=v.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=tile.of(k, v))
            loaded.append(t)
        result = nl.ndarray(shape, dtype=out.dtype, buffer=nl.sbuf)
        compute(result, *loaded)
        nisa.dma_copy(dst=tile.of(0, out), src=result)


def binary(out, a, b, *, op: AluOp, alpha: float):
    def compute(dst, x, y):
        if alpha == 1.0:
            nisa.tensor_tensor(dst=dst, data1=x, data2=y, op=op)
        else:
            nisa.scalar_tensor_tensor(dst=dst, data=y, op0=AluOp.multiply, operand0=alpha, op1=op,
                                      operand1=x)

    _tile_loop(out, [a, b], compute)


def binary_scalar(out, a, *, op: AluOp, value: float):
    _tile_loop(out, [a], lambda dst, x: nisa.tensor_scalar(dst=dst, data=x, op0=op, operand0=value))


def activation(out, a, *, func: ActFunc):
    _tile_loop(out, [a], lambda dst, x: nisa.activation(dst=dst, op=func, data=x))


def _scalar_value(x) -> float | None:
    if isinstance(x, Tensor):
        return float(x.item()) if x.is_cpu and x.dim() == 0 else None
    if isinstance(x, bool):
        return None
    if isinstance(x, int | float):
        return float(x)
    return None


def _floats(call: Call) -> bool:
    return all(t.dtype in FLOAT_DTYPES for t in (*call.inputs, *call.outputs))


@native(
    "aten::add.Tensor", "aten::add_.Tensor", "aten::sub.Tensor", "aten::sub_.Tensor",
    "aten::mul.Tensor", "aten::mul_.Tensor", "aten::div.Tensor", "aten::div_.Tensor",
)
def plan_binary(call: Call) -> Launch | None:
    if not _floats(call):
        return None
    base = call.op.name().removeprefix("aten::").split(".")[0].rstrip("_")
    op = _BINARY[base]
    alpha = _scalar_value(call.arg(2, "alpha", 1.0)) if base in ("add", "sub") else 1.0
    if alpha is None:
        return None
    other = call.arg(1, "other")
    if isinstance(other, Tensor) and not other.is_cpu:
        if base == "sub":
            op, alpha = (AluOp.subtract, 1.0) if alpha == 1.0 else (AluOp.add, -alpha)
        return Launch(binary, (OUT(0), IN(0), IN(1)), {"op": op, "alpha": alpha})
    value = _scalar_value(other)
    if value is None or len(call.inputs) != 1:
        return None
    if base in ("add", "sub"):  # a +- alpha * s: one add of a constant
        value, op = (value * alpha if base == "add" else -value * alpha), AluOp.add
    return Launch(binary_scalar, (OUT(0), IN(0)), {"op": op, "value": value})


_ACTIVATIONS = {"exp": ActFunc.exp, "tanh": ActFunc.tanh, "relu": ActFunc.relu, "sigmoid": ActFunc.sigmoid}


@native("aten::exp.default", "aten::tanh.default", "aten::relu.default", "aten::sigmoid.default",
        "aten::gelu.default")
def plan_activation(call: Call) -> Launch | None:
    if not _floats(call):
        return None
    base = call.op.name().removeprefix("aten::").split(".")[0]
    if base == "gelu":
        approximate = call.arg(1, "approximate", "none")
        func = ActFunc.gelu if approximate == "none" else ActFunc.gelu_apprx_tanh
    else:
        func = _ACTIVATIONS[base]
    return Launch(activation, (OUT(0), IN(0)), {"func": func})
