"""``nki.simulate(kernel)(*arrays)``: run a kernel on the simulated NeuronCore, return its outputs.

``neuronsim.nki.simulate(kernel, profile=True)(*arrays)`` returns ``(outputs, profile)`` with a
Neuron-Explorer-style summary and the instruction timeline. The chip is ``chip=`` or
``NEURON_SIM_CHIP`` (trn2 by default).

SPMD launches (``kernel[2]``) run every instance on the same HBM arrays; instance ``i`` runs on
physical core ``i % lnc`` (``lnc`` = the chip's logical-core width, 2 on trn2/trn3), instances on
one core run back to back, and ``nisa.core_barrier`` ends a phase on every core before the next.
"""

from __future__ import annotations

import sys
import time

import ml_dtypes
import numpy as np

from neuronsim.errors import InputError
from neuronsim.nki import profile as _profile
from neuronsim.nki.kernel import Kernel, TracedKernel, _is_torch, as_kernel
from neuronsim.options import current as current_options
from neuronsim.sim import api as sim_api
from neuronsim.sim.memory.state import FILL_BYTE


def simulate(kernel, *, profile: bool = False, chip=None):
    """A callable running ``kernel`` on the simulator: ``simulate(k)(*arrays) -> outputs``.

    With ``profile=True`` it returns ``(outputs, profile)`` (see :mod:`neuronsim.nki.profile`).
    Arrays are numpy arrays (or torch CPU tensors, returned as torch tensors).
    """
    k = as_kernel(kernel)

    def run(*args, **kwargs):
        traced = k.specialize(args, kwargs, chip=chip)
        issued = time.time_ns()
        outputs, runs = execute(k, traced, args, kwargs)
        _profile.record_launch(traced, runs, issued)
        if profile:
            return outputs, _profile.build_profile(traced, runs)
        return outputs

    run.__name__ = f"simulate({getattr(k, '__name__', 'kernel')})"
    run.kernel = k
    return run


def _to_numpy(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
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


def _arrays_of(k: Kernel, args, kwargs) -> list:
    bound = k._bind(args, kwargs)
    values = list(bound.arguments.values()) if bound is not None else list(args)
    out = []
    for v in values:
        if isinstance(v, np.ndarray) or _is_torch(v):
            out.append(v)
        elif isinstance(v, (tuple, list)) and v and all(isinstance(e, np.ndarray) or _is_torch(e) for e in v):
            out.extend(v)
    return out


def _new_array(shape, dtype: np.dtype, fill: float | None) -> np.ndarray:
    if fill is not None:
        return np.full(shape, fill, dtype=dtype)
    a = np.empty(shape, dtype=dtype)
    a.reshape(-1).view(np.uint8)[:] = FILL_BYTE[current_options().uninitialized_memory]
    return a


def _shared_array(name: str, shape, dtype: np.dtype, fill: float | None) -> np.ndarray:
    return _new_array(shape, dtype, fill)


def execute(k: Kernel, traced: TracedKernel, args, kwargs, *, new_shared=_shared_array, wrap=None):
    """Run every phase of every instance; return (outputs, runs[phase][instance] RunResults).

    ``new_shared(name, shape, dtype, fill)`` makes the HBM arrays the kernel allocates for all its
    instances (its outputs among them); ``wrap(name, array)`` turns a returned HBM tensor into
    what the caller gets (default: the array, or a CPU torch tensor when the inputs were). The
    device layer passes both to put outputs in device memory and return its own tensors.
    """
    given = _arrays_of(k, args, kwargs)
    names = [n for n in traced.arg_names if n is not None]
    if len(given) != len(names):
        raise InputError(
            f"kernel {traced.name} was traced with {len(names)} array arguments, got {len(given)}"
        )
    hbm: dict[str, np.ndarray] = {}
    write_back = []
    use_torch = any(_is_torch(a) for a in given)
    inouts = {
        t.name
        for inst in traced.instances
        for p in inst.programs
        for t in p.hbm_tensors()
        if t.kind == "inout"
    }
    for name, a in zip(names, given, strict=False):
        arr = _to_numpy(a)
        if not arr.flags.c_contiguous or (name in inouts and not arr.flags.writeable):
            arr = np.array(arr, order="C", copy=True)
        if name in inouts and not np.shares_memory(arr, _to_numpy(a)):
            write_back.append((a, arr))
        hbm[name] = arr
    for name, (shape, dtype, _kind) in traced.shared.items():
        hbm[name] = new_shared(name, shape, dtype, traced.fills.get(name))
    hbm.update(traced.constants)
    n_phases = len(traced.instances[0].programs)
    runs = []
    printed = {}
    for phase in range(n_phases):
        row = []
        for inst in traced.instances:
            prog = inst.programs[phase]
            arrays = {t.name: hbm[t.name] for t in prog.hbm_tensors() if t.name in hbm}
            for t in prog.hbm_tensors():
                if t.name not in arrays and t.name in traced.fills:
                    arrays[t.name] = _new_array(t.shape, t.dtype.numpy, traced.fills[t.name])
            result = sim_api.run(prog, arrays, traced.chip)
            row.append(result)
            for prefix, pname in inst.prints:
                if pname in result.outputs and pname not in printed:
                    printed[pname] = True
                    print(prefix, result.outputs[pname])
        runs.append(row)
    for original, copy in write_back:
        if isinstance(original, np.ndarray):
            original[...] = copy
        else:
            original.copy_(_from_numpy(copy))
    if wrap is None:
        wrap = (lambda _name, a: _from_numpy(a)) if use_torch else (lambda _name, a: a)
    return _outputs(traced.returns, hbm, wrap), runs


# simulate() records each launch with a profiler session itself (profile.record_launch); this tells
# the session's interim wrapper (profiler.session.observe_nki_simulate) not to record it again.
execute._neuronsim_observed = True


def _outputs(ret, hbm, wrap):
    if ret is None:
        return None
    if isinstance(ret, (tuple, list)):
        return type(ret)(_outputs(r, hbm, wrap) for r in ret)
    if isinstance(ret, dict):
        return {k: _outputs(v, hbm, wrap) for k, v in ret.items()}
    return wrap(ret, hbm[ret])
