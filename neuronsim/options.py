"""Simulation behaviours as named options in one frozen object.

Built from the environment in one place (:func:`from_environment`), validated on creation, and
scoped with :func:`options` (a context manager)::

    with neuronsim.options(numerics="fast", chip="trn3"):
        ...
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass

from neuronsim import env, nki_releases
from neuronsim.errors import OptionError

NUMERICS = ("exact", "fast")
# tiered: Numba machine code, and the reference executor for what is still compiling in the background
# (sim/tiers.py); numba: machine code only (a cold cache compiles in place first); reference: numpy.
EXECUTORS = ("tiered", "numba", "reference")
# nan: new SBUF/PSUM bytes are 0xFF (NaN for every float dtype, -1 for ints), as AWS's simulator
# does to expose uninitialized reads; zero: zero-filled; error: reads of never-written bytes raise.
UNINITIALIZED = ("nan", "zero", "error")


@dataclass(frozen=True)
class SimOptions:
    chip: str = "trn2"
    numerics: str = "exact"
    executor: str = "tiered"
    uninitialized_memory: str = "nan"
    seed: int = 0
    # Simulated HBM bytes of one logical core; None = the chip's figure (small values for tests).
    hbm_bytes: int | None = None
    # As on TorchNeuron: float64/int64 device ops compute in 32 bits and cast back.
    cast_64bit: bool = True
    # The NKI release whose semantics kernels get where releases differ (neuronsim/nki_releases.py).
    nki_version: str = nki_releases.CURRENT

    def __post_init__(self) -> None:
        for name, allowed in (
            ("numerics", NUMERICS),
            ("executor", EXECUTORS),
            ("uninitialized_memory", UNINITIALIZED),
        ):
            value = getattr(self, name)
            if value not in allowed:
                raise OptionError(f"option {name}={value!r} is not one of {allowed}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise OptionError(f"option seed={self.seed!r} must be an integer")
        if self.hbm_bytes is not None and (
            not isinstance(self.hbm_bytes, int) or isinstance(self.hbm_bytes, bool) or self.hbm_bytes < 0
        ):
            raise OptionError(f"option hbm_bytes={self.hbm_bytes!r} must be a non-negative integer or None")
        if not isinstance(self.cast_64bit, bool):
            raise OptionError(f"option cast_64bit={self.cast_64bit!r} must be True or False")
        try:
            object.__setattr__(self, "nki_version", nki_releases.normalize(self.nki_version))
        except ValueError as exc:
            raise OptionError(f"option nki_version: {exc}") from None
        if not isinstance(self.chip, str) or not self.chip:
            raise OptionError(f"option chip={self.chip!r} must be a chip name or a path to a chip file")

    def replace(self, **changes) -> SimOptions:
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise OptionError(f"unknown option(s) {sorted(unknown)}")
        return dataclasses.replace(self, **changes)


_ENV_FIELDS = {
    env.NEURON_SIM_CHIP: "chip",
    env.NEURON_SIM_NUMERICS: "numerics",
    env.NEURON_SIM_EXECUTOR: "executor",
    env.NEURON_SIM_UNINITIALIZED: "uninitialized_memory",
    env.NEURON_SIM_SEED: "seed",
    env.NEURON_SIM_HBM_BYTES: "hbm_bytes",
    env.NEURON_SIM_CAST_64BIT: "cast_64bit",
    env.NEURON_SIM_NKI_VERSION: "nki_version",
}
_INT_FIELDS = ("seed", "hbm_bytes")
_BOOL_WORDS = {"1": True, "true": True, "yes": True, "on": True}
_BOOL_WORDS |= {"0": False, "false": False, "no": False, "off": False}


def from_environment(environ: os._Environ | dict | None = None) -> SimOptions:
    environ = os.environ if environ is None else environ
    changes: dict = {}
    for var, name in _ENV_FIELDS.items():
        raw = environ.get(var)
        if raw is None or raw == "":
            continue
        if name in _INT_FIELDS:
            try:
                changes[name] = int(raw)
            except ValueError:
                raise OptionError(f"{var}={raw!r} must be an integer") from None
        elif name == "cast_64bit":
            word = raw.strip().lower()
            if word not in _BOOL_WORDS:
                raise OptionError(f"{var}={raw!r} must be one of {sorted(_BOOL_WORDS)}")
            changes[name] = _BOOL_WORDS[word]
        else:
            changes[name] = raw.strip().lower() if name not in ("chip", "nki_version") else raw.strip()
    try:
        return SimOptions(**changes)
    except OptionError as exc:
        raise OptionError(f"{exc} (from the environment)") from None


_current: contextvars.ContextVar[SimOptions | None] = contextvars.ContextVar(
    "neuronsim_options", default=None)


_environment_default: SimOptions | None = None

# The options of the innermost ``options()`` scope open in any thread. A thread torch creates for
# C++ callbacks (the autograd device thread) starts every callback in a fresh context; it runs
# work the scope's thread started (``loss.backward()`` inside the scope), so it reads this.
_open_scopes: list[SimOptions] = []


def current() -> SimOptions:
    opts = _current.get()
    if opts is None:
        if _open_scopes:
            return _open_scopes[-1]
        global _environment_default
        if _environment_default is None:  # read the environment once per process, not per call
            _environment_default = from_environment()
        opts = _environment_default  # not cached in the context: a thread's context can outlive a scope
    return opts


def reload_environment() -> SimOptions:
    """Read the environment again: for tools that set ``NEURON_SIM_*`` variables in-process (the
    pytest plugin) after something may already have read them."""
    global _environment_default
    _notify(before=True)
    _environment_default = from_environment()
    _notify(before=False)
    return _environment_default


# Called around every change of what ``current()`` may return (a scope opening or closing, the
# environment read again), with before=True just ahead of it and before=False just after: the
# device's C++ op cache, which serves only the environment's options, stands down and back.
listeners: list = []


def _notify(before: bool) -> None:
    for listener in listeners:
        listener(before)


def environment_default() -> SimOptions:
    """The options outside every scope (the environment's)."""
    global _environment_default
    if _environment_default is None:
        _environment_default = from_environment()
    return _environment_default


def scoped() -> bool:
    """Whether an ``options()`` scope is open in any thread."""
    return bool(_open_scopes)


@contextlib.contextmanager
def options(**changes) -> Iterator[SimOptions]:
    """Scope option changes: ``with options(numerics="fast"): ...`` (backward passes started
    inside the scope see them too)."""
    new = current().replace(**changes)
    _notify(before=True)
    token = _current.set(new)
    _open_scopes.append(new)
    _notify(before=False)
    try:
        yield new
    finally:
        _notify(before=True)
        _open_scopes.remove(new)
        _current.reset(token)
        _notify(before=False)
