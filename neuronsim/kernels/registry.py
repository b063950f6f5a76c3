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
``NEURON_SIM_NUMERICS=fast``, lets ATen-CPU compute the values through a host call specialised
to the entry's signature — and charges the Program's schedule to the device clock with its launch
overhead, FLOPs, engine busy times and the Prepared. What a run needs is derived once per entry,
so the cached path only indexes.

``out=`` ops (``arange.start_out``) run like functional ops whose outputs are the caller's ``out``
tensors: the key holds their shapes before the call, the meta kernel gives the shapes after it, and
each run resizes ``out`` to those as ATen's ``resize_output`` does (the device's ``resize_``; a
non-empty one with its deprecation warning) before the Program writes it. An ``out`` of the right
number of elements but another shape (ATen-CPU's ``arange`` keeps it, its meta kernel does not)
and an ``out`` overlapping an input run on the host.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

import neuronsim.nki as nki
from neuronsim import sim
from neuronsim.device import clock, memory
from neuronsim.device.dispatch import register_native_kernel
from neuronsim.device.host import host_runner, run_on_host
from neuronsim.device.schema import OpPlan, ReturnKind, WrapperKind, plan_for
from neuronsim.kernels import op_overload
from neuronsim.kernels.bridge import (
    Operand,
    aliasing,
    bind_arrays,
    dummy_array,
    hbm_view,
    operand_of,
    overlaps,
    same_view,
)
from neuronsim.options import current as current_options
from neuronsim.sim import execute_numba
from neuronsim.sim.memory.state import core_memory

Tensor = torch.Tensor
_META = torch.device("meta")


# ---------------------------------------------------------------- what planners see and return


@dataclass(frozen=True)
class Ref:
    """An operand of a launch: input tensor ``index`` (``"in"``), output ``index`` (``"out"``), or
    the op's runtime scalars (``"rt"``: an fp32 vector of the values of the arguments registered as
    runtime, in argument order, lists flattened; filled per call, so they are not in the key)."""

    role: str
    index: int


def IN(i: int) -> Ref:  # noqa: N802 (reads like the role it names)
    return Ref("in", i)


def OUT(i: int) -> Ref:  # noqa: N802
    return Ref("out", i)


RUNTIME = Ref("rt", 0)


@dataclass(frozen=True)
class Launch:
    """A planner's answer: ``body(*views, **statics)`` is NKI code on HBM views of ``operands``
    (each view has its tensor's shape and strides); it writes the outputs and returns nothing."""

    body: Callable
    operands: tuple[Ref, ...]
    statics: dict = field(default_factory=dict)
    flops: float = 0.0  # model FLOPs of the op (TensorE FLOPs are counted from the trace if 0)
    # A per-call check of input *values* that a signature cannot decide (index bounds, ...):
    # ``admit(inputs)`` False runs that call on the host, where ATen raises its own error (or computes
    # what the kernel does not cover). It runs before the Program, which never sees such values.
    admit: Callable[[list[Tensor]], bool] | None = None
    # Ops whose results are not all fresh tensors (SymInts, undefined tensors: the fused attention
    # ops): ``result(outputs)`` builds the op's return value from the fresh outputs the kernel wrote
    # (the tensors among the meta results, in order). Such ops have no ATen-CPU kernel, so the
    # Program computes them under ``NEURON_SIM_NUMERICS=fast`` too.
    result: Callable[[list[Tensor]], object] | None = None
    # Fresh outputs of another dtype than ATen's meta kernel gives (same sizes and strides):
    # ``native_layer_norm``'s 16-bit mean/rstd, which ATen-CPU returns in the input's dtype.
    output_dtypes: tuple[torch.dtype, ...] | None = None


@dataclass
class Call:
    """The first call of a signature, as a planner sees it (decisions may use only the signature)."""

    op: torch._ops.OpOverload
    plan: OpPlan
    args: tuple
    kwargs: dict
    inputs: list[Tensor]  # the device tensors among the arguments, in argument order (lists flattened;
    #                       ``out=`` ops: without the ``out`` tensors, which are the outputs)
    outputs: list[Tensor]  # meta tensors with the outputs' shapes, strides and dtypes (``out=``: resized)
    input_args: tuple[int, ...] = ()  # per input: the position of the argument it came from
    runtime: tuple[float, ...] = ()  # this call's runtime scalars (the body sees them as RUNTIME)

    def inputs_of(self, pos: int) -> list[Tensor]:
        """The inputs that came from argument ``pos`` (one tensor, or a list's elements)."""
        return [t for t, p in zip(self.inputs, self.input_args, strict=True) if p == pos]

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
        return a.dtype, a.shape, a.stride()
    if isinstance(a, list | tuple):
        if a and all(isinstance(x, Tensor) and not x.is_cpu for x in a):  # _foreach_ lists, in one pass
            return tuple([(x.dtype, x.shape, x.stride()) for x in a])
        return tuple(map(_arg_key, a))
    if isinstance(a, float | int | bool):
        return _scalar_key(a)
    return a


class Declined(Exception):
    """Raised by a kernel body while tracing: this signature is not covered (the op falls back)."""


class _Decline(Exception):
    """The call is not something a native kernel takes (a CPU tensor operand, an odd aliasing)."""


def _runtime_key(a):
    """A runtime argument's part of the key: its kind, length and Python types, not its values
    (a planner that takes floats must not run a later call's bool)."""
    if isinstance(a, list | tuple):
        return ("rt", len(a), tuple(sorted({type(x).__name__ for x in a})))
    return ("rt", type(a).__name__)


def signature_key(args: tuple, kwargs: dict, runtime: frozenset = frozenset(),
                  inplace: bool = False) -> tuple:
    """(per-argument keys, keyword keys, the aliasing of a written ``self``): the key of one op's
    cache (each op has its own, so the op is not part of it).

    Arguments whose position (or, passed by keyword, name) is in ``runtime`` enter by kind only
    (their values reach the kernel per call). Raises :class:`_Decline` for calls no kernel takes.
    Each written operand of an in-place op (``inplace``) is either the same view as an input (that
    input is the output) or disjoint from it; anything else declines, as a kernel reading and
    writing overlapping different views would be order-dependent. A written list (``_foreach_*_``)
    is checked element by element against the same element of the other lists, as ATen's
    multi-tensor kernels pair them.
    """
    if not (runtime or kwargs or inplace):
        return (tuple(map(_arg_key, args)),)  # most calls: the general path below gives the same
    if runtime:
        key = [tuple(_runtime_key(a) if i in runtime else _arg_key(a) for i, a in enumerate(args))]
    else:
        key = [tuple(map(_arg_key, args))]
    if kwargs:
        key.append(tuple((k, _runtime_key(v) if k in runtime else _arg_key(v)) for k, v in kwargs.items()))
    if inplace and args:
        written = args[0]
        others = (*args[1:], *kwargs.values())
        aliases = []
        if isinstance(written, Tensor):
            for a in others:
                if isinstance(a, Tensor) and not a.is_cpu:
                    aliases.append(_alias(a, written))
        elif isinstance(written, list | tuple):
            for a in others:
                if isinstance(a, list | tuple) and len(a) == len(written):
                    for x, w in zip(a, written, strict=True):
                        if isinstance(x, Tensor) and not x.is_cpu:
                            aliases.append(_alias(x, w))
                elif isinstance(a, Tensor) and not a.is_cpu:
                    for w in written:
                        if overlaps(a, w):  # e.g. a scale factor that is one of the written tensors
                            raise _Decline
        key.append(tuple(aliases))
    return tuple(key)


def _alias(read: Tensor, written: Tensor) -> bool:
    same = aliasing(read, written)
    if same is None:
        raise _Decline
    return same


# ---------------------------------------------------------------- cache entries


_DECLINED = object()
_UNBUILT = object()


@dataclass
class Entry:
    op: torch._ops.OpOverload
    plan: OpPlan
    name: str
    input_positions: tuple[InputPosition, ...]  # where each input tensor is in (args, kwargs)
    output_specs: tuple[tuple[tuple, tuple, torch.dtype], ...]  # fresh outputs: size, stride, dtype
    operand_refs: tuple[Ref, ...]  # the distinct operands, in the kernel's argument order
    traced: object
    prepared: sim.Prepared
    hbm_slots: tuple[tuple[int, int], ...]  # (Program tensor id, operand index)
    fixed_arrays: dict[int, np.ndarray]  # Program tensor id -> constant or scratch array
    flops: float
    engine_busy_ns: dict[str, float]
    bytes: int
    written: int = 0  # in-place ops: the first ``written`` inputs (``self``, or its elements) are the outputs
    runtime: tuple[tuple[int, str, object], ...] = ()  # (position, name, default) of runtime scalars
    returns_list: bool = False  # the op returns ``Tensor[]``
    admit: Callable[[list[Tensor]], bool] | None = None  # see Launch.admit
    result: Callable[[list[Tensor]], object] | None = None  # see Launch.result
    signature: tuple = ()  # (dtype, shape) of each input: what the clock records (fixed by the key)
    output_bytes: tuple[int, ...] = ()  # storage bytes of each fresh output
    # ``out=`` ops: where each ``out`` tensor is, and which of them each result returns
    out_positions: tuple[InputPosition, ...] = ()
    out_returns: tuple[int, ...] = ()
    _bases: tuple | None = None  # (core memory, template bases) for the calling thread's core

    def __post_init__(self):
        # What every run needs, derived once: the per-call path only indexes.
        self.duration_ns = self.prepared.timeline.total_ns
        self._gather = _gatherer(self.input_positions)
        self._operand_sel = tuple((_ROLES[r.role], r.index) for r in self.operand_refs)
        self._fresh = tuple((size, stride, dtype, nbytes) for (size, stride, dtype), nbytes
                            in zip(self.output_specs, self.output_bytes, strict=True))
        # fast numerics: the host call specialised to this signature's layout (built at first use)
        self._host_runner = _UNBUILT
        self._varying = frozenset(pos for pos, _, _ in self.runtime)

    @property
    def program(self):
        return self.prepared.program

    def base_template(self) -> np.ndarray:
        prep = self.prepared
        core = core_memory(prep.chip)
        cached = self._bases
        if cached is not None and cached[0] is core:
            return cached[1]
        bases = core.executor_bases(prep.program, prep.placement, self.fixed_arrays)
        self._bases = (core, bases)
        return bases

    def run(self, args: tuple, kwargs: dict, opts=None):
        if opts is None:
            opts = current_options()
        if self.out_positions:
            return self._run_out(args, kwargs, opts)
        fast = opts.numerics == "fast" and self.result is None
        if fast and self.admit is None:  # the host reads the arguments itself: only the device is needed
            pos, name, element = self.input_positions[0]
            first = args[pos] if pos < len(args) else kwargs[name]
            inputs = [first if element is None else first[element]]
        else:
            inputs = self._gather(args, kwargs)
            if self.admit is not None and not self.admit(inputs):
                return NotImplemented  # the chokepoint runs this call on the host
        index = inputs[0].get_device()
        if fast:
            runner = self._host_runner
            if runner is _UNBUILT:
                runner = self._host_runner = host_runner(self.plan, args, kwargs, self._varying)
            if runner is not None:
                result = runner(args, kwargs, index)
            else:
                result = run_on_host(self.plan, args, kwargs, charge=False)
        else:
            outputs = self._outputs(inputs, index)
            self._execute(inputs, outputs, args, kwargs, opts)
            result = self._result(args, outputs)
        self._charge(index)
        return result

    def _run_out(self, args: tuple, kwargs: dict, opts):
        """An ``out=`` op: resize the ``out`` tensors as the meta kernel did, then write them."""
        inputs = self._gather(args, kwargs)
        if self.admit is not None and not self.admit(inputs):
            return NotImplemented
        outs = gather_inputs(self.out_positions, args, kwargs)
        index = outs[0].get_device()
        if opts.numerics == "fast":
            run_on_host(self.plan, args, kwargs, charge=False)  # resizes the outs itself
        else:
            for o, (size, stride, _) in zip(outs, self.output_specs, strict=True):
                if o.shape != size:  # ATen's resize_output
                    if o.numel():
                        warnings.warn(f"An output with one or more elements was resized since it had "
                                      f"shape {list(o.shape)}, which does not match the required output "
                                      f"shape {list(size)}. This behavior is deprecated.", UserWarning,
                                      stacklevel=3)
                    o.resize_(size)
                # (resized: an empty view's storage may already hold an input)
                if o.stride() != stride or any(overlaps(o, t) for t in inputs):
                    return NotImplemented  # the host computes it, with ATen's own overlap rules
            self._execute(inputs, outs, args, kwargs, opts)
        self._charge(index)
        if len(self.out_returns) == 1:
            return outs[self.out_returns[0]]
        return tuple(outs[i] for i in self.out_returns) if self.out_returns else None

    def _execute(self, inputs, outputs, args, kwargs, opts) -> None:
        scalars = runtime_scalars(self.runtime, args, kwargs) if self.runtime else None
        sources = (inputs, outputs, (scalars,))
        operands = [sources[role][i] for role, i in self._operand_sel]
        if opts.executor == "reference":
            arrays = bind_arrays(self.program, self.hbm_slots, operands, self.fixed_arrays)
            sim.run(self.program, arrays, self.prepared.chip, executor="reference")
        else:
            bases = self.base_template().copy()
            for tid, k in self.hbm_slots:
                bases[tid] = operands[k].data_ptr()
            execute_numba.execute(self.prepared.itab, self.prepared.ftab, bases)

    def _charge(self, index) -> None:
        clock.clock(index).charge_kernel(
            self.name,
            self.signature,
            self.duration_ns,
            self.bytes,
            kernel=self.prepared,
            flops=self.flops,
            engine_busy_ns=self.engine_busy_ns,
        )

    def _outputs(self, inputs, index) -> list[Tensor]:
        if self.written:
            return inputs[: self.written]
        return [memory.empty_strided(size, stride, dtype, index, nbytes)
                for size, stride, dtype, nbytes in self._fresh]

    def _result(self, args, outputs):
        if self.written:
            return args[0] if self.plan.returns else None
        if self.result is not None:
            return self.result(outputs)
        if self.returns_list:
            return outputs
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


InputPosition = tuple[int, str, "int | None"]  # (argument position, name, list element or None)
_KEYWORD = 10_000  # positions from here on are keyword arguments (looked up by name)
_ROLES = {"in": 0, "out": 1, "rt": 2}


def _gatherer(positions: tuple[InputPosition, ...]):
    """``gather_inputs`` for one entry's positions. A signature fixes how many arguments come
    positionally (the key has one part per positional argument), so inputs that are whole
    positional arguments are a plain index."""
    if all(element is None and pos < _KEYWORD for pos, _, element in positions):
        picks = tuple(pos for pos, _, _ in positions)
        if len(picks) == 1:
            (only,) = picks
            return lambda args, kwargs: [args[only]]
        return lambda args, kwargs: [args[p] for p in picks]
    return functools.partial(gather_inputs, positions)


def gather_inputs(positions: tuple[InputPosition, ...], args: tuple, kwargs: dict) -> list[Tensor]:
    out = []
    for pos, name, element in positions:
        a = args[pos] if pos < len(args) else kwargs[name]
        out.append(a if element is None else a[element])
    return out


def runtime_scalars(runtime: tuple[tuple[int, str, object], ...], args: tuple, kwargs: dict) -> Tensor:
    """The call's runtime-scalar arguments as one fp32 vector (lists flattened, in argument order;
    an argument left out takes its schema default)."""
    values = []
    for pos, name, default in runtime:
        a = args[pos] if pos < len(args) else kwargs.get(name, default)
        if isinstance(a, list | tuple):
            values.extend(float(x) for x in a)
        else:
            values.append(float(a))
    return torch.tensor(values, dtype=torch.float32)


def _written_self(plan: OpPlan) -> bool:
    """In-place ops the kernels take: ``self`` (a tensor or a list) is the only written argument,
    returned (``add_``) or not (``_foreach_add_``); or the written arguments are the leading ones
    and nothing is returned (``_fused_adam_``: params, grads and the optimizer states)."""
    if plan.written == ((0, "self"),):
        return plan.returns in (((ReturnKind.WRITE, (0, "self")),), ())
    return not plan.returns and tuple(pos for pos, _ in plan.written) == tuple(range(len(plan.written)))


class NativeOp:
    """The chokepoint's native kernel for one ATen op: signature -> cached entry -> run."""

    def __init__(self, op: torch._ops.OpOverload, planner: Planner, runtime: tuple[str, ...] = ()):
        self.op = op
        self.planner = planner
        self.plan = plan_for(op)
        names = [a.name for a in op._schema.arguments]
        unknown = set(runtime) - set(names)
        if unknown:
            raise ValueError(f"{op}: runtime arguments {sorted(unknown)} are not in its schema")
        self.runtime = tuple((pos, a.name, a.default_value) for pos, a in enumerate(op._schema.arguments)
                             if a.name in runtime)
        # positions and keyword names: the key leaves their values out
        self._runtime_positions = frozenset((*(pos for pos, _, _ in self.runtime), *runtime))
        self._inplace = self.plan.kind is WrapperKind.INPLACE
        self.entries: dict[tuple, Entry | object] = {}
        self._lock = threading.Lock()

    def __call__(self, op, args: tuple, kwargs: dict):
        opts = current_options()
        try:
            # (chip, op name, per-argument keys, ...): the name (a str, whose hash is cached) where the
            # OpOverload was, whose __hash__ is Python code run on every call.
            key = (opts.chip, self.plan.name,
                   *signature_key(args, kwargs, self._runtime_positions, self._inplace))
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
        return entry.run(args, kwargs, opts)

    # ------------------------------------------------------------ a signature's first call

    def _build(self, args: tuple, kwargs: dict):
        plan = self.plan
        # Functional ops with any number of fresh results, in-place ops writing ``self``, and
        # ``out=`` ops writing only their ``out`` tensors.
        if plan.kind is WrapperKind.FUNCTIONAL:
            if not plan.returns or any(kind is not ReturnKind.FRESH for kind, _ in plan.returns):
                return _DECLINED
        elif plan.kind is WrapperKind.OUT:
            if plan.written or any(kind is not ReturnKind.WRITE or ref not in plan.outs
                                   for kind, ref in plan.returns):
                return _DECLINED
        elif plan.kind is not WrapperKind.INPLACE or not _written_self(plan):
            return _DECLINED
        positions = _tensor_positions(self.op, args, kwargs)
        if positions is None:
            return _DECLINED
        out_positions = ()
        if plan.kind is WrapperKind.OUT:
            out_names = [name for _, name in plan.outs]
            out_positions = tuple(sorted((p for p in positions if p[1] in out_names),
                                         key=lambda p: out_names.index(p[1])))
            if len(out_positions) != len(out_names) or any(e is not None for _, _, e in out_positions):
                return _DECLINED  # an ``out`` that is not one device tensor
            positions = tuple(p for p in positions if p not in out_positions)
        inputs = gather_inputs(positions, args, kwargs)
        leading = len(plan.written)  # the written arguments come first: their inputs are the outputs
        inplace = plan.kind is WrapperKind.INPLACE
        written = sum(1 for pos, _, _ in positions if pos < leading) if inplace else 0
        outputs, complete = _meta_outputs(self.op, args, kwargs)
        if outputs is None or any(t.numel() == 0 for t in inputs):
            return _DECLINED
        if plan.kind is WrapperKind.INPLACE:
            if not written:  # ``self`` is not a device tensor
                return _DECLINED
            outputs = [_to_meta(t) for t in inputs[:written]]
        elif out_positions:
            outs = gather_inputs(out_positions, args, kwargs)
            # The meta kernel may reshape an ``out`` of the right size that ATen-CPU keeps: the host decides.
            if len(outputs) != len(outs) or any(o.shape != m.shape and o.numel() == m.numel() != 0
                                                for o, m in zip(outs, outputs, strict=True)):
                return _DECLINED
        if any(o.numel() == 0 for o in outputs):
            return _DECLINED
        runtime = tuple(runtime_scalars(self.runtime, args, kwargs).tolist()) if self.runtime else ()
        call = Call(self.op, plan, args, kwargs, inputs, outputs, tuple(p for p, _, _ in positions), runtime)
        launch = self.planner(call)
        if launch is None or (not complete and launch.result is None):
            return _DECLINED
        if out_positions and (launch.result is not None or launch.output_dtypes is not None):
            raise AssertionError(f"{self.op}: an out= op's results are its out tensors, as they are")
        return _trace_entry(self, call, positions, written, launch, out_positions)


def _tensor_positions(op, args, kwargs) -> tuple[InputPosition, ...] | None:
    """(position, name, list element) of each device tensor argument, lists' elements included;
    None if there is none or a list holds a CPU tensor."""
    names = [a.name for a in op._schema.arguments]
    out: list[InputPosition] = []

    def add(pos, name, v):
        if isinstance(v, Tensor):
            if not v.is_cpu:
                out.append((pos, name, None))
            return True
        if isinstance(v, list | tuple):
            for j, x in enumerate(v):
                if isinstance(x, Tensor):
                    if x.is_cpu:
                        return False
                    out.append((pos, name, j))
        return True

    for pos, a in enumerate(args):
        if not add(pos, names[pos], a):
            return None
    for name, v in kwargs.items():
        if not add(len(args) + _KEYWORD, name, v):  # a keyword: looked up by name
            return None
    return tuple(out) or None


def _to_meta(a):
    if isinstance(a, Tensor) and not a.is_cpu:
        return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=_META)
    if isinstance(a, list | tuple):
        return type(a)(_to_meta(x) for x in a)
    if isinstance(a, torch.device):
        return _META
    return a


def _meta_outputs(op, args, kwargs) -> tuple[list[Tensor] | None, bool]:
    """The op's tensor results on meta tensors (in-place ops: ``[]``, the written inputs are the
    outputs), and whether those are all its results (else only a Launch with ``result`` takes it)."""
    try:
        result = op(*[_to_meta(a) for a in args], **{k: _to_meta(v) for k, v in kwargs.items()})
    except Exception:  # invalid arguments: the host computes the op and raises torch's own error
        return None, False
    if result is None:
        return [], True
    results = result if isinstance(result, tuple | list) else (result,)
    flat = []
    for r in results:
        flat.extend(r if isinstance(r, list) else (r,))
    tensors = [r for r in flat if isinstance(r, Tensor)]
    return tensors, len(tensors) == len(flat)


def _trace_entry(native_op: NativeOp, call: Call, positions, written: int, launch: Launch,
                 out_positions: tuple[InputPosition, ...] = ()) -> Entry:
    op, plan = call.op, call.plan
    if launch.output_dtypes is not None:
        call.outputs = [torch.empty_strided(o.shape, o.stride(), dtype=d, device=_META)
                        for o, d in zip(call.outputs, launch.output_dtypes, strict=True)]
    scalars = torch.tensor(call.runtime, dtype=torch.float32) if native_op.runtime else None

    def resolve(ref: Ref) -> Tensor:
        if ref.role == "rt":
            if scalars is None:
                raise AssertionError(f"{op}: the kernel uses RUNTIME; the op registered no runtime arguments")
            return scalars
        return call.inputs[ref.index] if ref.role == "in" else call.outputs[ref.index]

    # Only the aliasing the signature key records may be folded: an in-place op's output ``i`` is
    # its written input ``i``, and so is an input that is the same view as it (the same element,
    # for lists).
    def canonical(ref: Ref) -> Ref:
        if not written:
            return ref
        if ref.role == "out":
            return IN(ref.index)
        if ref.role == "in" and ref.index >= written:
            _, _, element = positions[ref.index]
            w = element if element is not None and element < written else 0
            if same_view(call.inputs[ref.index], call.inputs[w]):
                return IN(w)
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
    nbytes = sum(lay.nbytes for lay, r in zip(layouts, distinct, strict=True) if r.role != "rt")
    flops = launch.flops or float(traced.instances[0].matmul_flops)
    output_specs = tuple((tuple(o.shape), tuple(o.stride()), o.dtype) for o in call.outputs)
    returns_list = len(op._schema.returns) == 1 and str(op._schema.returns[0].type) == "List[Tensor]"
    return Entry(op, plan, plan.name, positions, output_specs, tuple(distinct), traced, prepared,
                 tuple(slots), fixed, flops, busy, nbytes, written, native_op.runtime, returns_list,
                 admit=launch.admit, result=launch.result,
                 signature=tuple((t.dtype, t.shape) for t in call.inputs or call.outputs),
                 output_bytes=tuple(memory.storage_bytes(o.shape, o.stride(), o.dtype) for o in call.outputs),
                 out_positions=out_positions,
                 out_returns=tuple(plan.outs.index(ref) for _, ref in plan.returns) if out_positions else ())


# ---------------------------------------------------------------- registration

PLANNERS: dict[str, Planner] = {}


def native(*names: str, runtime: tuple[str, ...] = (), kernel: type[NativeOp] = NativeOp):
    """Register the decorated planner for the ATen ops ``names`` (``"aten::add.Tensor"``).

    ``runtime`` names scalar arguments (or scalar lists) whose values change from call to call,
    like an optimizer's step sizes: they are left out of the signature key and reach the kernel as
    the :data:`RUNTIME` operand, so a new value does not trace a new Program. ``kernel``: a
    :class:`NativeOp` subclass for an op that is not a Program (``_fused_sdp_choice``'s answer)."""

    def register(planner: Planner) -> Planner:
        for name in names:
            PLANNERS[name] = planner
            op = op_overload(name)
            register_native_kernel(op, kernel(op, planner, runtime))
        return planner

    return register


def entries(name: str) -> dict:
    """The cache of op ``name`` (signature key -> Entry, or the declined marker): for tests."""
    from neuronsim.device import dispatch

    kernel = dispatch.NATIVE_KERNELS.get(op_overload(name))
    return kernel.entries if isinstance(kernel, NativeOp) else {}


def is_declined(entry) -> bool:
    return entry is _DECLINED
