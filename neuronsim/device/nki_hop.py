"""``wrap_nki`` and ``nki_op``: NKI kernels as PyTorch operators, eager and inside ``torch.compile``.

TorchNeuron's API (torch/guides/how-to-work-with-nki; torchneuron-api.md §1.13):

- ``wrap_nki(kernel)[grid](*args)`` calls a kernel through a higher-order operator, so Dynamo
  records the call as one graph node instead of tracing into the kernel;
- ``@nki_op("ns::name", mutates_args={...})`` makes a function calling kernels a ``torch.library``
  custom op ("like ``triton_op`` for NKI"): the function itself is the fake implementation (it
  must be traceable), and ``op.register_autograd(backward, setup_context=...)`` makes it
  trainable. Inside ``torch.compile`` the op is decomposed into its kernel calls.

The operator pair follows ``torch._higher_order_ops.triton_kernel_wrap``: :data:`nki_kernel_call`
runs a kernel the way eager code sees it (written arguments change in place; a returned argument
is that argument), and functionalization turns it into :data:`nki_kernel_call_functional`, which
writes copies of the arguments the kernel writes and returns them, so a compiled graph stays
functional and its passes may reorder or fuse what surrounds the call. Which arguments a kernel
writes, and its outputs' shapes and dtypes, come from tracing it for the call's signature
(``Kernel.specialize``, cached): nothing is declared twice. Both operators run on the device
through :func:`neuronsim.device.nki_launch.run`.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.utils._pytree as pytree
from torch._C import DispatchKey
from torch._ops import HigherOrderOperator
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import (
    ProxyTorchDispatchMode,
    disable_proxy_modes_tracing,
    track_tensor_tree,
)

from neuronsim.errors import UnsupportedError
from neuronsim.nki.kernel import Kernel, as_kernel

# ---------------------------------------------------------------- the kernels a graph refers to

_kernels: list[Kernel] = []
_ids: dict[object, int] = {}  # a kernel's Python function -> its index in _kernels


@torch._dynamo.assume_constant_result
def _kernel_info(fn) -> tuple[int, tuple[str, ...], tuple[tuple[str, object], ...]]:
    """(id, parameter names, defaults) of the kernel made from ``fn``; Dynamo folds the answer
    into the graph as constants, so a compiled call names its kernel by id."""
    kid = _ids.get(fn)
    if kid is None:
        kid = _register(fn if isinstance(fn, Kernel) else as_kernel(fn))
    sig = inspect.signature(_kernels[kid].fn)
    names = tuple(sig.parameters)
    empty = inspect.Parameter.empty
    defaults = tuple((n, p.default) for n, p in sig.parameters.items() if p.default is not empty)
    return kid, names, defaults


def _register(kernel: Kernel) -> int:
    root = kernel._parent or kernel
    kid = _ids.get(root.fn)
    if kid is None:
        kid = _ids[root.fn] = len(_kernels)
        _kernels.append(root)
    return kid


def kernel_of(kernel_id: int, grid: tuple[int, ...]) -> Kernel:
    k = _kernels[kernel_id]
    return k if tuple(grid) == k.grid else k[grid]


# ---------------------------------------------------------------- what a call reads, writes, returns


@dataclass(frozen=True)
class CallPlan:
    """One call signature of a kernel, from its trace: the tensor arguments ``slots`` (argument
    position, list element or None) in the kernel's order, which of them it writes, its fresh
    outputs' shapes and dtypes, and its return structure with ("arg", slot) / ("out", k) leaves."""

    slots: tuple[tuple[int, int | None], ...]
    written: tuple[int, ...]
    outputs: tuple[tuple[tuple[int, ...], torch.dtype], ...]
    returns: object


def _slots(args) -> list[tuple[int, int | None]]:
    out = []
    for pos, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            out.append((pos, None))
        elif isinstance(a, tuple | list) and a and all(isinstance(e, torch.Tensor) for e in a):
            out.extend((pos, j) for j in range(len(a)))
    return out


def call_plan(kernel: Kernel, args: tuple) -> CallPlan:
    from neuronsim.device.nki_launch import _torch_dtype

    traced = kernel.specialize(args, {})
    names = [n for n in traced.arg_names if n is not None]
    slots = _slots(args)
    slot_of = {name: s for s, name in enumerate(names)}
    inouts = {t.name for inst in traced.instances for p in inst.programs for t in p.hbm_tensors()
              if t.kind == "inout"}
    written = tuple(slot_of[n] for n in names if n in inouts)
    outputs: list = []

    def leaf(r):
        if r is None:
            return None
        if isinstance(r, tuple | list):
            return tuple(leaf(x) for x in r)
        if isinstance(r, dict):
            return {k: leaf(v) for k, v in r.items()}
        if getattr(r, "dims", None) is not None:  # a ReturnedView (nki/traced.py)
            raise UnsupportedError(f"kernel {traced.name} returns a view of an HBM tensor; under "
                                   "torch.compile return the whole tensor (eager calls take views)")
        if r in slot_of:
            return ("arg", slot_of[r])
        shape, dtype, _kind = traced.shared[r]
        outputs.append((tuple(shape), _torch_dtype(dtype, traced.name)))
        return ("out", len(outputs) - 1)

    returns = leaf(traced.returns)
    return CallPlan(tuple(slots), written, tuple(outputs), returns)


def _slot_value(args, slot):
    pos, element = slot
    return args[pos] if element is None else args[pos][element]


def _assemble(returns, args, plan: CallPlan, fresh):
    """The kernel's return structure from the call's arguments and its fresh outputs."""
    if returns is None:
        return None
    if isinstance(returns, dict):
        return {k: _assemble(v, args, plan, fresh) for k, v in returns.items()}
    if isinstance(returns, tuple) and returns and isinstance(returns[0], str):
        kind, i = returns
        return _slot_value(args, plan.slots[i]) if kind == "arg" else fresh[i]
    return tuple(_assemble(r, args, plan, fresh) for r in returns)


def _with_slots(args, plan: CallPlan, values: dict[int, torch.Tensor]) -> tuple:
    """``args`` with the tensors of some slots replaced."""
    out = [list(a) if isinstance(a, tuple | list) else a for a in args]
    for s, v in values.items():
        pos, element = plan.slots[s]
        if element is None:
            out[pos] = v
        else:
            out[pos][element] = v
    return tuple(type(args[i])(a) if isinstance(args[i], tuple) else a for i, a in enumerate(out))


# ---------------------------------------------------------------- the operators


class NkiKernelCall(HigherOrderOperator):
    """``kernel_id``'s kernel launched on ``grid`` with ``args`` (its parameters in order): writes
    what the kernel writes, returns what it returns."""

    def __init__(self) -> None:
        super().__init__("nki_kernel_call", cacheable=True)

    def __call__(self, *, kernel_id: int, grid: tuple[int, ...], args: tuple):
        return super().__call__(kernel_id=kernel_id, grid=grid, args=args)


class NkiKernelCallFunctional(HigherOrderOperator):
    """The same launch on copies of the arguments it writes: returns (fresh outputs, the copies)."""

    def __init__(self) -> None:
        super().__init__("nki_kernel_call_functional", cacheable=True)

    def __call__(self, *, kernel_id: int, grid: tuple[int, ...], args: tuple):
        return super().__call__(kernel_id=kernel_id, grid=grid, args=args)


nki_kernel_call = NkiKernelCall()
nki_kernel_call_functional = NkiKernelCallFunctional()


@nki_kernel_call.py_impl(DispatchKey.CompositeExplicitAutograd)
def _call_dense(*, kernel_id, grid, args):
    from neuronsim.device.nki_launch import run

    return run(kernel_of(kernel_id, grid), args, {})


def _empty_like_output(shape, dtype, like: torch.Tensor):
    return torch.empty(shape, dtype=dtype, device=like.device)


def _first_tensor(args) -> torch.Tensor:
    return next(t for t in pytree.tree_leaves(args) if isinstance(t, torch.Tensor))


@nki_kernel_call.py_impl(FakeTensorMode)
def _call_fake(mode, *, kernel_id, grid, args):
    plan = call_plan(kernel_of(kernel_id, grid), args)
    with mode:
        like = _first_tensor(args)
        fresh = [_empty_like_output(shape, dtype, like) for shape, dtype in plan.outputs]
        # a returned argument comes back as a new tensor of its layout, as TorchNeuron's does
        copies = {s: torch.empty_like(_slot_value(args, plan.slots[s])) for s in range(len(plan.slots))}
        return _assemble(plan.returns, _with_slots(args, plan, copies), plan, fresh)


@nki_kernel_call.py_functionalize_impl
def _call_functionalize(ctx, *, kernel_id, grid, args):
    unwrapped = ctx.unwrap_tensors(args)
    plan = call_plan(kernel_of(kernel_id, grid), unwrapped)
    with ctx.redispatch_to_next():
        fresh, copies = nki_kernel_call_functional(kernel_id=kernel_id, grid=grid, args=unwrapped)
    for s, new in zip(plan.written, copies, strict=True):
        original = _slot_value(args, plan.slots[s])
        ctx.replace(original, new)
        ctx.mark_mutation_hidden_from_autograd(original)
        ctx.commit_update(original)
        ctx.sync(original)
    return _assemble(plan.returns, args, plan, ctx.wrap_tensors(tuple(fresh)))


@nki_kernel_call.py_impl(ProxyTorchDispatchMode)
def _call_proxy(mode, *, kernel_id, grid, args):
    return _trace(mode, nki_kernel_call, kernel_id, grid, args)


@nki_kernel_call_functional.py_impl(DispatchKey.CompositeExplicitAutograd)
def _functional_dense(*, kernel_id, grid, args):
    from neuronsim.device.nki_launch import run

    kernel = kernel_of(kernel_id, grid)
    plan = call_plan(kernel, args)
    copies = {s: _clone(_slot_value(args, plan.slots[s])) for s in plan.written}
    args = _with_slots(args, plan, copies)
    result = run(kernel, args, {})
    fresh = _fresh_outputs(plan.returns, result)
    return tuple(fresh), tuple(copies[s] for s in plan.written)


def _clone(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).copy_(t)


def _fresh_outputs(returns, result) -> list:
    """The kernel's fresh outputs in plan order, picked out of its returned structure."""
    found: dict[int, torch.Tensor] = {}

    def walk(r, v):
        if r is None:
            return
        if isinstance(r, dict):
            for k in r:
                walk(r[k], v[k])
        elif isinstance(r, tuple) and r and isinstance(r[0], str):
            if r[0] == "out":
                found[r[1]] = v
        else:
            for ri, vi in zip(r, v, strict=True):
                walk(ri, vi)

    walk(returns, result)
    return [found[k] for k in sorted(found)]


@nki_kernel_call_functional.py_impl(FakeTensorMode)
def _functional_fake(mode, *, kernel_id, grid, args):
    plan = call_plan(kernel_of(kernel_id, grid), args)
    with mode:
        like = _first_tensor(args)
        fresh = tuple(_empty_like_output(shape, dtype, like) for shape, dtype in plan.outputs)
        copies = tuple(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
                       for t in (_slot_value(args, plan.slots[s]) for s in plan.written))
        return fresh, copies


@nki_kernel_call_functional.py_functionalize_impl
def _functional_functionalize(ctx, *, kernel_id, grid, args):
    unwrapped = ctx.unwrap_tensors(args)
    with ctx.redispatch_to_next():
        out = nki_kernel_call_functional(kernel_id=kernel_id, grid=grid, args=unwrapped)
    return ctx.wrap_tensors(out)


@nki_kernel_call_functional.py_impl(ProxyTorchDispatchMode)
def _functional_proxy(mode, *, kernel_id, grid, args):
    return _trace(mode, nki_kernel_call_functional, kernel_id, grid, args)


def _trace(mode, op, kernel_id, grid, args):
    node_args = {"kernel_id": kernel_id, "grid": grid, "args": args}
    with disable_proxy_modes_tracing():
        out = op(**node_args)
    proxy_args = pytree.tree_map(mode.tracer.unwrap_proxy, node_args)
    out_proxy = mode.tracer.create_proxy("call_function", op, (), proxy_args,
                                         name=f"nki_{_kernels[kernel_id].__name__}")
    return track_tensor_tree(out, out_proxy, constant=None, tracer=mode.tracer)


for _op in (nki_kernel_call, nki_kernel_call_functional):
    for _key in (DispatchKey.PythonDispatcher, DispatchKey.PythonTLSSnapshot, DispatchKey.ADInplaceOrView,
                 DispatchKey.BackendSelect, DispatchKey.AutocastCPU, DispatchKey.AutocastPrivateUse1,
                 DispatchKey.AutogradCPU, DispatchKey.AutogradPrivateUse1):
        _op.fallthrough(_key)  # a kernel call is not differentiable: nki_op's register_autograd is

_in_graph_call = torch._dynamo.allow_in_graph(nki_kernel_call)


# ---------------------------------------------------------------- the user's API


class NkiCaller:
    """What ``wrap_nki(kernel)`` returns: ``caller[grid](*args, **kwargs)`` launches the kernel."""

    def __init__(self, kernel_id: int, names: tuple[str, ...], defaults: tuple, grid: tuple[int, ...]):
        self.kernel_id = kernel_id
        self.names = names
        self.defaults = defaults
        self.grid = grid

    def __getitem__(self, grid) -> NkiCaller:
        grid = tuple(int(g) for g in grid) if isinstance(grid, tuple | list) else (int(grid),)
        return NkiCaller(self.kernel_id, self.names, self.defaults, grid)

    def __call__(self, *args, **kwargs):
        values = dict(zip(self.names, args, strict=False))
        values.update(kwargs)
        for name, default in self.defaults:
            if name not in values:
                values[name] = default
        ordered = tuple(values[name] for name in self.names)
        return _in_graph_call(kernel_id=self.kernel_id, grid=self.grid, args=ordered)


def wrap_nki(kernel) -> NkiCaller:
    """Make ``kernel`` (an ``@nki.jit`` kernel, or a plain kernel function) callable as
    ``wrap_nki(kernel)[grid](*args)`` on neuron tensors, eagerly and inside ``torch.compile``."""
    fn = kernel.fn if isinstance(kernel, Kernel) else kernel
    if isinstance(kernel, Kernel) and not torch.compiler.is_compiling():
        _register(kernel)  # eager: the user's kernel object (its options, its trace cache) is the one run
    kernel_id, names, defaults = _kernel_info(fn)
    grid = kernel.grid if isinstance(kernel, Kernel) else (1,)
    return NkiCaller(kernel_id, names, defaults, grid)


def nki_op(name: str, fn=None, mutates_args: str | Iterable[str] = ()):
    """Register ``fn`` (type-hinted, calling NKI kernels) as the custom op ``name`` ("ns::op")."""
    from torch._library.infer_schema import infer_schema
    from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode

    def register(fn):
        op = torch.library.custom_op(name, fn, mutates_args=mutates_args,
                                     schema=infer_schema(fn, mutates_args=mutates_args))
        op.register_fake(fn)  # the function is traceable: its kernel calls give their outputs' shapes

        def decompose(mode, func, types, args, kwargs):
            # torch.compile: the op's kernel calls become nodes of the graph
            known = (torch._subclasses.FakeTensor, FunctionalTensor)
            if any(not issubclass(t, known) and t is not torch.Tensor for t in types):
                return NotImplemented
            with mode:
                return fn(*args, **kwargs)

        op.register_torch_dispatch(FunctionalTensorMode, decompose)
        return op

    return register if fn is None else register(fn)
