"""The device RNG: one CPU ``torch.Generator`` per logical core stands for its default generator.

Random ops compute on host aliases, so a host generator gives the device stream: ops with a
``generator`` argument get it passed in, seeded ops without one (``native_dropout``) run with the
host default generator swapped to the device state. ``torch.manual_seed`` reaches
:func:`manual_seed_all` through the device module, so seeded scripts repeat exactly. Native random
kernels (``kernels/dropout.py``) take a 32-bit seed per call from the same generator (:func:`draw_seed`).
(``torch.Generator(device="neuron")`` needs a C++ hook and is unavailable, as on TorchNeuron.)
"""

from __future__ import annotations

import contextlib
import threading

import torch

from neuronsim.device import state

_generators: dict[int, torch.Generator] = {}
_lock = threading.Lock()
_DEFAULT_SEED = 67280421310721  # torch's default CPU seed, so an unseeded device starts like the CPU
_seed_for_new = _DEFAULT_SEED  # what the last *_all seeding gave every device, made later too


def generator(index: int) -> torch.Generator:
    found = _generators.get(index)
    if found is None:
        with _lock:
            found = _generators.get(index)
            if found is None:
                found = torch.Generator(device="cpu")
                found.manual_seed(_seed_for_new)
                _generators[index] = found
    return found


@contextlib.contextmanager
def as_host_default(index: int):
    """Run host ops that draw from the default CPU generator on the device's stream instead."""
    device_gen = generator(index)
    host_gen = torch.default_generator
    with _lock:
        saved = host_gen.get_state()
        host_gen.set_state(device_gen.get_state())
        try:
            yield
        finally:
            device_gen.set_state(host_gen.get_state())
            host_gen.set_state(saved)


def _index(device) -> int:
    return state.device_index(device)


def manual_seed(seed: int) -> None:
    generator(state.current_device()).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every device: those in use now, and the others when they are first used (an instance
    has 64 logical cores; a process uses one or two)."""
    global _seed_for_new
    with _lock:
        _seed_for_new = int(seed)
        generators = list(_generators.values())
    for gen in generators:
        gen.manual_seed(int(seed))


def seed() -> None:
    generator(state.current_device()).seed()


def seed_all() -> None:
    manual_seed_all(torch.Generator().seed())


def initial_seed() -> int:
    return generator(state.current_device()).initial_seed()


def get_rng_state(device="neuron") -> torch.Tensor:
    return generator(_index(device)).get_state()


def set_rng_state(new_state: torch.Tensor, device="neuron") -> None:
    generator(_index(device)).set_state(new_state.cpu() if new_state.device.type != "cpu" else new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [generator(i).get_state() for i in range(state.device_count())]


def set_rng_state_all(new_states) -> None:
    for index, s in enumerate(new_states):
        generator(index).set_state(s)


def draw_seed(index: int) -> int:
    """A 32-bit seed for one call of a native random kernel, drawn from core ``index``'s generator:
    ``torch.manual_seed`` then repeats the kernels' random values exactly, and each call advances
    the stream (successive calls differ)."""
    gen = generator(index)  # outside the lock, which creating the generator takes
    with _lock:  # as_host_default swaps this generator's state in and out under the same lock
        return int(torch.randint(0, 2**32, (1,), generator=gen, dtype=torch.int64))
