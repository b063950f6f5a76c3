"""``torch_neuronx`` on the emulated device: TorchNeuron's Python namespace.

Under ``NEURON_SIM=1``, and only when no real ``torch_neuronx`` is installed, ``import
torch_neuronx`` resolves to this package (:func:`neuronsim.nki_alias.install_torch_neuronx_alias`,
DESIGN.md decision 10), so scripts written for TorchNeuron run unchanged and the ecosystem's own
device detection (transformers' ``is_torch_neuron_available``, accelerate's
``is_neuron_available``: ``torch_neuronx`` importable and ``torch.neuron.is_available()``) finds
the device. What it holds (torchneuron-api.md §1.3, §1.13, §1.15):

- the ``torch.neuron`` functions, mirrored (device, RNG, streams and events, memory, compile
  metrics): the same function objects as ``torch.neuron``'s;
- op tracking: ``get_fallback_ops``, ``get_executed_ops``, ``clear_op_tracking``;
- NKI: ``nki_op`` (a ``torch.library`` custom op; ``register_autograd`` trains it) and
  ``wrap_nki(kernel)[grid](...)``; ``@nki.jit`` kernels also run when called on neuron tensors;
- ``torch_neuronx.profiling``: ``NeuronConfig``, ``ProfileMode``, ``NeuronProfiler``.

Importing it registers the device if the ``torch.backends`` autoload has not.
"""

from __future__ import annotations

from neuronsim.device import enable as _enable

_enable()

from neuronsim.device import module as _neuron  # noqa: E402  (torch.neuron itself)
from neuronsim.device.nki_hop import nki_op, wrap_nki  # noqa: E402
from neuronsim.torch_neuronx import profiling  # noqa: E402
from neuronsim.torch_neuronx.profiling import NeuronProfiler  # noqa: E402

__version__ = "0.1.0+neuronsim"
__neuronsim__ = True  # this is neuronsim's stand-in, not AWS's package

# The torch.neuron surface, the same objects (one implementation, two names).
_MIRRORED = (
    "is_available", "is_initialized", "init", "_lazy_init", "_is_in_bad_fork", "device_count",
    "current_device", "set_device", "device", "device_of", "get_device_name", "get_device_properties",
    "get_amp_supported_dtype", "is_bf16_supported",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
    "set_rng_state", "get_rng_state_all", "set_rng_state_all",
    "Stream", "Event", "stream", "current_stream", "default_stream", "set_stream", "synchronize",
    "wait_stream", "wait_event", "record_event",
    "memory", "memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
    "memory_summary", "mem_get_info", "empty_cache",
    "get_dynamo_metrics", "reset_dynamo_metrics",
    "get_fallback_ops", "get_executed_ops", "clear_op_tracking", "_sleep",
)
globals().update({name: getattr(_neuron, name) for name in _MIRRORED})


def is_neuron_runtime_initialized() -> bool:
    return _neuron.is_initialized()


__all__ = [n for n in _MIRRORED if not n.startswith("_")] + [
    "NeuronProfiler", "is_neuron_runtime_initialized", "nki_op", "profiling", "wrap_nki",
]
