"""neuronsim: a cycle-approximate Trainium2/3 NeuronCore simulator exposed to PyTorch as `neuron`."""

from neuronsim.options import SimOptions, options

__version__ = "0.1.0"
__all__ = ["SimOptions", "options", "__version__"]
