"""``torch.compile(backend="neuron")``: the Dynamo backend, as TorchNeuron's behaves.

Dynamo finds it by name through the ``torch_dynamo_backends`` entry point. AOTAutograd splits the
captured graph into forward and backward ATen graphs; each is compiled by :func:`_compile_graph`:
chains of point-wise ops of one shape become fused region kernels (``neuronsim/kernels/fused.py``),
everything else runs as the device's kernels, op by op (matmuls, softmax, norms: the library
kernels). Compiled graphs are cached by Dynamo per guard set (shapes, dtypes), region Programs by
the kernel registry per signature, like eager kernels.

TorchNeuron's rules (shared/reference/torchneuron-api.md §1.7-1.8): static shapes only
(``dynamic=True`` is rejected; a new shape recompiles, so automatic dynamic shapes are turned off
once this backend is used), modes other than ``"default"`` warn and run as default, and
``options={"model_name": ...}`` names the graphs in ``torch.neuron.get_dynamo_metrics()``.
CPU tensors among a compiled graph's inputs are copied to the device at each call (an error
instead with ``TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1``); the results stay on the device
unless ``TORCH_NEURONX_RETAIN_DEVICE_MODE=1`` returns them to the inputs' device. For a module on
the device called with a CPU batch, Dynamo's fake-tensor propagation must accept the mixed
devices first: registration sets ``fake_tensor_prefer_device_type`` so it resolves them to ``neuron``.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import itertools
import operator
import os
import time
import warnings

import torch
from torch._dynamo.utils import counters

from neuronsim import env

_MAX_REGION_STEPS = 24  # SBUF holds every live fp32 intermediate of a tile; longer chains split

_metrics: list[dict] = []
_graph_ids = itertools.count()
_graph_counts: collections.Counter = collections.Counter()


class DynamicShapesError(RuntimeError):
    pass


def get_dynamo_metrics() -> list[dict]:
    return [dict(m) for m in _metrics]


def reset_dynamo_metrics() -> None:
    global _graph_ids
    _metrics.clear()
    _graph_counts.clear()
    _graph_ids = itertools.count()
    counters["neuron"]["compiled_graphs"] = 0


def neuron_backend(gm: torch.fx.GraphModule, example_inputs, mode: str | None = None, options=None):
    """The Dynamo backend ``"neuron"``."""
    from torch._dynamo.backends.common import aot_autograd

    torch._dynamo.config.automatic_dynamic_shapes = False  # a new shape recompiles, statically
    if mode not in (None, "default"):
        warnings.warn(f"torch.compile mode={mode!r} is not supported by the neuron backend; "
                      "running with mode='default'", UserWarning, stacklevel=2)
    options = dict(options or {})
    model_name = str(options.pop("model_name", "model_default"))
    _reject_dynamic_shapes(example_inputs)
    on_cpu = _cpu_inputs(example_inputs)
    if on_cpu:
        example_inputs = [_to_device(x) if i in on_cpu else x for i, x in enumerate(example_inputs)]
    aot_id = next(_graph_ids)
    compilers = {kind: functools.partial(_compile_graph, model_name=model_name, aot_id=aot_id, kind=kind)
                 for kind in ("fwd", "bwd", "inference")}
    compiled = aot_autograd(fw_compiler=compilers["fwd"], bw_compiler=compilers["bwd"],
                            inference_compiler=compilers["inference"])(gm, example_inputs)
    return _copying_cpu_inputs(compiled, on_cpu) if on_cpu else compiled


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "0").strip().lower() in ("1", "true", "yes", "on")


def _cpu_inputs(example_inputs) -> frozenset[int]:
    on_cpu = frozenset(i for i, x in enumerate(example_inputs)
                       if isinstance(x, torch.Tensor) and x.device.type == "cpu")
    if on_cpu and _env_flag(env.TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY):
        i = min(on_cpu)
        raise RuntimeError(
            f"Input tensor at index {i} is on cpu device, but the neuron backend expects every input "
            "on the neuron device (TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1 turns off copying CPU "
            "inputs to the device). Move it with .to('neuron') or unset the variable.")
    return on_cpu


def _to_device(example):
    """The example input as the device will see it (Dynamo passes real tensors or fake ones)."""
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(example, FakeTensor):
        with example.fake_mode:
            return example.to("neuron")
    with torch.no_grad():
        return example.to("neuron").requires_grad_(example.requires_grad)


def _copying_cpu_inputs(compiled, on_cpu: frozenset[int]):
    """Wrap a compiled graph so its CPU inputs are copied to the device at each call (as a
    differentiable copy, so gradients reach CPU leaves)."""
    retain = _env_flag(env.TORCH_NEURONX_RETAIN_DEVICE_MODE)

    def run(*args):
        args = [a.to("neuron") if i in on_cpu else a for i, a in enumerate(args)]
        out = compiled(*args)
        if not retain:
            return out
        return [o.cpu() if isinstance(o, torch.Tensor) and o.device.type == "neuron" else o
                for o in out]

    return run


def _reject_dynamic_shapes(example_inputs) -> None:
    found = []
    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.SymInt):
            found.append(f"input {i}: a symbolic integer")
        elif isinstance(x, torch.Tensor):
            dims = [d for d, s in enumerate(x.shape) if isinstance(s, torch.SymInt)]
            if dims:
                found.append(f"input {i} dims {dims}")
    if found:
        raise DynamicShapesError(
            f"Dynamic shapes detected in the model, but the neuron backend requires static shapes. "
            f"Found {len(found)} dynamic dimension(s): {'; '.join(found)}. Compile with "
            "dynamic=False (the default); a new shape recompiles.")


def _compile_graph(gm: torch.fx.GraphModule, example_inputs, *, model_name: str, aot_id: int, kind: str):
    from torch._functorch.aot_autograd import make_boxed_func

    start = time.perf_counter_ns()
    regions = fuse_regions(gm)
    passes_done = time.perf_counter_ns()
    gm.recompile()
    lowered = time.perf_counter_ns()
    counters["neuron"]["compiled_graphs"] += 1
    n = _graph_counts[(model_name, aot_id, kind)]
    _graph_counts[(model_name, aot_id, kind)] += 1
    _metrics.append({
        "graph_id": hashlib.sha256(gm.code.encode()).hexdigest()[:16],
        "graph_name": f"{model_name}_{aot_id}_{kind}_{n}",
        "model_name": model_name,
        "has_collectives": any("c10d" in str(node.target) for node in gm.graph.nodes),
        "graph_node_count": sum(1 for node in gm.graph.nodes if node.op == "call_function"),
        "fused_regions": regions,
        "timestamp": time.time(),
        "torch_neuronx_fx_passes_us": (passes_done - start) / 1e3,
        "torch_neuronx_lower_us": (lowered - passes_done) / 1e3,
        "torch_neuronx_compile_us": 0.0,  # kernels are traced and scheduled at their first call
    })
    return make_boxed_func(gm.forward)


# ---------------------------------------------------------------- point-wise fusion


def _value(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _candidate(node: torch.fx.Node):
    """The output shape if ``node`` can be a region step, else None."""
    from neuronsim.kernels.fused import fusible

    if node.op != "call_function" or not fusible(node.target, node.args, node.kwargs):
        return None
    val = _value(node)
    if not isinstance(val, torch.Tensor) or val.device.type != "neuron" or not val.is_floating_point():
        return None
    for a in node.args:
        if isinstance(a, torch.fx.Node):
            v = _value(a)
            if not isinstance(v, torch.Tensor) or v.device.type != "neuron":
                return None
            if not (v.is_floating_point() or v.dtype is torch.bool):  # bool: masked_fill's mask
                return None
    return tuple(val.shape)


def fuse_regions(gm: torch.fx.GraphModule) -> int:
    """Anchored regions first (row-wise ops with their point-wise neighbours), then the remaining
    point-wise chains; returns how many regions replaced their ops."""
    fused = fuse_anchored(gm)
    return fused + fuse_pointwise(gm)


def fuse_anchored(gm: torch.fx.GraphModule) -> int:
    """Fuse each softmax / layer norm (forward or backward) the fused kernel covers with the
    point-wise ops of its shape that produce its main input (prologue) or consume its main result
    (epilogue), e.g. ``x * scale -> masked_fill -> softmax`` or ``layer_norm_backward -> + residual``.

    A member whose value is used outside the region becomes one of its results. The region runs
    where its last member was, so every outside user of a member must come after that point;
    epilogue, then prologue, are dropped if that does not hold (a use between them and the anchor).
    """
    from neuronsim.kernels.fused import ANCHORS, anchor_fusible

    claimed: set[torch.fx.Node] = set()
    fused = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in ANCHORS or node in claimed:
            continue
        if not anchor_fusible(node.target, node.args, _value):
            continue
        members = _anchored_members(gm, node, claimed)
        if members is None:
            continue
        claimed.update(members)
        _replace(gm, members, anchor=node)
        fused += 1
    if fused:
        gm.graph.lint()
    return fused


def _anchored_members(gm, anchor: torch.fx.Node, claimed: set) -> list[torch.fx.Node] | None:
    main = anchor.args[0]
    shape = tuple(_value(main).shape)
    prologue, stack = [], [main]
    while stack:
        v = stack.pop()
        if (isinstance(v, torch.fx.Node) and v not in claimed and v not in prologue
                and _candidate(v) == shape and len(prologue) < _MAX_REGION_STEPS // 2):
            prologue.append(v)
            stack.extend(v.args)
    items = [u for u in anchor.users if u.target is operator.getitem]
    if isinstance(_value(anchor), tuple | list) and len(items) != len(anchor.users):
        return None  # a multi-result op whose tuple itself is used
    result = anchor if not items else next((u for u in items if u.args[1] == 0), None)
    order = {n: i for i, n in enumerate(gm.graph.nodes)}

    def runs_in_place(members) -> bool:  # every outside use comes after the region's last member
        inside = set(members)
        last = max(order[m] for m in members)
        return all(order[u] > last for m in members for u in m.users if u not in inside)

    core = [*prologue, anchor, *items]
    if not runs_in_place(core):
        core = [anchor, *items]
    # The epilogue grows one consumer at a time while the region can still run in place: a chain
    # of residual-gradient adds stops where the next add needs a value computed after the region.
    epilogue, frontier = [], [result] if result is not None else []
    while frontier and len(epilogue) < _MAX_REGION_STEPS // 2:
        v = frontier.pop(0)
        for u in v.users:
            if (u not in claimed and u not in epilogue and _candidate(u) == shape
                    and runs_in_place([*core, *epilogue, u])):
                epilogue.append(u)
                frontier.append(u)
    members = sorted({*core, *epilogue}, key=order.__getitem__)
    if len(members) == 1 + len(items) or not runs_in_place(members):
        return None
    return members


def fuse_pointwise(gm: torch.fx.GraphModule) -> int:
    """Replace chains of point-wise ops of one shape by region ops; returns how many regions.

    A region grows along the graph while its members have the same shape. A node that is not a
    member may sit between members if it reads none of the region's values (then the region, which
    runs where its last member was, still runs after everything it reads and before its users).
    """
    regions, current, shape = [], [], None
    for node in list(gm.graph.nodes):
        node_shape = _candidate(node)
        reads_region = any(a in current for a in node.all_input_nodes)
        if node_shape is not None and node_shape == shape and len(current) < _MAX_REGION_STEPS:
            current.append(node)
            continue
        if reads_region or node_shape is not None:
            regions.append(current)
            current, shape = ([node], node_shape) if node_shape is not None else ([], None)
    regions.append(current)
    fused = 0
    for members in regions:
        if len(members) >= 2:
            _replace(gm, members)
            fused += 1
    if fused:
        gm.graph.lint()
    return fused


def _constant(a):
    """A step's constant argument, hashable (the Region is the key of its op)."""
    return tuple(_constant(x) for x in a) if isinstance(a, list | tuple) else a


def _replace(gm: torch.fx.GraphModule, members: list[torch.fx.Node],
             anchor: torch.fx.Node | None = None) -> None:
    from neuronsim.device import native
    from neuronsim.kernels.fused import Region, Step, region_op

    index = {node: j for j, node in enumerate(members)}
    inputs: list[torch.fx.Node] = []

    def ref(a):
        if isinstance(a, torch.fx.Node):
            if a in index:
                return ("v", index[a])
            if a not in inputs:
                inputs.append(a)
            return ("in", inputs.index(a))
        return ("c", _constant(a))

    steps = tuple(Step(n.target, tuple(ref(a) for a in n.args), tuple(sorted(n.kwargs.items())))
                  for n in members)
    outputs = tuple(j for j, n in enumerate(members) if any(u not in index for u in n.users))
    op = region_op(Region(len(inputs), steps, outputs, None if anchor is None else index[anchor]))
    native.register(op)
    last = members[-1]
    with gm.graph.inserting_after(last):
        call = gm.graph.call_function(op, tuple(inputs))
    vals = tuple(_value(members[j]) for j in outputs)
    call.meta["val"] = vals if len(outputs) > 1 else vals[0]
    results = [call]
    if len(outputs) > 1:
        results = []
        anchor = call
        for k in range(len(outputs)):
            with gm.graph.inserting_after(anchor):
                anchor = gm.graph.call_function(operator.getitem, (call, k))
            anchor.meta["val"] = _value(members[outputs[k]])
            results.append(anchor)
    for j, result in zip(outputs, results, strict=True):
        members[j].replace_all_uses_with(result)
    for node in reversed(members):
        gm.graph.erase_node(node)
