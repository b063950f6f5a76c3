"""Making ``import nki`` (and ``import torch_neuronx``) resolve to neuronsim when no real one is installed.

:func:`install_alias` puts a finder on ``sys.meta_path`` that answers ``nki``, ``nki.language``
and ``nki.isa`` with the neuronsim modules, and (when no real ``neuronxcc`` is installed) one that
answers the legacy API, ``neuronxcc.nki`` and its submodules, with ``neuronsim.nki.legacy``.
It is lazy: the frontend (and with it the simulator
and Numba) is imported only when a kernel file runs ``import nki``, so the callers can install it
for free. Something has to call it before that import, and without a ``.pth`` file or
``sitecustomize`` nothing runs at interpreter start-up; so the callers are ``python -m
neuronsim.nki kernel.py``, ``neuronsim run``/``profile``, and the torch autoload of the emulated
device (``NEURON_SIM=1`` + ``import torch``).
"""

from __future__ import annotations

import importlib.machinery
import os
import sys

from neuronsim import env

# nki's modules as AWS's kernels import them (``nki.dtype`` is the dtypes module, as in the
# simulator aliasing of AWS's nki-library test harness).
_SUBMODULES = {
    "language": "neuronsim.nki.language",
    "language.dtypes": "neuronsim.nki.language.dtypes",
    "isa": "neuronsim.nki.isa",
    "isa.constants": "neuronsim.nki.isa.constants",
    "typing": "neuronsim.nki.typing",
    "collectives": "neuronsim.nki.collectives",
    "dtype": "neuronsim.nki.language.dtypes",
}
_PACKAGES = frozenset({"nki", "nki.language", "nki.isa"})


def _real_package(name: str) -> bool:
    """True when a package ``name`` other than neuronsim's is imported or importable. A folder of
    that name without ``__init__.py`` (a namespace package: ``examples/nki`` on ``sys.path``) is
    not a real install."""
    mod = sys.modules.get(name)
    if mod is not None:
        ours = getattr(mod, "__name__", "").startswith("neuronsim")
        return not ours and getattr(mod, "__file__", None) is not None
    spec = importlib.machinery.PathFinder.find_spec(name)
    return spec is not None and spec.origin is not None


def real_nki_installed() -> bool:
    """True when an ``nki`` package other than this alias is importable."""
    return _real_package("nki")


class _AliasFinder:
    """Serves ``nki`` and its submodules from ``neuronsim.nki`` (the same module objects)."""

    _TARGETS = {"nki": "neuronsim.nki", **{f"nki.{n}": target for n, target in _SUBMODULES.items()}}
    _PACKAGES = _PACKAGES

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self._TARGETS:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=fullname in self._PACKAGES)

    def create_module(self, spec):
        return importlib.import_module(self._TARGETS[spec.name])

    def exec_module(self, module):
        pass  # already executed as the neuronsim module it is


def alias_installed() -> bool:
    return any(type(f) is _AliasFinder for f in sys.meta_path)


class _LegacyFinder(_AliasFinder):
    """Serves the legacy API, ``neuronxcc.nki`` and its submodules, from ``neuronsim.nki.legacy``."""

    _TARGETS = {
        "neuronxcc": "neuronsim.nki.legacy.root",
        "neuronxcc.nki": "neuronsim.nki.legacy",
        **{f"neuronxcc.nki.{n}": f"neuronsim.nki.legacy.{n}"
           for n in ("language", "isa", "typing", "compiler")},
    }
    _PACKAGES = frozenset({"neuronxcc", "neuronxcc.nki"})


def real_neuronxcc_installed() -> bool:
    """True when a ``neuronxcc`` package (the Neuron compiler, with the legacy NKI) is importable."""
    return _real_package("neuronxcc")


def install_alias(force: bool = False) -> bool:
    """Alias ``nki`` to ``neuronsim.nki`` when ``NEURON_SIM=1`` (or ``force``) and no real nki exists.

    Returns True when the alias is (now) in place. Idempotent; never shadows a real NKI install.
    The finder goes first on ``sys.meta_path``: after ``nki`` is ``neuronsim.nki`` (whose
    ``__path__`` is the frontend's folder), the path finder would load ``nki.isa`` again as a copy.
    """
    if not force and os.environ.get(env.NEURON_SIM, "").strip() != "1":
        return False
    if real_nki_installed():
        return False
    if not alias_installed():
        sys.meta_path.insert(0, _AliasFinder())
    if not real_neuronxcc_installed() and not any(type(f) is _LegacyFinder for f in sys.meta_path):
        sys.meta_path.insert(0, _LegacyFinder())
    return True


class _TorchNeuronxFinder(_AliasFinder):
    """Serves ``torch_neuronx`` (and ``torch_neuronx.profiling``) from ``neuronsim.torch_neuronx``."""

    _TARGETS = {"torch_neuronx": "neuronsim.torch_neuronx",
                "torch_neuronx.profiling": "neuronsim.torch_neuronx.profiling"}
    _PACKAGES = frozenset({"torch_neuronx"})


def real_torch_neuronx_installed() -> bool:
    """True when a ``torch_neuronx`` package other than neuronsim's is importable."""
    return _real_package("torch_neuronx")


def install_torch_neuronx_alias(force: bool = False) -> bool:
    """Alias ``torch_neuronx`` to ``neuronsim.torch_neuronx`` under the same rule as ``nki``:
    ``NEURON_SIM=1`` (or ``force``) and no real ``torch_neuronx`` installed. Returns True when the
    alias is (now) in place. Lazy like the ``nki`` alias: nothing is imported until the import."""
    if not force and os.environ.get(env.NEURON_SIM, "").strip() != "1":
        return False
    if real_torch_neuronx_installed():
        return False
    if not any(isinstance(f, _TorchNeuronxFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchNeuronxFinder())
    return True
