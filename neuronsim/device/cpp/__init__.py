"""The device's C++ support library (``neuron_device.cpp``), built at first use and loaded with ctypes.

:func:`install` registers its PrivateUse1 device guard (every logical core a device to autograd,
streams and events) and its ``Tensor.set_data`` across cpu and neuron, before the Python backend
registers anything else. The device layer tells the guard the device count (and again when it
changes); events read a core's simulated clock through a callback.
"""

from __future__ import annotations

import atexit
import ctypes
import threading

from neuronsim.errors import NativeBuildError

_CLOCK = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_int)

_lock = threading.Lock()
_library: ctypes.PyDLL | None = None
_callbacks: tuple = ()  # kept alive as long as the library may call them


def _clock_ns(index: int) -> float:
    from neuronsim.device import clock

    return clock.clock(index).now_ns


def install(device_count: int) -> ctypes.PyDLL:
    """Build (once per torch version, cached) and load the library, and register its guard and
    set_data hooks. Raises :class:`~neuronsim.errors.NativeBuildError` when it cannot."""
    global _library, _callbacks
    with _lock:
        if _library is not None:
            return _library
        from neuronsim.device.cpp import build

        path = build.build()
        try:
            # PyDLL: calls keep the GIL (they are a few instructions), and the library's callbacks
            # into Python take it when torch calls them from its own threads.
            library = ctypes.PyDLL(str(path))
        except OSError as exc:
            raise NativeBuildError(f"loading the device's C++ library {path} failed: {exc}") from exc
        _declare(library)
        callbacks = (_CLOCK(_clock_ns),)
        status = library.neuronsim_install(device_count, *callbacks)
        if status != 0:
            reason = {1: "another PrivateUse1 device guard is already registered",
                      2: "torch's autograd hooks are not loaded"}.get(status, "a C++ exception")
            raise NativeBuildError(f"registering the neuron device guard failed: {reason}")
        _library, _callbacks = library, callbacks
        atexit.register(library.neuronsim_clear_callbacks)  # no calls into a finalizing interpreter
        return library


def _declare(library: ctypes.PyDLL) -> None:
    library.neuronsim_install.argtypes = [ctypes.c_int, _CLOCK]
    library.neuronsim_install.restype = ctypes.c_int
    library.neuronsim_clear_callbacks.argtypes = []
    library.neuronsim_clear_callbacks.restype = None
    library.neuronsim_set_device_count.argtypes = [ctypes.c_int]
    library.neuronsim_set_device_count.restype = None
    library.neuronsim_current_device.argtypes = []
    library.neuronsim_current_device.restype = ctypes.c_int
    library.neuronsim_set_device.argtypes = [ctypes.c_int]
    library.neuronsim_set_device.restype = None
    library.neuronsim_shallow_copy_compatible.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
    library.neuronsim_shallow_copy_compatible.restype = ctypes.c_int


def library() -> ctypes.PyDLL | None:
    return _library
