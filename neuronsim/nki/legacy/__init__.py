"""``neuronxcc.nki``: the legacy NKI API (NKI 0.1) on the simulator, a thin layer over ``neuronsim.nki``.

With ``NEURON_SIM=1`` and no real ``neuronxcc`` installed, ``import neuronxcc.nki`` (and
``neuronxcc.nki.language``, ``.isa``, ``.typing``, ``.compiler``) resolve here, by the rule that
serves ``import nki`` (``neuronsim/nki_alias.py``). Legacy kernels run unchanged: ``nisa`` calls
that return results (``legacy/isa.py``), ``nl.arange``/``nl.mgrid`` index grids and ``mask=``
(``legacy/grid.py``, ``legacy/call.py``), ``nl.par_dim`` and block dimensions
(``legacy/language.py``), ``nki.baremetal``, ``nki.simulate_kernel``, ``nki.benchmark`` and
``nki.profile`` (``legacy/bench.py``). Each legacy construct prints a one-line hint with its
NKI 0.6 form (``legacy/hints.py``; ``NEURON_SIM_NKI_HINTS=0`` silences them).
"""

from neuronsim.nki.kernel import Kernel
from neuronsim.nki.legacy import compiler, hints, isa, language, typing
from neuronsim.nki.legacy.bench import baremetal, benchmark, profile, simulate_kernel
from neuronsim.nki.legacy.call import legacy_kernel
from neuronsim.nki.legacy.typing import tensor


def jit(func=None, mode="auto", **kwargs):
    """``nki.jit`` of NKI 0.1 (``mode=`` accepted: every mode simulates)."""
    if mode != "auto":
        hints.hint("nki.jit(mode=)")
    if func is None:
        return lambda f: legacy_kernel(f, kwargs)
    return legacy_kernel(func, kwargs)


__all__ = ["Kernel", "baremetal", "benchmark", "compiler", "isa", "jit", "language", "profile",
           "simulate_kernel", "tensor", "typing"]
