"""neuronsim's NKI: the NKI 0.6 API (``nki.jit``, ``nki.language``, ``nki.isa``) on the simulator.

    import neuronsim.nki as nki
    import neuronsim.nki.language as nl
    import neuronsim.nki.isa as nisa

    @nki.jit
    def add(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(a), nl.load(b)))
        return out

    c = nki.simulate(add)(a, b)                           # like AWS's nki.simulate
    c, prof = nki.simulate(add, profile=True)(a, b)       # + Neuron Explorer summary and timeline

With ``NEURON_SIM=1`` and no real ``nki`` package installed, :func:`install_alias` makes
``import nki`` (and ``nki.language``, ``nki.isa``, ``nki.isa.constants``, ``nki.typing``,
``nki.dtype``) resolve here, so existing kernel files run
unchanged; ``python -m neuronsim.nki kernel.py`` runs a file that way. This package does not
import torch or ``neuronsim.device``.
"""

from neuronsim.nki import collectives, isa, language, typing
from neuronsim.nki.kernel import Kernel, jit
from neuronsim.nki.language import NkiTensor, num_programs, program_id, program_ndim
from neuronsim.nki.language import dtypes as dtype  # ``nki.dtype``: annotations such as ``dt: nki.dtype``
from neuronsim.nki.profile import Profile, TimelineEntry
from neuronsim.nki.ranks import simulate_ranks
from neuronsim.nki.simulate import simulate
from neuronsim.nki.traced import TracedKernel
from neuronsim.nki_alias import install_alias, real_nki_installed

__all__ = [
    "Kernel",
    "NkiTensor",
    "Profile",
    "TimelineEntry",
    "TracedKernel",
    "collectives",
    "dtype",
    "install_alias",
    "isa",
    "jit",
    "language",
    "num_programs",
    "program_id",
    "program_ndim",
    "real_nki_installed",
    "simulate",
    "simulate_ranks",
    "typing",
]
