"""Running a traced kernel on arrays: one launch on the simulated NeuronCore(s).

The arrays are bound to the kernel's HBM tensors in place (numpy arrays, or CPU torch tensors
viewed as numpy); outputs and scratch HBM tensors are allocated and filled as the trace says; every
phase of every SPMD instance runs (``neuronsim.sim.run``), ``nl.device_print`` values are printed,
copies of in-out arguments are written back, and the launch is handed to the profiler.
"""

from __future__ import annotations

import sys
import time

import ml_dtypes
import numpy as np

from neuronsim.errors import ConstraintError, InputError
from neuronsim.nki import hbm as hbm_check
from neuronsim.nki.profile import record_launch
from neuronsim.nki.traced import ReturnedView, TracedKernel, is_torch
from neuronsim.nki.types import host_words
from neuronsim.options import current as current_options
from neuronsim.sim import api as sim_api
from neuronsim.sim.ir import Memory
from neuronsim.sim.memory.state import FILL_BYTE, CoreMemory


def run(traced: TracedKernel, given: list):
    """Launch ``traced`` on ``given`` (its array arguments in order, lists flattened) and hand the
    launch to the profiler; return (outputs, runs[phase][instance] RunResults)."""
    issued = time.time_ns()
    outputs, runs = execute(traced, given)
    record_launch(traced, runs, issued)
    return outputs, runs


def _shared_array(name: str, shape, dtype: np.dtype, fill: float | None) -> np.ndarray:
    return _new_array(shape, dtype, fill)


def execute(traced: TracedKernel, given: list, *, new_shared=_shared_array, wrap=None):
    """Run every phase of every instance; return (outputs, runs[phase][instance] RunResults).
    (:func:`execute_phases` does it a phase at a time.)"""
    phases = execute_phases(traced, given, new_shared=new_shared, wrap=wrap)
    runs = []
    while True:
        try:
            runs.append(next(phases))
        except StopIteration as done:
            return done.value, runs


def execute_phases(traced: TracedKernel, given: list, *, new_shared=_shared_array, wrap=None):
    """A generator running the launch one ``core_barrier`` phase at a time: it yields each phase's
    RunResults (one per instance) and returns the outputs. Collective launches step the ranks'
    generators together (``collectives.py``).

    ``new_shared(name, shape, dtype, fill)`` makes the HBM arrays the kernel allocates for all its
    instances (its outputs among them); ``wrap(name, array)`` turns a returned HBM tensor into
    what the caller gets (default: the array, or a CPU torch tensor when the inputs were). The
    device layer passes both to put outputs in device memory and return its own tensors (and
    charges the launch to its clock instead of handing it to the profiler).
    """
    names = [n for n in traced.arg_names if n is not None]
    if len(given) != len(names):
        raise InputError(
            f"kernel {traced.name} was traced with {len(names)} array arguments, got {len(given)}"
        )
    hbm: dict[str, np.ndarray] = {}
    write_back = []
    use_torch = any(is_torch(a) for a in given)
    inouts = {
        t.name
        for inst in traced.instances
        for p in inst.programs
        for t in p.hbm_tensors()
        if t.kind == "inout"
    }
    arrays = [to_numpy(a) for a in given]
    _check_host(traced, names, arrays, inouts)
    for i, (name, a, arr) in enumerate(zip(names, given, arrays, strict=False)):
        if name in inouts and not arr.flags.writeable:
            raise InputError(
                f"kernel {traced.name} writes its array argument {i} ('{name}'), but that array is "
                f"read-only; pass a writeable array (a copy)", location=_writer(traced, name))
        # Written arguments run on a copy, written back once every phase has run: a kernel that
        # fails part-way leaves its caller's arrays as they were.
        if not arr.flags.c_contiguous or name in inouts:
            arr = np.array(arr, order="C", copy=True)
            if name in inouts:
                write_back.append((a, arr))
        hbm[name] = arr
    for name, (shape, dtype, _kind) in traced.shared.items():
        hbm[name] = new_shared(name, shape, dtype, traced.fills.get(name))
    hbm.update(traced.constants)
    n_phases = len(traced.instances[0].programs)
    # Each instance's SBUF/PSUM lives on through its phases (a tile may be live across a barrier);
    # a single-phase kernel with no barrier inside uses the thread's core memory, reset per run.
    separate = n_phases > 1 or traced.info.get("loop_barriers", 0) > 0
    cores = [CoreMemory(traced.chip) for _ in traced.instances] if separate else None
    on_chip: list[set[str]] = [set() for _ in traced.instances]
    printed = {}
    for phase in range(n_phases):
        row, bound = [], []
        for i, inst in enumerate(traced.instances):
            prog = inst.programs[phase]
            arrays = {t.name: hbm[t.name] for t in prog.hbm_tensors() if t.name in hbm}
            for t in prog.hbm_tensors():
                if t.name not in arrays and t.name in traced.fills:
                    arrays[t.name] = _new_array(t.shape, t.dtype.numpy, traced.fills[t.name])
            names = {t.name for t in prog.tensors if t.memory is not Memory.HBM}
            keep = frozenset(names & on_chip[i])
            on_chip[i] |= names
            bound.append(arrays)
            row.append(sim_api.run(prog, arrays, traced.chip, core=cores[i] if cores else None, keep=keep))
        # A barrier inside a loop on a register is an instruction: every instance's run pauses there
        # and resumes once all have reached it, the piece before it being a phase of its own.
        while any(r.paused is not None for r in row):
            _check_paused(traced, phase, row)
            _print(traced, row, printed)
            yield row
            row = [sim_api.run(inst.programs[phase], bound[i], traced.chip, core=cores[i] if cores else None,
                               resume=row[i].paused)
                   for i, inst in enumerate(traced.instances)]
        _print(traced, row, printed)
        yield row
    for original, copy in write_back:
        if isinstance(original, np.ndarray):
            to_numpy(original)[...] = copy
        else:
            original.copy_(_from_numpy(copy))
    if wrap is None:
        wrap = (lambda _name, a: _from_numpy(a)) if use_torch else (lambda _name, a: a)
    return _outputs(traced.returns, hbm, wrap)


def _print(traced: TracedKernel, row, printed: dict) -> None:
    """Print the ``nl.device_print`` values a row of runs produced (each tensor once)."""
    for inst, result in zip(traced.instances, row, strict=False):
        for prefix, pname in inst.prints:
            if pname in result.outputs and pname not in printed:
                printed[pname] = True
                print(prefix, result.outputs[pname])


def _check_paused(traced: TracedKernel, phase: int, row) -> None:
    """Every instance paused at the same barrier: one that finished or waits at another would leave
    the others waiting for ever on hardware."""
    first = row[0].paused
    if all(r.paused is not None and r.paused.barrier == first.barrier for r in row):
        return
    where, location = [], None
    for i, r in enumerate(row):
        if r.paused is None:
            where.append(f"instance {i} ran to the end")
            continue
        at = traced.instances[i].programs[phase].instructions[r.paused.at].location
        location = location or at
        where.append(f"instance {i} waits at the barrier at {at} (#{r.paused.barrier} of the kernel's "
                     f"barriers in register loops)")
    raise ConstraintError(
        f"kernel {traced.name}: the cores do not meet at one barrier (a core_barrier or sendrecv in a "
        f"loop on a register must be reached as often on every core): " + "; ".join(where), location=location)


def _check_host(traced: TracedKernel, names, arrays, inouts) -> None:
    """Before making any array: the HBM arrays this launch creates (shared tensors, copies of
    written or strided arguments, one instance's private HBM at a time) must fit this host."""
    need = sum(int(np.prod(shape)) * dtype.itemsize for shape, dtype, _ in traced.shared.values())
    need += sum(a.nbytes for n, a in zip(names, arrays, strict=False)
                if n in inouts or not a.flags.c_contiguous)
    need += traced.info.get("private_hbm_bytes", 0)
    hbm_check.check_host(traced.name, need)


def _writer(traced: TracedKernel, name: str) -> str | None:
    """The kernel line of the first instruction writing HBM tensor ``name``."""
    for inst in traced.instances:
        for prog in inst.programs:
            for ins in prog.instructions:
                if any(write and ap.tensor.name == name for ap, write in ins.accesses()):
                    return ins.location
    return None


def to_numpy(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return host_words(x)  # MX arrays as their storage words
    torch = sys.modules["torch"]
    t = x.detach()
    if t.device.type != "cpu":
        raise InputError(f"nki.simulate takes numpy arrays or CPU torch tensors; got a tensor on {t.device}")
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.contiguous().numpy()


def _from_numpy(a: np.ndarray):
    torch = sys.modules["torch"]
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _new_array(shape, dtype: np.dtype, fill: float | None) -> np.ndarray:
    if fill is not None:
        return np.full(shape, fill, dtype=dtype)
    a = np.empty(shape, dtype=dtype)
    a.reshape(-1).view(np.uint8)[:] = FILL_BYTE[current_options().uninitialized_memory]
    return a


def _outputs(ret, hbm, wrap):
    if ret is None:
        return None
    if isinstance(ret, (tuple, list)):
        return type(ret)(_outputs(r, hbm, wrap) for r in ret)
    if isinstance(ret, dict):
        return {k: _outputs(v, hbm, wrap) for k, v in ret.items()}
    out = wrap(ret, hbm[ret])
    return _view(out, ret) if isinstance(ret, ReturnedView) else out


def _view(a, view: ReturnedView):
    """The returned view of an HBM tensor's array (numpy) or tensor (torch): a reshape of the whole
    tensor stays a view of it; any other pattern is copied out."""
    steps = tuple(step for step, _ in view.dims)
    size = int(np.prod(view.shape))
    contiguous = steps == tuple(int(np.prod(view.shape[i + 1:])) for i in range(len(steps)))
    if isinstance(a, np.ndarray):
        flat = a.reshape(-1)
        if contiguous:
            return flat[view.offset:view.offset + size].reshape(view.shape)
        strided = np.lib.stride_tricks.as_strided(
            flat[view.offset:], view.shape, tuple(s * a.itemsize for s in steps), writeable=False)
        return strided.copy()
    return a.as_strided(view.shape, steps, a.storage_offset() + view.offset)
