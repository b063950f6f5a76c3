"""Fused element-wise regions: a chain of point-wise ATen ops as one kernel Program.

The ``neuron`` compile backend (``neuronsim/device/compile.py``) finds chains of point-wise ops of
one shape in a graph and replaces each chain by a call of a *region op*, a custom op
``neuronsim_fused::region<N>`` defined here from the chain's :class:`Region`. On the device the
region op is a native kernel like any other (signature cache, Program, device clock): every tile
of the output shape is loaded once per input, goes through the whole chain in SBUF (intermediates
in fp32, never written to HBM) and only the chain's results are stored. That is the saving of
compiling: one launch and one HBM round trip per region instead of one per op. On the host (fast
numerics, or a signature the kernel does not cover) the region op runs the original ATen ops.

A region may also hold one *anchor*, a row-wise op (softmax / log-softmax, layer norm, and their
backward): its point-wise *prologue* (the steps before it, e.g. ``x * scale`` then ``masked_fill``
with a broadcast [T, T] mask, or the residual ``a + b`` before a layer norm) and *epilogue* (the
steps after it, e.g. the backward's ``masked_fill`` and ``* scale``, or the residual-gradient add
after a layer-norm backward) run on the same row tiles, in SBUF. Rows go on the partitions as in
``softmax.py`` (``row_tiles``; every full-shape operand walked with its own strides, stride 0 where
broadcast), the anchor's arithmetic is the library kernel's own per-row-tile function
(``softmax_row``, ``softmax_bwd_row``, ``norm.normalize_rows``, ``norm.grad_rows``), so the fused
kernel computes what the op-by-op kernels do, minus the HBM round trips and launches in between.
"""

from __future__ import annotations

import math
import operator
import threading
from dataclasses import dataclass

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels import norm, softmax
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.elementwise_chains import gelu_backward
from neuronsim.kernels.indexing import select
from neuronsim.kernels.registry import IN, OUT, Call, Declined, Launch, define
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
    anchor: int | None = None  # the step that is a row-wise op (see the module doc), if any

    def evaluate(self, inputs):
        """The region with ATen (CPU or meta tensors): the ops of the original graph, one by one."""
        values = self.values(inputs)
        return tuple(values[j] for j in self.outputs)

    def values(self, inputs) -> list:
        """Every step's value, computed with ATen."""
        values = []

        def resolve(ref):
            kind, x = ref
            return inputs[x] if kind == "in" else values[x] if kind == "v" else x

        for step in self.steps:
            values.append(step.target(*map(resolve, step.args), **dict(step.kwargs)))
        return values


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
    if target is aten.gelu_backward.default:
        return len(args) == 2 and all(isinstance(a, torch.fx.Node) for a in args) and (
            kwargs.get("approximate", "none") == "none")
    if target is aten.masked_fill.Scalar:  # the mask may be broadcast ([T, T] over [B, H, T, T])
        value = args[2] if len(args) == 3 else None
        return (not kwargs and isinstance(args[1], torch.fx.Node) and isinstance(value, int | float)
                and not isinstance(value, bool))
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
    elif target is aten.gelu_backward.default:
        gelu_backward(dst, *operands)
    elif target is aten.masked_fill.Scalar:  # VectorE select: the value where the mask is set
        x, mask, value = operands
        select(dst, mask, x, on_true=float(value))
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


# ---------------------------------------------------------------- anchored regions

_SOFTMAX = {aten._softmax.default: False, aten._log_softmax.default: True}
_SOFTMAX_BWD = {aten._softmax_backward_data.default: False, aten._log_softmax_backward_data.default: True}
_LN, _LN_BWD = aten.native_layer_norm.default, aten.native_layer_norm_backward.default
ANCHORS = frozenset((*_SOFTMAX, *_SOFTMAX_BWD, _LN, _LN_BWD))
_LIVE_ROWS = 12  # fp32 [p, n] tiles a fused row tile may hold besides its steps' values


def _floating(v) -> bool:
    return isinstance(v, torch.Tensor) and v.device.type == "neuron" and v.dtype in FLOAT_DTYPES


def _vector_ok(v, x, n: int) -> bool:
    """A layer norm's weight or bias: absent, or [n] contiguous of the input's dtype."""
    return v is None or (_floating(v) and v.dtype == x.dtype and tuple(v.shape) == (n,)
                         and v.stride() == (1,))


def _row_fits(n: int, n_steps: int) -> bool:
    return n * 4 * (n_steps + _LIVE_ROWS) <= softmax.ROW_BUDGET_BYTES


def anchor_fusible(target, args: tuple, value_of) -> bool:
    """Whether a graph node (op ``target``, fx ``args``; ``value_of(arg)``: its meta value) is an
    anchor this module's fused kernel covers (rows resident in SBUF, the dtypes the library
    kernels take); else the op stays a kernel of its own."""
    vals = [value_of(a) if isinstance(a, torch.fx.Node) else a for a in args]
    if target in _SOFTMAX:
        x, dim, half = vals
        return (_floating(x) and x.dim() > 0 and not half and isinstance(dim, int)
                and -x.dim() <= dim < x.dim() and _row_fits(x.shape[dim], 8))
    if target in _SOFTMAX_BWD:
        g, y, dim, dtype = vals
        return (_floating(g) and _floating(y) and g.shape == y.shape and g.dtype == y.dtype == dtype
                and isinstance(dim, int) and g.dim() > 0 and -g.dim() <= dim < g.dim()
                and _row_fits(g.shape[dim], 8))
    if target is _LN:
        x, shape, w, b, eps = vals
        n = x.shape[-1] if _floating(x) and x.dim() else 0
        return (len(shape) == 1 and shape[0] == n and 0 < n <= norm.N_MAX and _row_fits(n, 8)
                and _vector_ok(w, x, n) and _vector_ok(b, x, n)
                and isinstance(eps, float) and math.isfinite(eps))
    if target is _LN_BWD:
        dy, x, shape, mean, rstd, w, b, mask = vals
        if not (_floating(dy) and _floating(x) and dy.shape == x.shape and dy.dtype == x.dtype and x.dim()):
            return False
        n = x.shape[-1]
        stat = (*x.shape[:-1], 1)
        return (len(shape) == 1 and shape[0] == n and 0 < n <= norm.N_MAX and _row_fits(n, 8)
                and all(_floating(t) and tuple(t.shape) == stat for t in (mean, rstd))
                and _vector_ok(w, x, n) and (b is None or _floating(b)) and any(mask)
                and (w is not None or not (mask[1] or mask[2])))
    return False


def anchored_body(*views, region: Region, shape: tuple):
    """One row tile at a time: the prologue's steps, the anchor's per-row-tile function, the
    epilogue's steps, the stores of the region's results; only a layer-norm backward's weight and
    bias gradients (sums over all rows, in PSUM) are stored after the last tile."""
    n_out = len(region.outputs)
    outs, ins = views[:n_out], views[n_out:]
    a = region.anchor
    anchor = region.steps[a]
    target, args = anchor.target, anchor.args
    ndim = len(shape)
    is_ln = target in (_LN, _LN_BWD)
    dim = ndim - 1 if is_ln else args[2 if target in _SOFTMAX_BWD else 1][1] % ndim
    n = shape[dim]
    if not _row_fits(n, len(region.steps)):
        raise Declined(f"rows of {n} elements with {len(region.steps)} steps do not stay in SBUF")
    item = {j: step.args[1][1] for j, step in enumerate(region.steps)
            if step.target is operator.getitem and step.args[0] == ("v", a)}
    # Inputs walked by rows: every one a point-wise step or the anchor reads as a full tensor or a
    # per-row statistic (layer-norm backward's mean and rstd, [..., 1]); weights and biases are not.
    stat_in = {x for kind, x in (args[3], args[4]) if kind == "in"} if target is _LN_BWD else set()
    vector_args = (args[2], args[3]) if target is _LN else (args[5],) if target is _LN_BWD else ()
    walked_in = set()
    for j, step in enumerate(region.steps):
        used = step.args
        if j == a:
            used = args[:1] if target is _LN else (*args[:2], *args[3:5]) if target is _LN_BWD else args[:2]
        walked_in |= {x for kind, x in used if kind == "in"}
    # Outputs: full rows, per-row statistics (layer norm's mean and rstd), or whole-op sums.
    sums_of = {1: "dw", 2: "db"} if target is _LN_BWD else {}
    out_kind = ["sum" if item.get(s) in sums_of else "stat" if is_ln and item.get(s) in (1, 2) else "row"
                for s in region.outputs]
    walk, where = [], {}
    for j, view in enumerate(outs):
        if out_kind[j] != "sum":
            where[("out", j)] = len(walk)
            walk.append(view.broadcast_to(shape))
    for k in sorted(walked_in):
        where[("in", k)] = len(walk)
        walk.append(ins[k].broadcast_to(shape))
    rows = softmax.row_tiles(walk, dim)
    if len(rows) > softmax.MAX_STEPS:
        raise Declined(f"{len(rows)} row tiles")
    pw = max(r.p for r in rows)
    vectors = [None if ref[1] is None else norm._broadcast(ins[ref[1]], pw, n) for ref in vector_args]
    main_dtype = nl.float32 if args[0][0] == "v" else ins[args[0][1]].dtype
    sums = {}
    if target is _LN_BWD:
        want = dict(zip(("dx", "dw", "db"), map(bool, args[7][1]), strict=True))
        sums = norm.column_sum_accumulators(want, n, pw, main_dtype)
    for i in nl.affine_range(len(rows)):
        row = rows[i]
        p = row.p
        loaded, values = {}, {}

        def operand(ref, row=row, p=p, loaded=loaded, values=values):
            kind, x = ref
            if kind == "v":
                return values[x]
            if kind == "c":
                return x
            if x not in loaded:
                cols = 1 if x in stat_in else n
                t = nl.ndarray((p, cols), dtype=ins[x].dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=row.cols(where[("in", x)], 0, cols))
                loaded[x] = t
            return loaded[x]

        for j, step in enumerate(region.steps):
            if j == a:
                values[j] = _anchor_tile(target, args, operand, p, n, vectors, sums)
            elif j in item:
                values[j] = values[a][item[j]]
            else:
                dst = nl.ndarray((p, n), dtype=nl.float32, buffer=nl.sbuf)
                _emit(step, dst, [operand(r) for r in step.args])
                values[j] = dst
        for j, s in enumerate(region.outputs):
            if out_kind[j] == "sum":
                continue
            result = values[s]
            if outs[j].dtype != result.dtype and outs[j].dtype != nl.float32:  # round once, at the end
                rounded = nl.ndarray(result.shape, dtype=outs[j].dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=rounded, src=result)
                result = rounded
            nisa.dma_copy(dst=row.cols(where[("out", j)], 0, result.shape[1]), src=result)
    if sums:
        norm.store_column_sums(sums, {sums_of[item[s]]: outs[j] for j, s in enumerate(region.outputs)
                                      if out_kind[j] == "sum"}, n)


def _anchor_tile(target, args, operand, p, n, vectors, sums):
    """The anchor's results for one row tile (fp32 SBUF tiles; a tuple for multi-result ops)."""
    chunk = [(0, n)]
    got = {}
    keep = lambda c0, m, t: got.setdefault("t", t)  # noqa: E731 (the hook that receives the result)
    if target in _SOFTMAX:
        softmax.softmax_row(p, chunk, True, lambda c0, m: operand(args[0]), keep, _SOFTMAX[target],
                            nl.float32)
        return got["t"]
    if target in _SOFTMAX_BWD:
        softmax.softmax_bwd_row(p, chunk, lambda c0, m: operand(args[0]), lambda c0, m: operand(args[1]),
                                keep, _SOFTMAX_BWD[target], nl.float32)
        return got["t"]
    if target is _LN:
        w_t, b_t = vectors
        return norm.normalize_rows(operand(args[0]), w_t, b_t, float(args[4][1]), nl.float32)
    want = dict(zip(("dx", "dw", "db"), map(bool, args[7][1]), strict=True))
    dx = norm.grad_rows(operand(args[0]), operand(args[1]), operand(args[3]), operand(args[4]), vectors[0],
                        want, sums, nl.float32)
    return (dx, None, None)


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
        op = _REGIONS[region] = getattr(torch.ops.neuronsim_fused, name).default
        # Generated ops, not a kernel family: the family manifest does not list them, and the
        # device registers each with its chokepoint when it makes it (device/compile.py).
        define(op.name(), _planner(region))
        return op


def _planner(region: Region):
    def plan(call: Call) -> Launch | None:
        if not all(t.dtype in FLOAT_DTYPES for t in call.outputs):
            return None
        if not all(t.dtype in FLOAT_DTYPES or t.dtype is torch.bool for t in call.inputs):
            return None  # bool: masked_fill's masks
        if len(call.inputs) != region.n_inputs:
            return None  # an input is a CPU scalar tensor: the host runs the region
        refs = (*(OUT(j) for j in range(len(call.outputs))), *(IN(k) for k in range(region.n_inputs)))
        if region.anchor is None:
            return Launch(region_body, refs, {"region": region})
        metas = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
                 for t in call.inputs]
        values = region.values(metas)
        anchor = region.steps[region.anchor]
        shape = tuple(_resolve(anchor.args[0], metas, values).shape)
        return Launch(anchored_body, refs, {"region": region, "shape": shape},
                      flops=10.0 * math.prod(shape))

    return plan


def _resolve(ref: Ref, inputs, values):
    kind, x = ref
    return inputs[x] if kind == "in" else values[x] if kind == "v" else x
