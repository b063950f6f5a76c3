"""Register the emulated device: PrivateUse1 renamed ``neuron``, once per process.

Order matters: the C++ device guard and set_data hooks (``cpp/``) -> rename -> Python hooks ->
generated ``.neuron()``/``.is_neuron``
methods -> the device module ``torch.neuron`` -> the op table and the patches for the C++ pieces
a Python backend cannot provide -> the native kernels (``neuronsim.kernels``).
"""

from __future__ import annotations

import threading

import torch

from neuronsim.device import (
    accelerator,
    autograd_hooks,
    cpp,
    default_compile,
    distributed,
    module,
    native,
    nki_launch,
    op_table,
    settings,
    state,
    storage,
)
from neuronsim.nki.kernel import register_launcher

_lock = threading.Lock()
_registered = False


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, device_index: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


def is_registered() -> bool:
    return _registered


def owner_of_privateuse1() -> str | None:
    """None if PrivateUse1 is free, "neuronsim" if it is ours, else the other backend's name."""
    name = torch._C._get_privateuse1_backend_name()
    if name == "privateuseone":
        return None
    if name == state.DEVICE_TYPE and getattr(getattr(torch, name, None), "__neuronsim__", False):
        return "neuronsim"
    return name


def _connect_profiler() -> None:
    """Hand the device clocks to the profiler: ``neuronsim profile`` sessions read every device's
    ops through the reader registered here, and ``torch.profiler.profile(activities=[...,
    ProfilerActivity.PrivateUse1])``'s ``export_chrome_trace`` carries each device's simulated ops
    (read from the device clocks when the trace is written)."""
    from neuronsim.device import clock
    from neuronsim.profiler import session
    from neuronsim.profiler.events import from_clock_events
    from neuronsim.profiler.lane import install_export_hook

    session.register_clock_reader(
        state.DEVICE_TYPE,
        lambda: {index: from_clock_events(clk.events()) for index, clk in clock.all_clocks().items()},
        clock.keep_records,
    )
    for index in range(state.device_count()):
        install_export_hook(lambda index=index: from_clock_events(clock.clock(index).events()),
                            chip_name=lambda: settings.chip().name, device=index)


def _prefer_device_in_fake_propagation() -> None:
    """``torch.compile`` of a model on the device fed a CPU batch: Dynamo's fake propagation would
    raise a device mismatch before the backend sees the graph; resolved to ``neuron`` it traces,
    and the backend copies the CPU inputs over (neuronsim/device/compile.py)."""
    import torch._functorch.config

    torch._functorch.config.fake_tensor_prefer_device_type = state.DEVICE_TYPE


def register() -> None:
    """Idempotent. Raises if another backend (e.g. a real TorchNeuron) already owns PrivateUse1."""
    global _registered
    with _lock:
        if _registered:
            return
        owner = owner_of_privateuse1()
        if owner not in (None, "neuronsim"):
            raise RuntimeError(
                f"the PrivateUse1 device is already registered as {owner!r} by another backend "
                "(a real TorchNeuron?); neuronsim leaves it alone"
            )
        if owner is None:
            # First, so that nothing is registered if the C++ library cannot be built or loaded.
            count = state.device_count()
            state.use_native_guard(cpp.install(count), count)
            torch.utils.rename_privateuse1_backend(state.DEVICE_TYPE)
            torch._C._acc.register_python_privateuseone_hook(_Hooks())
            torch.utils.generate_methods_for_privateuse1_backend(
                for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
            )
            torch._register_device_module(state.DEVICE_TYPE, module)
            op_table.install()
            accelerator.install()
            storage.install()
            autograd_hooks.install()
            native.install()  # native ops; their NKI kernels load at each family's first call
            distributed.register()  # c10d backend `neuron`: torch.distributed has no entry points
            register_launcher(nki_launch.launch)  # @nki.jit kernels called on neuron tensors
            _prefer_device_in_fake_propagation()
            default_compile.install()  # torch.compile(fn) on the device: the neuron backend
            _connect_profiler()
        _registered = True
