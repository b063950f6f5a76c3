"""neuronsim: a cycle-approximate Trainium2/3 NeuronCore simulator exposed to PyTorch as `neuron`."""

from neuronsim.options import SimOptions, options

__version__ = "0.1.0"
__all__ = ["SimOptions", "enable", "options", "__version__"]


def enable() -> None:
    """Register the emulated ``neuron`` PyTorch device (imports torch; idempotent)."""
    from neuronsim.device import enable as _enable

    _enable()
