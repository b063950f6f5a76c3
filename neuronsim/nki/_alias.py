"""Making ``import nki`` resolve to ``neuronsim.nki`` when no real NKI is installed.

The alias is plain ``sys.modules`` entries (``nki``, ``nki.language``, ``nki.isa``), put in place by
:func:`install_alias`. Something has to call it before the kernel file's ``import nki`` runs, and
without a ``.pth`` file or ``sitecustomize`` nothing runs at interpreter start-up; so the callers
are ``python -m neuronsim.nki kernel.py`` (which installs it, then runs the file) and the torch
autoload of the emulated device (``NEURON_SIM=1`` + ``import torch``).
"""

from __future__ import annotations

import importlib.machinery
import os
import sys

from neuronsim import env

_SUBMODULES = ("language", "isa")


def real_nki_installed() -> bool:
    """True when an ``nki`` package other than this alias is importable."""
    mod = sys.modules.get("nki")
    if mod is not None:
        return not getattr(mod, "__name__", "").startswith("neuronsim")
    return importlib.machinery.PathFinder.find_spec("nki") is not None


def install_alias(force: bool = False) -> bool:
    """Alias ``nki`` to ``neuronsim.nki`` when ``NEURON_SIM=1`` (or ``force``) and no real nki exists.

    Returns True when the alias is (now) in place. Idempotent; never shadows a real NKI install.
    """
    if not force and os.environ.get(env.NEURON_SIM, "").strip() != "1":
        return False
    if real_nki_installed():
        return False
    import neuronsim.nki as pkg

    sys.modules["nki"] = pkg
    for name in _SUBMODULES:
        sys.modules[f"nki.{name}"] = getattr(pkg, name)
    return True
