"""The one error hierarchy of neuronsim.

Every error names what was wrong and where: the instruction or allocation, the memory and range,
the limit broken, and the kernel's ``file:line``. :func:`located` builds the message so the
wording stays uniform. At the torch boundary the device layer re-raises these as torch's own
exception types with the same message.
"""

from __future__ import annotations


class NeuronSimError(Exception):
    """Base class. ``what`` is the bare message; ``instruction`` and ``location`` say where."""

    def __init__(self, what: str, *, instruction: str | None = None, location: str | None = None):
        self.what = what
        self.instruction = instruction
        self.location = location
        super().__init__(located(what, instruction=instruction, location=location))


def located(what: str, *, instruction: str | None = None, location: str | None = None) -> str:
    """``<location>: <instruction>: <what>`` with absent parts left out."""
    parts = [p for p in (location, instruction) if p]
    return ": ".join([*parts, what])


class ChipSpecError(NeuronSimError, ValueError):
    """A chip file is malformed, incomplete or unknown."""


class OptionError(NeuronSimError, ValueError):
    """A simulation option (or its environment variable) has an invalid value."""


class CapacityError(NeuronSimError):
    """A memory is over capacity."""


class SbufCapacityError(CapacityError):
    pass


class PsumCapacityError(CapacityError):
    pass


class HbmCapacityError(CapacityError, MemoryError):
    pass


class ConstraintError(NeuronSimError, ValueError):
    """An instruction breaks a hardware rule: partitions, free sizes, shapes, start partitions."""


class DtypeError(ConstraintError, TypeError):
    """A dtype is not allowed where it is used."""


class EngineAccessError(ConstraintError):
    """An engine touches a memory it cannot reach (TensorE reading PSUM, GpSimd on PSUM, ...)."""


class OutOfBoundsError(NeuronSimError, IndexError):
    """An access pattern reaches outside its tensor."""


class UninitializedReadError(NeuronSimError):
    """An instruction reads SBUF/PSUM bytes that nothing wrote."""


class KernelFaultError(NeuronSimError, RuntimeError):
    """An engine's compiled kernel raised while running an instruction the validator accepted: a
    simulator bug, reported with the instruction instead of printed and ignored."""


class UnsupportedError(NeuronSimError, NotImplementedError):
    """A feature the simulated hardware or software stack does not support."""


class InputError(NeuronSimError, ValueError):
    """Arrays handed to a Program do not match its tensors (shape, dtype, count, layout)."""


class CollectiveError(NeuronSimError, RuntimeError):
    """A torch.distributed collective failed: a peer rank died, hung past the timeout, or never came."""


class NativeBuildError(NeuronSimError, RuntimeError):
    """The device's C++ support library could not be built (no compiler, or the compile failed)."""


class GateFailure(NeuronSimError, AssertionError):
    """A performance gate (neuronsim.testing) did not hold: what was expected, what was measured, and
    where the simulated time went. An AssertionError, so test runners report it as a failed check."""
