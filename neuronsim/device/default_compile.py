"""``torch.compile(fn)`` with no backend selects the ``neuron`` backend for graphs on the device.

TorchNeuron's compile reference: the backend is "explicitly set, or auto-selected when running on
a Neuron device". torch.compile's default backend is Inductor, which has no neuron code generator
(a graph of neuron tensors fails inside it with ``KeyError: 'neuron'``). torch.compile wraps
Inductor in ``torch._TorchCompileInductorWrapper``; its call receives each captured graph with
its example inputs, so the wrapper is where a graph on the device is recognised: any neuron tensor
among the inputs (parameters are inputs too) sends it to the neuron backend, with the ``mode``
given to torch.compile (non-default modes warn and run as default; ``dynamic=True`` is rejected:
the backend's rules). Graphs of CPU tensors compile with Inductor as before.
"""

from __future__ import annotations

import functools

import torch

from neuronsim.device import state

_installed = False


def _on_device(example_inputs) -> bool:
    return any(isinstance(x, torch.Tensor) and x.device.type == state.DEVICE_TYPE for x in example_inputs)


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    wrapper = torch._TorchCompileInductorWrapper
    original_init, original_call = wrapper.__init__, wrapper.__call__

    @functools.wraps(original_init)
    def __init__(self, mode, options, dynamic, *args, **kwargs):
        original_init(self, mode, options, dynamic, *args, **kwargs)
        self.neuron_mode = mode

    @functools.wraps(original_call)
    def __call__(self, model_, inputs_, *args, **kwargs):
        if _on_device(inputs_):
            from neuronsim.device.compile import neuron_backend

            return neuron_backend(model_, inputs_, mode=getattr(self, "neuron_mode", None))
        return original_call(self, model_, inputs_, *args, **kwargs)

    wrapper.__init__, wrapper.__call__ = __init__, __call__
