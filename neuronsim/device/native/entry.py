"""A cached native op's entry for one signature, and running it.

Running an entry (:meth:`Entry.run`) binds the device tensors as the Program's HBM tensors in
place (their data pointers; see ``operands.py``), allocates fresh outputs through the device's
allocator (the HBM ledger sees them), executes with the Numba executor — or, with
``NEURON_SIM_NUMERICS=fast``, lets ATen-CPU compute the values through a host call specialised
to the entry's signature — and charges the Program's schedule to the device clock with its launch
overhead, FLOPs, engine busy times and the Prepared. What a run needs is derived once per entry
(``build.py``), so the cached path only indexes: its launch record holds where each HBM slot's
address comes from, the clock's record, spare copies of the core's base addresses and, once every
compile unit the Program uses is loaded, the compiled loop's entry point (no type dispatch, no
tier checks per call).

``out=`` ops (``arange.start_out``) run like functional ops whose outputs are the caller's ``out``
tensors: the key holds their shapes before the call, the meta kernel gives the shapes after it, and
each run resizes ``out`` to those as ATen's ``resize_output`` does (the device's ``resize_``; a
non-empty one with its deprecation warning) before the Program writes it. An ``out`` of the right
number of elements but another shape (ATen-CPU's ``arange`` keeps it, its meta kernel does not)
and an ``out`` overlapping an input run on the host.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from neuronsim import sim
from neuronsim.device import clock, memory
from neuronsim.device.host import host_runner, run_on_host
from neuronsim.device.memory import host_view
from neuronsim.device.native import fast as in_cpp
from neuronsim.device.native.operands import bind_arrays, disjoint, overlaps
from neuronsim.device.schema import OpPlan
from neuronsim.kernels.registry import Ref
from neuronsim.options import current as current_options
from neuronsim.sim import execute_numba
from neuronsim.sim.memory.state import core_memory, host_pitches

Tensor = torch.Tensor
InputPosition = tuple[int, str, "int | None"]  # (argument position, name, list element or None)
_KEYWORD = 10_000  # positions from here on are keyword arguments (looked up by name)
_ROLES = {"in": 0, "out": 1, "rt": 2}

DECLINED = object()  # a signature no kernel covers: the host runs it
_CORES_KEPT = 4  # cores whose base addresses an entry keeps
_UNBUILT = object()


@dataclass
class Entry:
    """One signature's traced, scheduled Program and everything a call of it needs."""

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
    disjoint_writes: bool = False  # see Launch.disjoint_writes
    result: Callable[[list[Tensor]], object] | None = None  # see Launch.result
    seeded: bool = False  # a device-PRNG op: its Program computes the values under fast numerics too
    signature: tuple = ()  # (dtype, shape) of each input: what the clock records (fixed by the key)
    output_bytes: tuple[int, ...] = ()  # storage bytes of each fresh output
    # ``out=`` ops: where each ``out`` tensor is, and which of them each result returns
    out_positions: tuple[InputPosition, ...] = ()
    out_returns: tuple[int, ...] = ()
    # per core memory (threads model cores: the forward's and the autograd thread's differ): its
    # (template bases, spare copies)
    _bases: dict | None = None

    def __post_init__(self):
        # What every run needs, derived once: the per-call path only indexes.
        self.duration_ns = self.prepared.timeline.total_ns
        self._gather = _gatherer(self.input_positions)
        self._operand_sel = tuple((_ROLES[r.role], r.index) for r in self.operand_refs)
        self._fresh = memory.output_specs(
            (size, stride, dtype, nbytes)
            for (size, stride, dtype), nbytes in zip(self.output_specs, self.output_bytes, strict=True))
        # fast numerics: the host call specialised to this signature's layout (built at first use)
        self._host_runner = _UNBUILT
        self._varying = frozenset(pos for pos, _, _ in self.runtime)
        self._check = self._per_call_check()
        self._pitch = host_pitches(self.prepared.chip)
        # The launch record: where each HBM slot's address comes from (role, index), the clock
        # record's fixed part, and (once every compile unit is loaded) the compiled loop itself.
        self._slots = tuple((tid, *self._operand_sel[k]) for tid, k in self.hbm_slots)
        self._record = (self.name, self.signature, self.duration_ns, self.bytes, self.prepared,
                        self.flops, self.engine_busy_ns)
        self._runner = None
        self._tables = (self.prepared.itab, self.prepared.ftab)
        self._fast_capable = self.result is None and not self.seeded  # fast numerics: ATen computes it
        self._fast = None  # the C++ cached op's description of this entry (fast.py), once made
        self._fast_host = None  # and of its fast-numerics host call

    def _per_call_check(self):
        """The check of a call's input values (None: the signature decides everything)."""
        admit, written = self.admit, self.written
        if not self.disjoint_writes:
            return None if admit is None else lambda inputs: admit(HostViews(inputs))
        if admit is None:
            return lambda inputs: disjoint(inputs[:written])
        return lambda inputs: disjoint(inputs[:written]) and admit(HostViews(inputs))

    @property
    def program(self):
        return self.prepared.program

    def base_template(self) -> np.ndarray:
        return self._core_bases()[0]

    def _core_bases(self) -> tuple:
        """(template bases, spare copies) for the calling thread's core. A spare is a copy a
        finished run gave back: its HBM slots are rewritten by the next run, and nothing else in
        it changes (a native op's Program has no registers; the status slot is only set by a run
        that failed, whose copy is dropped)."""
        prep = self.prepared
        core = core_memory(prep.chip)
        per_core = self._bases
        if per_core is None:
            per_core = self._bases = {}
        found = per_core.get(core)
        if found is None:
            if len(per_core) >= _CORES_KEPT:  # (threads come and go: keep a few cores' bases)
                per_core.clear()
            bases = core.executor_bases(prep.program, prep.placement, self.fixed_arrays)
            found = per_core[core] = (bases, [])
        return found

    def run(self, args: tuple, kwargs: dict, opts=None):
        if opts is None:
            opts = current_options()
        if self.out_positions:
            return self._run_out(args, kwargs, opts)
        fast = self._fast_capable and opts.numerics == "fast"
        if fast and self._check is None:  # the host reads the arguments itself: only the device is needed
            pos, name, element = self.input_positions[0]
            first = args[pos] if pos < len(args) else kwargs[name]
            inputs = [first if element is None else first[element]]
        else:
            inputs = self._gather(args, kwargs)
            if self._check is not None and not self._check(inputs):
                return NotImplemented  # the chokepoint runs this call on the host
        index = inputs[0].get_device()
        if fast:
            runner = self._host_runner
            if runner is _UNBUILT:
                runner = self._host_runner = host_runner(self.plan, args, kwargs, self._varying)
            if runner is not None:
                result = runner(args, kwargs, index)
                if in_cpp.publishable is not None and in_cpp.publishable.value and self._check is None:
                    in_cpp.publish_host(self, inputs[0], index, opts)
            else:
                result = run_on_host(self.plan, args, kwargs, charge=False)
        else:
            outputs = inputs[: self.written] if self.written else memory.fresh_outputs(self._fresh, index)
            self._execute(inputs, outputs, args, kwargs, opts)
            result = self._result(args, outputs)
            if in_cpp.publishable is not None and in_cpp.publishable.value and self._runner is not None:
                in_cpp.publish(self, inputs, index, opts)  # the C++ kernel that handed it over runs the next
        clock.clock(index).charge_native(self._record)
        return result

    def _run_out(self, args: tuple, kwargs: dict, opts):
        """An ``out=`` op: resize the ``out`` tensors as the meta kernel did, then write them."""
        inputs = self._gather(args, kwargs)
        if self._check is not None and not self._check(inputs):
            return NotImplemented
        outs = gather_inputs(self.out_positions, args, kwargs)
        index = outs[0].get_device()
        if opts.numerics == "fast" and not self.seeded:
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
        if opts.executor == "reference":
            sources = (inputs, outputs, (scalars,))
            operands = [sources[role][i] for role, i in self._operand_sel]
            arrays = bind_arrays(self.program, self.hbm_slots, operands, self.fixed_arrays)
            sim.run(self.program, arrays, self.prepared.chip, executor="reference")
            return
        template, spare = self._core_bases()
        bases = spare.pop() if spare else template.copy()  # (list pop/append: atomic across threads)
        for tid, role, i in self._slots:
            bases[tid] = (inputs[i] if role == 0 else outputs[i] if role == 1 else scalars).data_ptr()
        runner = self._runner
        if runner is not None:  # the cached path: one call of the compiled loop
            stopped = runner(*self._tables, bases, execute_numba.ENTRIES, 0)
            if stopped < 0:
                spare.append(bases)
                return
            prep = self.prepared
            if bases[-1] == 0:  # a compile unit unloaded since (tests do): on from there
                self._runner = None
                tiered = self.program if opts.executor == "tiered" else None
                stopped = execute_numba.execute(prep.itab, prep.ftab, bases, tiered, self._pitch,
                                                start=stopped)
        else:
            prep = self.prepared
            tiered = self.program if opts.executor == "tiered" else None
            stopped = execute_numba.execute(prep.itab, prep.ftab, bases, tiered, self._pitch)
            self._runner = execute_numba.direct_runner(prep.itab, prep.ftab, bases)
        if stopped >= 0:  # an indirect DMA's index out of bounds, or a kernel that raised
            raise execute_numba.stop_error(self.program, stopped, bases)

    def _charge(self, index) -> None:
        clock.clock(index).charge_native(self._record)

    def _outputs(self, inputs, index) -> list[Tensor]:
        if self.written:
            return inputs[: self.written]
        return memory.fresh_outputs(self._fresh, index)

    def _result(self, args, outputs):
        if self.written:
            return args[0] if self.plan.returns else None
        if self.result is not None:
            return self.result(outputs)
        if self.returns_list:
            return outputs
        return outputs[0] if len(outputs) == 1 else tuple(outputs)



@dataclass
class NoWorkEntry:
    """A signature whose outputs are all empty: nothing to compute, nothing charged (a device
    kernel returns at once on an empty tensor). Fresh outputs are allocated; in-place ops return
    ``self``."""

    input_positions: tuple[InputPosition, ...]
    output_specs: tuple[tuple[tuple, tuple, torch.dtype], ...]
    written: int
    returns_value: bool
    returns_list: bool

    def run(self, args: tuple, kwargs: dict, opts=None):
        if self.written:
            return args[0] if self.returns_value else None
        index = gather_inputs(self.input_positions[:1], args, kwargs)[0].get_device()
        outputs = [memory.empty_strided(size, stride, dtype, index, 0)
                   for size, stride, dtype in self.output_specs]
        if self.returns_list:
            return outputs
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


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


class HostViews:
    """A call's inputs as ``Launch.admit`` reads them: CPU tensors over their bytes, each made when
    asked for (a relabel per tensor, which most checks need for one or two inputs)."""

    __slots__ = ("_inputs",)

    def __init__(self, inputs: list[Tensor]):
        self._inputs = inputs

    def __len__(self) -> int:
        return len(self._inputs)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [host_view(t) for t in self._inputs[i]]
        return host_view(self._inputs[i])
