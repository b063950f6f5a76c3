"""The registry of native ops and the per-signature cache of their traced, scheduled Programs.

A family module registers a planner per ATen op::

    @native("aten::add.Tensor", "aten::add_.Tensor")
    def plan_add(call: Call) -> Launch | None: ...

A call's signature (:func:`signature_key`: shapes, strides, dtypes of its tensors, its scalar
arguments, which written operand is which input) selects a cache entry. On a miss the op runs on
meta tensors (ATen's own shape, dtype and stride rules for the outputs), the planner decides
whether its kernel covers the signature (``None``: the op falls back to the host, and the answer
is cached too), and the kernel is traced and prepared once (``neuronsim.sim.prepare``: placement,
validation, encoding, schedule). The entry is the only cache: each signature gets its own
``nki.jit`` kernel object, so the TracedKernel lives in the entry and nowhere else.

Running an entry (:meth:`Entry.run`) binds the device tensors as the Program's HBM tensors in
place (their data pointers; see ``bridge.py``), allocates fresh outputs through the device's
allocator (the HBM ledger sees them), executes with the Numba executor — or, with
``NEURON_SIM_NUMERICS=fast``, lets ATen-CPU compute the values — and charges the Program's
schedule to the device clock with its launch overhead, FLOPs, engine busy times and the Prepared.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

import neuronsim.nki as nki
from neuronsim import sim
from neuronsim.device import clock, memory
from neuronsim.device.dispatch import register_native_kernel
from neuronsim.device.host import run_on_host
from neuronsim.device.schema import OpPlan, ReturnKind, WrapperKind, plan_for
from neuronsim.kernels import op_overload
from neuronsim.kernels.bridge import (
    Operand,
    bind_arrays,
    dummy_array,
    hbm_view,
    operand_of,
    overlaps,
    same_view,
)
from neuronsim.options import current as current_options
from neuronsim.sim import execute_numba
from neuronsim.sim.ir import Memory
from neuronsim.sim.memory.state import core_memory

Tensor = torch.Tensor
_META = torch.device("meta")


# ---------------------------------------------------------------- what planners see and return


@dataclass(frozen=True)
class Ref:
    """An operand of a launch: input tensor ``index`` (``"in"``) or output ``index`` (``"out"``)."""

    role: str
    index: int


def IN(i: int) -> Ref:  # noqa: N802 (reads like the role it names)
    return Ref("in", i)


def OUT(i: int) -> Ref:  # noqa: N802
    return Ref("out", i)


@dataclass(frozen=True)
class Launch:
    """A planner's answer: ``body(*views, **statics)`` is NKI code on HBM views of ``operands``
    (each view has its tensor's shape and strides); it writes the outputs and returns nothing."""

    body: Callable
    operands: tuple[Ref, ...]
    statics: dict = field(default_factory=dict)
    flops: float = 0.0  # model FLOPs of the op (TensorE FLOPs are counted from the trace if 0)


@dataclass
class Call:
    """The first call of a signature, as a planner sees it (decisions may use only the signature)."""

    op: torch._ops.OpOverload
    plan: OpPlan
    args: tuple
    kwargs: dict
    inputs: list[Tensor]  # the device tensors among the arguments, in argument order
    outputs: list[Tensor]  # meta tensors with the outputs' shapes, strides and dtypes

    def arg(self, pos: int, name: str, default=None):
        if pos < len(self.args):
            return self.args[pos]
        return self.kwargs.get(name, default)


Planner = Callable[[Call], "Launch | None"]


# ---------------------------------------------------------------- signatures


def _scalar_key(x):
    if type(x) is float:
        return ("f", x.hex())  # tells -0.0 from 0.0 and keeps NaN equal to itself
    return (type(x).__name__, x)


def _arg_key(a):
    if isinstance(a, Tensor):
        if a.is_cpu:
            if a.dim() or a.numel() != 1:
                raise _Decline
            return ("cpu", a.dtype, _scalar_key(a.item()))
        return (a.dtype, a.shape, a.stride())
    if isinstance(a, list | tuple):
        return tuple(_arg_key(x) for x in a)
    if isinstance(a, float | int | bool):
        return _scalar_key(a)
    return a


class Declined(Exception):
    """Raised by a kernel body while tracing: this signature is not covered (the op falls back)."""


class _Decline(Exception):
    """The call is not something a native kernel takes (a CPU tensor operand, an odd aliasing)."""


def signature_key(op, args: tuple, kwargs: dict) -> tuple:
    """(op, per-argument keys, keyword keys, the aliasing of a written ``self``).

    Raises :class:`_Decline` for calls no kernel takes. The written operand of an in-place op is
    either the same view as an input (that input is the output) or disjoint from it; anything else
    declines, as a kernel reading and writing overlapping different views would be order-dependent.
    """
    key = [op, tuple(_arg_key(a) for a in args)]
    if kwargs:
        key.append(tuple((k, _arg_key(v)) for k, v in kwargs.items()))
    plan = plan_for(op)
    if plan.kind is WrapperKind.INPLACE and args and isinstance(args[0], Tensor):
        self_t = args[0]
        aliases = []
        for a in (*args[1:], *kwargs.values()):
            if isinstance(a, Tensor) and not a.is_cpu:
                if same_view(a, self_t):
                    aliases.append(True)
                elif overlaps(a, self_t):
                    raise _Decline
                else:
                    aliases.append(False)
        key.append(tuple(aliases))
    return tuple(key)


# ---------------------------------------------------------------- cache entries


_DECLINED = object()


@dataclass
class Entry:
    op: torch._ops.OpOverload
    plan: OpPlan
    name: str
    input_positions: tuple[tuple[int, str | None], ...]  # where each input tensor is in (args, kwargs)
    output_specs: tuple[tuple[tuple, tuple, torch.dtype], ...]  # fresh outputs: size, stride, dtype
    operand_refs: tuple[Ref, ...]  # the distinct operands, in the kernel's argument order
    traced: object
    prepared: sim.Prepared
    hbm_slots: tuple[tuple[int, int], ...]  # (Program tensor id, operand index)
    fixed_arrays: dict[int, np.ndarray]  # Program tensor id -> constant or scratch array
    flops: float
    engine_busy_ns: dict[str, float]
    bytes: int
    _bases: tuple | None = None  # (core memory, template bases) for the calling thread's core

    @property
    def program(self):
        return self.prepared.program

    def base_template(self) -> np.ndarray:
        prep = self.prepared
        core = core_memory(prep.chip)
        cached = self._bases
        if cached is not None and cached[0] is core:
            return cached[1]
        bases = np.zeros(len(prep.program.tensors), dtype=np.int64)
        for t in prep.program.tensors:
            if t.memory is Memory.HBM:
                fixed = self.fixed_arrays.get(t.id)
                if fixed is not None:
                    bases[t.id] = fixed.ctypes.data
            else:
                buf, off = core.on_chip_base(t, prep.placement)
                bases[t.id] = buf.ctypes.data + off
        self._bases = (core, bases)
        return bases

    def run(self, args: tuple, kwargs: dict):
        inputs = [args[p] if p < len(args) else kwargs[n] for p, n in self.input_positions]
        index = inputs[0].get_device()
        opts = current_options()
        if opts.numerics == "fast":
            result = run_on_host(self.plan, args, kwargs, charge=False)
        else:
            outputs = self._outputs(inputs, index)
            operands = [inputs[r.index] if r.role == "in" else outputs[r.index] for r in self.operand_refs]
            if opts.executor == "reference":
                arrays = bind_arrays(self.program, self.hbm_slots, operands, self.fixed_arrays)
                sim.run(self.program, arrays, self.prepared.chip, executor="reference")
            else:
                bases = self.base_template().copy()
                for tid, k in self.hbm_slots:
                    bases[tid] = operands[k].data_ptr()
                execute_numba.execute(self.prepared.itab, self.prepared.ftab, bases)
            result = self._result(args, outputs)
        clock.clock(index).charge_kernel(
            self.name,
            tuple((t.dtype, t.shape) for t in inputs),
            self.prepared.timeline.total_ns,
            self.bytes,
            kernel=self.prepared,
            flops=self.flops,
            engine_busy_ns=self.engine_busy_ns,
        )
        return result

    def _outputs(self, inputs, index) -> list[Tensor]:
        if self.plan.kind is WrapperKind.INPLACE:
            return [inputs[0]]
        return [memory.empty_strided(size, stride, dtype, index) for size, stride, dtype in self.output_specs]

    def _result(self, args, outputs):
        if self.plan.kind is WrapperKind.INPLACE:
            return args[0]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


class NativeOp:
    """The chokepoint's native kernel for one ATen op: signature -> cached entry -> run."""

    def __init__(self, op: torch._ops.OpOverload, planner: Planner):
        self.op = op
        self.planner = planner
        self.plan = plan_for(op)
        self.entries: dict[tuple, Entry | object] = {}
        self._lock = threading.Lock()

    def __call__(self, op, args: tuple, kwargs: dict):
        try:
            key = (current_options().chip, *signature_key(op, args, kwargs))
        except _Decline:
            return NotImplemented
        entry = self.entries.get(key)
        if entry is None:
            with self._lock:
                entry = self.entries.get(key)
                if entry is None:
                    entry = self.entries[key] = self._build(args, kwargs)
        if entry is _DECLINED:
            return NotImplemented
        return entry.run(args, kwargs)

    # ------------------------------------------------------------ a signature's first call

    def _build(self, args: tuple, kwargs: dict):
        plan = self.plan
        # Functional ops with any number of fresh results, and in-place ops returning ``self``.
        if plan.kind is WrapperKind.FUNCTIONAL:
            if not plan.returns or any(kind is not ReturnKind.FRESH for kind, _ in plan.returns):
                return _DECLINED
        elif plan.kind is not WrapperKind.INPLACE or plan.returns != ((ReturnKind.WRITE, (0, "self")),):
            return _DECLINED
        positions = _tensor_positions(self.op, args, kwargs)
        if positions is None:
            return _DECLINED
        inputs = [args[p] if p < len(args) else kwargs[n] for p, n in positions]
        outputs = _meta_outputs(self.op, args, kwargs)
        if outputs is None or any(o.numel() == 0 for o in outputs) or any(t.numel() == 0 for t in inputs):
            return _DECLINED
        call = Call(self.op, plan, args, kwargs, inputs, outputs)
        launch = self.planner(call)
        if launch is None:
            return _DECLINED
        return _trace_entry(self.op, plan, call, positions, launch)


def _tensor_positions(op, args, kwargs):
    """(position, name) of each device tensor argument; None if a list holds tensors."""
    names = [a.name for a in op._schema.arguments]
    out = []
    for pos, a in enumerate(args):
        if isinstance(a, Tensor) and not a.is_cpu:
            out.append((pos, names[pos]))
        elif isinstance(a, list | tuple) and any(isinstance(x, Tensor) for x in a):
            return None
    for name, v in kwargs.items():
        if isinstance(v, Tensor) and not v.is_cpu:
            out.append((len(args) + 10_000, name))  # a keyword: looked up by name
        elif isinstance(v, list | tuple) and any(isinstance(x, Tensor) for x in v):
            return None
    if not out:
        return None
    return tuple(out)


def _to_meta(a):
    if isinstance(a, Tensor) and not a.is_cpu:
        return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=_META)
    if isinstance(a, torch.device):
        return _META
    return a


def _meta_outputs(op, args, kwargs) -> list[Tensor] | None:
    try:
        result = op(*[_to_meta(a) for a in args], **{k: _to_meta(v) for k, v in kwargs.items()})
    except Exception:  # invalid arguments: the host computes the op and raises torch's own error
        return None
    results = result if isinstance(result, tuple | list) else (result,)
    if not all(isinstance(r, Tensor) for r in results):
        return None
    return list(results)


def _trace_entry(op, plan: OpPlan, call: Call, positions, launch: Launch) -> Entry:
    # The distinct operands: an in-place op's output is its `self` input (and any input that is the
    # same view as `self`), so they are one HBM tensor of the Program.
    def resolve(ref: Ref) -> Tensor:
        return call.inputs[ref.index] if ref.role == "in" else call.outputs[ref.index]

    # Only the aliasing the signature key records may be folded: an in-place op's output is its
    # `self`, and so is an input that is the same view as `self`.
    inplace = plan.kind is WrapperKind.INPLACE

    def canonical(ref: Ref) -> Ref:
        if inplace and (ref.role == "out" or (ref.index and same_view(resolve(ref), call.inputs[0]))):
            return IN(0)
        return ref

    distinct: list[Ref] = []
    which: list[int] = []
    for ref in map(canonical, launch.operands):
        if ref not in distinct:
            distinct.append(ref)
        which.append(distinct.index(ref))
    layouts: list[Operand] = [operand_of(resolve(r)) for r in distinct]
    body, statics = launch.body, launch.statics
    view_layouts = [layouts[k] for k in which]

    def kernel(*flats):
        views = [hbm_view(flats[k], lay) for k, lay in zip(which, view_layouts, strict=True)]
        body(*views, **statics)

    kernel.__name__ = kernel.__qualname__ = f"{getattr(body, '__name__', 'kernel')}"
    jitted = nki.jit(kernel)
    try:
        traced = jitted.specialize(tuple(dummy_array(lay) for lay in layouts))
    except Declined:
        return _DECLINED
    if len(traced.instances) != 1 or len(traced.instances[0].programs) != 1:
        raise AssertionError(f"kernel {kernel.__name__}: native kernels are one instance, one phase")
    program = traced.instances[0].programs[0]
    prepared = sim.prepare(program)
    arg_index = {name: k for k, name in enumerate(n for n in traced.arg_names if n is not None)}
    slots, fixed = [], {}
    for t in program.hbm_tensors():
        if t.name in arg_index:
            slots.append((t.id, arg_index[t.name]))
        elif t.name in traced.constants:
            fixed[t.id] = np.ascontiguousarray(traced.constants[t.name])
        else:  # scratch HBM the kernel allocated for itself
            fill = traced.fills.get(t.name)
            fixed[t.id] = np.full(t.shape, 0 if fill is None else fill, dtype=t.dtype.numpy)
    busy: dict[str, float] = {}
    for track, ns in prepared.timeline.engine_busy_ns.items():
        name = "dma" if track.startswith("dma") else track
        busy[name] = busy.get(name, 0.0) + ns
    nbytes = sum(lay.nbytes for lay in layouts)
    flops = launch.flops or float(traced.instances[0].matmul_flops)
    output_specs = tuple((tuple(o.shape), tuple(o.stride()), o.dtype) for o in call.outputs)
    return Entry(op, plan, plan.name, positions, output_specs, tuple(distinct), traced, prepared,
                 tuple(slots), fixed, flops, busy, nbytes)


# ---------------------------------------------------------------- registration

PLANNERS: dict[str, Planner] = {}


def native(*names: str):
    """Register the decorated planner for the ATen ops ``names`` (``"aten::add.Tensor"``)."""

    def register(planner: Planner) -> Planner:
        for name in names:
            PLANNERS[name] = planner
            op = op_overload(name)
            register_native_kernel(op, NativeOp(op, planner))
        return planner

    return register


def entries(name: str) -> dict:
    """The cache of op ``name`` (signature key -> Entry, or the declined marker): for tests."""
    from neuronsim.device import dispatch

    kernel = dispatch.NATIVE_KERNELS.get(op_overload(name))
    return kernel.entries if isinstance(kernel, NativeOp) else {}


def is_declined(entry) -> bool:
    return entry is _DECLINED
