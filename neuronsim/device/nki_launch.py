"""``@nki.jit`` kernels called on ``neuron`` tensors: run in place on the device, as on TorchNeuron.

TorchNeuron compiles a kernel called with Neuron tensors for that call's shapes, dtypes and
constant arguments and runs it on the device (torch/guides/how-to-work-with-nki). Here the kernel
is traced once per signature (``Kernel.specialize``, cached), its Programs run with the simulator
on the tensors' own bytes (HBM is host memory: the inputs are zero-copy views, a mutated input is
written in place), the outputs it allocates (``nl.shared_hbm``) are device tensors from the
device's allocator (counted against the simulated HBM), and the launch is charged to the device
clock like a native op: launch overhead plus the launch's simulated time (instances laid out on
their physical cores, ``neuronsim.nki.profile.layout``).

Inside ``torch.compile`` the call becomes one graph node instead (``nki_hop.wrap_nki``), run by this
module when the compiled graph runs. The NKI frontend does not import the device: registration
hands :func:`launch` to ``neuronsim.nki.kernel.register_launcher``.
"""

from __future__ import annotations

import numpy as np
import torch

from neuronsim.device import clock, memory, state, tracking
from neuronsim.errors import InputError
from neuronsim.options import current as current_options
from neuronsim.sim.memory.state import FILL_BYTE

_NUMPY_TO_TORCH = {
    "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
    "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool,
}


def _device_tensors(args, kwargs) -> list[torch.Tensor]:
    found = []

    def visit(v):
        if isinstance(v, torch.Tensor):
            if v.device.type == state.DEVICE_TYPE:
                found.append(v)
        elif isinstance(v, tuple | list):
            for e in v:
                visit(e)

    for a in args:
        visit(a)
    for a in kwargs.values():
        visit(a)
    return found


def launch(kernel, args: tuple, kwargs: dict):
    """``kernel(*args, **kwargs)`` when a device tensor is among the arguments, else NotImplemented."""
    if not _device_tensors(args, kwargs):
        return NotImplemented
    if torch.compiler.is_compiling():  # one node in the graph; the graph's run comes back to run()
        from neuronsim.device.nki_hop import wrap_nki

        return wrap_nki(kernel)[kernel.grid](*args, **kwargs)
    return run(kernel, args, kwargs)


def _host(v):
    """A device tensor as a CPU tensor over the same bytes (what the simulator binds as HBM)."""
    if isinstance(v, torch.Tensor):
        if v.device.type == state.DEVICE_TYPE:
            return memory.host_view(v.detach())
        if v.device.type == "cpu":
            raise InputError(
                "an NKI kernel was called with both neuron and CPU tensors; its tensor arguments live in "
                "HBM: move them all to the neuron device first")
        raise InputError(f"an NKI kernel was called with a tensor on {v.device}; use neuron tensors")
    if isinstance(v, tuple | list):
        return type(v)(_host(e) for e in v)
    return v


def run(kernel, args: tuple, kwargs: dict):
    """Run ``kernel`` eagerly on device tensors; returns its results as device tensors (a returned
    input is that input, written in place)."""
    from neuronsim.nki.launch import execute, to_numpy
    from neuronsim.nki.profile import layout

    on_device = _device_tensors(args, kwargs)
    index = on_device[0].get_device()
    if any(t.get_device() != index for t in on_device):
        raise InputError(f"an NKI kernel was called with tensors on several neuron devices "
                         f"({sorted({t.get_device() for t in on_device})}); one launch runs on one core")
    for t in on_device:
        if t.dtype in (torch.float64, torch.int64):
            raise InputError(f"kernel {kernel.__name__}: an argument is {t.dtype}; NKI kernels take "
                             "32-bit and narrower dtypes (cast it first)")
    host_args = tuple(_host(a) for a in args)
    host_kwargs = {k: _host(v) for k, v in kwargs.items()}
    traced = kernel.specialize(host_args, host_kwargs)
    names = [n for n in traced.arg_names if n is not None]
    by_name = dict(zip(names, kernel.arrays(args, kwargs), strict=True))

    def new_shared(name, shape, dtype: np.dtype, fill):
        t = memory.empty(tuple(shape), _torch_dtype(dtype, traced.name), index)
        by_name[name] = t
        a = to_numpy(memory.host_view(t))
        if fill is not None:
            a[...] = fill
        else:  # the simulator's uninitialized-memory pattern, as nki.simulate fills new HBM
            a.reshape(-1).view(np.uint8)[:] = FILL_BYTE[current_options().uninitialized_memory]
        return a

    outputs, runs = execute(traced, kernel.arrays(host_args, host_kwargs), new_shared=new_shared,
                            wrap=lambda name, _array: by_name[name])
    placed = layout(runs, traced.chip)
    duration = max((offset + result.timeline.total_ns for *_, offset, result in placed), default=0.0)
    single = placed[0][4].prepared if len(placed) == 1 else None
    busy: dict[str, float] = {}
    for *_, result in placed:
        for track, ns in result.timeline.engine_busy_ns.items():
            key = "dma" if track.startswith("dma") else track
            busy[key] = busy.get(key, 0.0) + ns
    flops = float(sum(inst.matmul_flops for inst in traced.instances))
    nbytes = sum(t.nbytes for t in by_name.values())
    name = f"nki:{traced.name}"
    tracking.record_native(name)  # torch_neuronx.get_executed_ops() lists the kernel
    clock.clock(index).charge_kernel(
        name, tuple((t.dtype, tuple(t.shape)) for t in on_device), duration, nbytes,
        kernel=single, flops=flops, engine_busy_ns=busy)
    return outputs


def _torch_dtype(dtype: np.dtype, kernel_name: str) -> torch.dtype:
    t = _NUMPY_TO_TORCH.get(np.dtype(dtype).name)
    if t is None:
        raise InputError(f"kernel {kernel_name}: an output of dtype {np.dtype(dtype).name} "
                         "has no torch dtype")
    return t
