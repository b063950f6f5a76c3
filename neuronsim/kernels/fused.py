"""Fused element-wise regions: a chain of point-wise ATen ops as one kernel Program.

The ``neuron`` compile backend (``neuronsim/device/compile.py``) finds chains of point-wise ops of
one shape in a graph and replaces each chain by a call of a *region op*, a custom op
``neuronsim_fused::region<N>`` defined here from the chain's :class:`Region`. On the device the
region op is a native kernel like any other (signature cache, Program, device clock): every tile
of the output shape is loaded once per input, goes through the whole chain in SBUF (intermediates
in fp32, never written to HBM) and only the chain's results are stored. That is the saving of
compiling: one launch and one HBM round trip per region instead of one per op. On the host (fast
numerics, or a signature the kernel does not cover) the region op runs the original ATen ops.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.registry import IN, OUT, Call, Launch, native
from neuronsim.kernels.tiling import elementwise_tiles
from neuronsim.sim.ir import ActFunc, AluOp

aten = torch.ops.aten

# An argument of a step: ("in", k) a region input, ("v", j) the value of step j, ("c", x) a number.
Ref = tuple[str, object]


@dataclass(frozen=True)
class Step:
    target: torch._ops.OpOverload
    args: tuple[Ref, ...]
    kwargs: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class Region:
    n_inputs: int
    steps: tuple[Step, ...]
    outputs: tuple[int, ...]  # the steps whose values leave the region

    def evaluate(self, inputs):
        """The region with ATen (CPU or meta tensors): the ops of the original graph, one by one."""
        values = []

        def resolve(ref):
            kind, x = ref
            return inputs[x] if kind == "in" else values[x] if kind == "v" else x

        for step in self.steps:
            values.append(step.target(*map(resolve, step.args), **dict(step.kwargs)))
        return tuple(values[j] for j in self.outputs)


# ---------------------------------------------------------------- what a step becomes on the engines

_TT = {aten.add.Tensor: AluOp.add, aten.sub.Tensor: AluOp.subtract, aten.mul.Tensor: AluOp.multiply,
       aten.div.Tensor: AluOp.divide}
_ACT = {aten.exp.default: ActFunc.exp, aten.tanh.default: ActFunc.tanh, aten.relu.default: ActFunc.relu,
        aten.sigmoid.default: ActFunc.sigmoid}


def _gelu_func(kwargs: dict) -> ActFunc:
    return ActFunc.gelu if kwargs.get("approximate", "none") == "none" else ActFunc.gelu_apprx_tanh


def fusible(target, args: tuple, kwargs: dict) -> bool:
    """Whether a graph node's op and arguments are a step this kernel emits."""
    if target in _TT:
        if set(kwargs) - {"alpha"} or len(args) != 2:
            return False
        alpha = kwargs.get("alpha", 1)
        tensors = [isinstance(a, torch.fx.Node) for a in args]
        if not tensors[0] or not isinstance(alpha, int | float) or isinstance(alpha, bool):
            return False
        return tensors[1] or (isinstance(args[1], int | float) and not isinstance(args[1], bool))
    if target in _ACT or target is aten.neg.default:
        return len(args) == 1 and not kwargs
    if target is aten.gelu.default:
        return len(args) == 1 and set(kwargs) <= {"approximate"}
    return False


def _emit(step: Step, dst, operands: list) -> None:
    kwargs = dict(step.kwargs)
    target = step.target
    if target in _TT:
        op = _TT[target]
        a, b = operands
        alpha = float(kwargs.get("alpha", 1))
        if not isinstance(b, float | int):
            if alpha == 1.0:
                nisa.tensor_tensor(dst=dst, data1=a, data2=b, op=op)
            else:  # a +- alpha * b
                nisa.scalar_tensor_tensor(dst=dst, data=b, op0=AluOp.multiply, operand0=alpha, op1=op,
                                          operand1=a)
            return
        value = float(b)
        if op in (AluOp.add, AluOp.subtract):
            value, op = (value * alpha if op is AluOp.add else -value * alpha), AluOp.add
        nisa.tensor_scalar(dst=dst, data=a, op0=op, operand0=value)
    elif target is aten.neg.default:
        nisa.tensor_scalar(dst=dst, data=operands[0], op0=AluOp.multiply, operand0=-1.0)
    elif target is aten.gelu.default:
        nisa.activation(dst=dst, op=_gelu_func(kwargs), data=operands[0])
    else:
        nisa.activation(dst=dst, op=_ACT[target], data=operands[0])


def region_body(*views, region: Region):
    n_out = len(region.outputs)
    outs, ins = views[:n_out], views[n_out:]
    shape = outs[0].shape
    walked = [*outs, *(v.broadcast_to(shape) for v in ins)]
    tiles = elementwise_tiles(walked)
    for i in nl.affine_range(len(tiles)):
        tile = tiles[i]
        tile_shape = (tile.partitions, tile.free)
        loaded = []
        for k, v in enumerate(walked[n_out:], start=n_out):
            t = nl.ndarray(tile_shape, dtype=v.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=tile.of(k, v))
            loaded.append(t)
        values = []
        for step in region.steps:
            operands = [loaded[x] if kind == "in" else values[x] if kind == "v" else x
                        for kind, x in step.args]
            dst = nl.ndarray(tile_shape, dtype=nl.float32, buffer=nl.sbuf)
            _emit(step, dst, operands)
            values.append(dst)
        for j, step_index in enumerate(region.outputs):
            result = values[step_index]
            if outs[j].dtype != nl.float32:  # round once, at the end of the chain
                rounded = nl.ndarray(tile_shape, dtype=outs[j].dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=rounded, src=result)
                result = rounded
            nisa.dma_copy(dst=tile.of(j, outs[j]), src=result)


# ---------------------------------------------------------------- region ops

_LIB = torch.library.Library("neuronsim_fused", "DEF")
_REGIONS: dict[Region, torch._ops.OpOverload] = {}
_lock = threading.Lock()


def region_op(region: Region) -> torch._ops.OpOverload:
    """The custom op computing ``region`` (defined once per distinct region)."""
    with _lock:
        op = _REGIONS.get(region)
        if op is not None:
            return op
        name = f"region{len(_REGIONS)}"
        params = ", ".join(f"Tensor x{k}" for k in range(region.n_inputs))
        n_out = len(region.outputs)
        returns = "Tensor" if n_out == 1 else "(" + ", ".join(["Tensor"] * n_out) + ")"
        _LIB.define(f"{name}({params}) -> {returns}")

        def host(*inputs):
            results = region.evaluate(inputs)
            return results[0] if len(results) == 1 else results

        _LIB.impl(name, host, "CPU")
        _LIB.impl(name, host, "Meta")
        native(f"neuronsim_fused::{name}")(_planner(region))
        op = _REGIONS[region] = getattr(torch.ops.neuronsim_fused, name).default
        return op


def _planner(region: Region):
    def plan(call: Call) -> Launch | None:
        if not all(t.dtype in FLOAT_DTYPES for t in (*call.inputs, *call.outputs)):
            return None
        if len(call.inputs) != region.n_inputs:
            return None  # an input is a CPU scalar tensor: the host runs the region
        refs = (*(OUT(j) for j in range(len(call.outputs))), *(IN(k) for k in range(region.n_inputs)))
        return Launch(region_body, refs, {"region": region})

    return plan
