"""``nki.simulate(kernel)(*arrays)``: run a kernel on the simulated NeuronCore, return its outputs.

``neuronsim.nki.simulate(kernel, profile=True)(*arrays)`` returns ``(outputs, profile)`` with a
Neuron-Explorer-style summary and the instruction timeline. The chip is ``chip=`` or
``NEURON_SIM_CHIP`` (trn2 by default); the NKI release whose semantics the kernel gets where
releases differ is ``nki_version=`` or ``NEURON_SIM_NKI_VERSION`` (the current one by default; the
differences: ``neuronsim/nki_releases.py``).

SPMD launches (``kernel[2]``) run every instance on the same HBM arrays; instance ``i`` runs on
physical core ``i % lnc`` (``lnc`` = the chip's logical-core width, 2 on trn2/trn3), instances on
one core run back to back, and ``nisa.core_barrier`` ends a phase on every core before the next.
"""

from __future__ import annotations

import contextlib

from neuronsim.nki import launch
from neuronsim.nki.kernel import as_kernel
from neuronsim.nki.profile import build_profile
from neuronsim.options import current as current_options
from neuronsim.options import options


def simulate(kernel, *, profile: bool = False, chip=None, nki_version: str | None = None):
    """A callable running ``kernel`` on the simulator: ``simulate(k)(*arrays) -> outputs``.

    With ``profile=True`` it returns ``(outputs, profile)`` (see :mod:`neuronsim.nki.profile`).
    Arrays are numpy arrays (or torch CPU tensors, returned as torch tensors). ``nki_version``
    ("0.3" .. "0.6") selects the NKI release simulated; an unknown one raises ``OptionError``.
    """
    k = as_kernel(kernel)
    if nki_version is not None:
        current_options().replace(nki_version=nki_version)  # an unknown release fails here, not at the call

    def run(*args, **kwargs):
        scope = options(nki_version=nki_version) if nki_version is not None else contextlib.nullcontext()
        with scope:
            traced = k.specialize(args, kwargs, chip=chip)
        outputs, runs = launch.run(traced, k.arrays(args, kwargs))
        if profile:
            return outputs, build_profile(traced, runs)
        return outputs

    run.__name__ = f"simulate({getattr(k, '__name__', 'kernel')})"
    run.kernel = k
    return run
