"""The first call of a signature: plan it, trace its kernel, and make its cache entry.

The op runs on meta tensors first (ATen's own shape, dtype and stride rules for the outputs), then
the planner decides whether its kernel covers the signature (``None``: the op falls back to the
host, and the answer is cached too), and the launch it answers is traced and prepared once
(``kernels/launch.py``). The entry holds everything a later call needs (``entry.py``).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

import torch

from neuronsim.device import memory
from neuronsim.device.native.entry import (
    _KEYWORD,
    DECLINED,
    Entry,
    InputPosition,
    NoWorkEntry,
    gather_inputs,
    runtime_scalars,
)
from neuronsim.device.native.operands import same_view
from neuronsim.device.schema import OpPlan, ReturnKind, WrapperKind
from neuronsim.kernels.bridge import Operand, operand_of
from neuronsim.kernels.launch import trace_launch
from neuronsim.kernels.registry import IN, Call, Launch, Ref
from neuronsim.options import current as current_options

Tensor = torch.Tensor
_META = torch.device("meta")


# While a signature's first call runs (its build, and its first run, which loads the machine code
# of opcodes not run before), the collector's young generation is collected only every
# ``_FIRST_CALL_THRESHOLD`` allocations, not at the process's threshold (700 by default). That call makes
# thousands of objects that live as long as its entry (the trace, the Program, its schedule,
# Numba's loaded code): collecting them young finds next to nothing, and each young collection
# moves them on towards the full collections, which walk every object of the process (~330k after
# importing torch: ~0.15 s of CPU each here). train_gpt's first step: 173 young and 1-2 full
# collections before, ~40 and none after (the next full one comes later, as it would have). Not
# off: a first call that compiles machine code in place (the ``numba`` executor, or no worker)
# runs for minutes and makes cyclic garbage all along, still collected. The thresholds are the
# process's: they are put back when the last first call running (in any thread) ends, over any a
# thread set meanwhile.
_FIRST_CALL_THRESHOLD = 50_000
_relax_lock = threading.Lock()
_relaxed = 0  # first calls running now, in any thread
_thresholds: tuple[int, ...] = ()  # the thresholds before the first of them began


@contextlib.contextmanager
def fewer_young_collections() -> Iterator[None]:
    """Collect the young generation far less often while the block runs (in any thread)."""
    global _relaxed, _thresholds
    with _relax_lock:
        if not _relaxed:
            _thresholds = gc.get_threshold()
            young, *older = _thresholds
            if young:  # 0: automatic collection is off
                gc.set_threshold(max(young, _FIRST_CALL_THRESHOLD), *older)
        _relaxed += 1
    try:
        yield
    finally:
        with _relax_lock:
            _relaxed -= 1
            if not _relaxed:
                gc.set_threshold(*_thresholds)


def build_entry(native_op, args: tuple, kwargs: dict):
    """The entry of this call's signature for ``native_op`` (a ``NativeOp``), or DECLINED."""
    plan = native_op.plan
    # Functional ops with any number of fresh results, in-place ops writing ``self``, and
    # ``out=`` ops writing only their ``out`` tensors.
    if plan.kind is WrapperKind.FUNCTIONAL:
        if not plan.returns or any(kind is not ReturnKind.FRESH for kind, _ in plan.returns):
            return DECLINED
    elif plan.kind is WrapperKind.OUT:
        if plan.written or any(kind is not ReturnKind.WRITE or ref not in plan.outs
                               for kind, ref in plan.returns):
            return DECLINED
    elif plan.kind is not WrapperKind.INPLACE or not _written_self(plan):
        return DECLINED
    positions = _tensor_positions(native_op.op, args, kwargs)
    if positions is None:
        return DECLINED
    out_positions = ()
    if plan.kind is WrapperKind.OUT:
        out_names = [name for _, name in plan.outs]
        out_positions = tuple(sorted((p for p in positions if p[1] in out_names),
                                     key=lambda p: out_names.index(p[1])))
        if len(out_positions) != len(out_names) or any(e is not None for _, _, e in out_positions):
            return DECLINED  # an ``out`` that is not one device tensor
        positions = tuple(p for p in positions if p not in out_positions)
    inputs = gather_inputs(positions, args, kwargs)
    leading = len(plan.written)  # the written arguments come first: their inputs are the outputs
    inplace = plan.kind is WrapperKind.INPLACE
    written = sum(1 for pos, _, _ in positions if pos < leading) if inplace else 0
    outputs, complete = _meta_outputs(native_op.op, args, kwargs)
    if outputs is None:
        return DECLINED
    if plan.kind is WrapperKind.INPLACE:
        if not written:  # ``self`` is not a device tensor
            return DECLINED
        outputs = [_to_meta(t) for t in inputs[:written]]
    elif out_positions:
        outs = gather_inputs(out_positions, args, kwargs)
        # The meta kernel may reshape an ``out`` of the right size that ATen-CPU keeps: the host decides.
        if len(outputs) != len(outs) or any(o.shape != m.shape and o.numel() == m.numel() != 0
                                            for o, m in zip(outs, outputs, strict=True)):
            return DECLINED
    runtime = tuple(runtime_scalars(native_op.runtime, args, kwargs).tolist()) if native_op.runtime else ()
    call = Call(native_op.op, args, kwargs, inputs, outputs, tuple(p for p, _, _ in positions), runtime)
    if _has_empty(call) and call.outputs and all(o.numel() == 0 for o in call.outputs):
        # Nothing to write (``zero_`` of an empty cache, ``cat`` of empty tensors): no Program, as
        # a device kernel returns at once on an empty tensor; the planner only vouches for the op.
        vouched = None if plan.kind is WrapperKind.OUT or not complete else _vouched(native_op, call)
        if vouched is None:
            return DECLINED
        dtypes = vouched.output_dtypes or tuple(o.dtype for o in call.outputs)  # (layer norm's 16-bit mean)
        specs = tuple((tuple(o.shape), tuple(o.stride()), dt)
                      for o, dt in zip(call.outputs, dtypes, strict=True))
        return NoWorkEntry(positions, specs, written, bool(plan.returns), _returns_list(native_op.op))
    launch = _plan_with_empty(native_op, call) if _has_empty(call) else native_op.planner(call)
    if launch is None or (not complete and launch.result is None):
        return DECLINED
    if launch.int64_in_32_bits and not current_options().cast_64bit:
        return DECLINED  # (the key holds the policy)
    if out_positions and (launch.result is not None or launch.output_dtypes is not None):
        raise AssertionError(f"{native_op.op}: an out= op's results are its out tensors, as they are")
    return _entry(native_op, call, positions, written, launch, out_positions)


def _has_empty(call: Call) -> bool:
    return any(t.numel() == 0 for t in (*call.inputs, *call.outputs))


def _returns_list(op) -> bool:
    return len(op._schema.returns) == 1 and str(op._schema.returns[0].type) == "List[Tensor]"


def _vouched(native_op, call: Call) -> Launch | None:
    try:
        return native_op.planner(call)
    except Exception:  # a planner written for non-empty tensors
        return None


def _plan_with_empty(native_op, call: Call) -> Launch | None:
    """A call with an empty tensor (eval-mode batch norm's backward gets its forward's empty
    ``save_mean``): a kernel may take it if it names no empty tensor as an operand (a Program has
    no zero-size tensors). Planners are written for non-empty tensors: one that fails on it declines."""
    try:
        launch = native_op.planner(call)
    except Exception:
        return None
    if launch is None:
        return None
    for ref in launch.operands:
        if ref.role == "in" and call.inputs[ref.index].numel() == 0:
            return None
        if ref.role == "out" and call.outputs[ref.index].numel() == 0:
            return None
    return launch


def _written_self(plan: OpPlan) -> bool:
    """In-place ops the kernels take: ``self`` (a tensor or a list) is the only written argument,
    returned (``add_``) or not (``_foreach_add_``); or the written arguments are the leading ones
    and nothing is returned (``_fused_adam_``: params, grads and the optimizer states)."""
    if plan.written == ((0, "self"),):
        return plan.returns in (((ReturnKind.WRITE, (0, "self")),), ())
    return not plan.returns and tuple(pos for pos, _ in plan.written) == tuple(range(len(plan.written)))


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


def _entry(native_op, call: Call, positions, written: int, launch: Launch,
           out_positions: tuple[InputPosition, ...] = ()) -> Entry:
    op, plan = call.op, native_op.plan
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
    traced = trace_launch(launch, layouts, which)
    if traced is None:
        return DECLINED
    prepared = traced.prepared
    busy: dict[str, float] = {}
    for track, ns in prepared.timeline.engine_busy_ns.items():
        name = "dma" if track.startswith("dma") else track
        busy[name] = busy.get(name, 0.0) + ns
    nbytes = sum(lay.nbytes for lay, r in zip(layouts, distinct, strict=True) if r.role != "rt")
    flops = launch.flops or traced.matmul_flops
    output_specs = tuple((tuple(o.shape), tuple(o.stride()), o.dtype) for o in call.outputs)
    returns_list = _returns_list(op)
    return Entry(op, plan, plan.name, positions, output_specs, tuple(distinct), traced.traced, prepared,
                 traced.hbm_slots, traced.fixed_arrays, flops, busy, nbytes, written, native_op.runtime,
                 returns_list, admit=launch.admit, disjoint_writes=launch.disjoint_writes,
                 result=launch.result, seeded=native_op.draws_seed,
                 signature=tuple((t.dtype, t.shape) for t in call.inputs or call.outputs),
                 output_bytes=tuple(memory.storage_bytes(o.shape, o.stride(), o.dtype) for o in call.outputs),
                 out_positions=out_positions,
                 out_returns=tuple(plan.outs.index(ref) for _, ref in plan.returns) if out_positions else ())
