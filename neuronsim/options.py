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
from dataclasses import dataclass
from typing import Iterator

from neuronsim import env
from neuronsim.errors import OptionError

NUMERICS = ("exact", "fast")
EXECUTORS = ("numba", "reference")
# nan: new SBUF/PSUM bytes are 0xFF (NaN for every float dtype, -1 for ints), as AWS's simulator
# does to expose uninitialized reads; zero: zero-filled; error: reads of never-written bytes raise.
UNINITIALIZED = ("nan", "zero", "error")


@dataclass(frozen=True)
class SimOptions:
    chip: str = "trn2"
    numerics: str = "exact"
    executor: str = "numba"
    uninitialized_memory: str = "nan"
    seed: int = 0

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
}


def from_environment(environ: os._Environ | dict | None = None) -> SimOptions:
    environ = os.environ if environ is None else environ
    changes: dict = {}
    for var, name in _ENV_FIELDS.items():
        raw = environ.get(var)
        if raw is None or raw == "":
            continue
        if name == "seed":
            try:
                changes[name] = int(raw)
            except ValueError:
                raise OptionError(f"{var}={raw!r} must be an integer") from None
        else:
            changes[name] = raw.strip().lower() if name != "chip" else raw.strip()
    try:
        return SimOptions(**changes)
    except OptionError as exc:
        raise OptionError(f"{exc} (from the environment)") from None


_current: contextvars.ContextVar[SimOptions | None] = contextvars.ContextVar("neuronsim_options", default=None)


def current() -> SimOptions:
    opts = _current.get()
    if opts is None:
        opts = from_environment()
        _current.set(opts)
    return opts


@contextlib.contextmanager
def options(**changes) -> Iterator[SimOptions]:
    """Scope option changes: ``with options(numerics="fast"): ...``."""
    new = current().replace(**changes)
    token = _current.set(new)
    try:
        yield new
    finally:
        _current.reset(token)
