"""The device's C++ libraries, built at first use (``build.py``) and loaded with ctypes: the core
library (``neuron_device.cpp``, ``neuron_memory.cpp``) and the cached native op's
(``neuron_keys.cpp``, ``neuron_host.cpp``, ``neuron_ops.cpp``; :func:`load_ops`, which a process
uses if an earlier one had it built: ``background.py``).

:func:`install` registers its PrivateUse1 device guard (every logical core a device to autograd,
streams and events) and its ``Tensor.set_data`` across cpu and neuron, before the Python backend
registers anything else. The device layer tells the guard the device count (and again when it
changes); events read a core's simulated clock through a callback. :func:`load` only loads it: the
HBM ledger's counters and fresh device tensors (``memory.py``, ``hbm.py``) need nothing registered.
"""

from __future__ import annotations

import atexit
import ctypes
import threading

from neuronsim.errors import NativeBuildError

_CLOCK = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_int)

_lock = threading.Lock()
_library: ctypes.PyDLL | None = None  # loaded and installed
_loaded: ctypes.PyDLL | None = None  # loaded
_ops: ctypes.PyDLL | bool | None = None  # the cached-op library; False: not in the cache
_callbacks: tuple = ()  # kept alive as long as the library may call them


def _clock_ns(index: int) -> float:
    from neuronsim.device import clock

    return clock.clock(index).now_ns


def load() -> ctypes.PyDLL:
    """Build (once per torch version, cached) and load the library; nothing is registered. Raises
    :class:`~neuronsim.errors.NativeBuildError` when it cannot."""
    global _loaded
    with _lock:
        if _loaded is None:
            from neuronsim.device.cpp import build

            path = build.build()
            try:
                # PyDLL: calls keep the GIL (they are a few instructions), and the library's callbacks
                # into Python take it when torch calls them from its own threads.
                library = ctypes.PyDLL(str(path))
            except OSError as exc:
                raise NativeBuildError(f"loading the device's C++ library {path} failed: {exc}") from exc
            _declare(library)
            _loaded = library
        return _loaded


def load_ops() -> ctypes.PyDLL | None:
    """The cached-op library, loaded, if it is in the cache (after :func:`load`: it links the core
    library); else None, and it is built after this process exits (``background.py``). Raises
    :class:`~neuronsim.errors.NativeBuildError` if the core library cannot be built or loaded."""
    global _ops
    load()
    with _lock:
        if _ops is None:
            from neuronsim.device.cpp import background, build

            tc = build.toolchain()
            path = build.ops_path(tc)
            _ops = False
            if path.exists():
                try:
                    _ops = ctypes.PyDLL(str(path))
                except OSError as exc:
                    raise NativeBuildError(f"loading the device's C++ library {path} failed: {exc}") from exc
            else:
                background.schedule(tc)
        return _ops or None


def install(device_count: int) -> ctypes.PyDLL:
    """:func:`load`, then register the library's guard and set_data hooks. Raises
    :class:`~neuronsim.errors.NativeBuildError` when it cannot."""
    global _library, _callbacks
    library = load()
    with _lock:
        if _library is not None:
            return _library
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
    pointer, i64, obj = ctypes.c_void_p, ctypes.c_int64, ctypes.py_object
    library.neuronsim_ledger_new.argtypes = []
    library.neuronsim_ledger_new.restype = pointer
    library.neuronsim_ledger_charge.argtypes = [pointer, i64, i64]
    library.neuronsim_ledger_charge.restype = ctypes.c_int
    library.neuronsim_ledger_release.argtypes = [pointer, i64]
    library.neuronsim_ledger_release.restype = None
    library.neuronsim_ledger_current.argtypes = [pointer]
    library.neuronsim_ledger_current.restype = i64
    library.neuronsim_ledger_read.argtypes = [pointer, ctypes.POINTER(i64)]
    library.neuronsim_ledger_read.restype = None
    for name in ("neuronsim_ledger_reset_peak", "neuronsim_ledger_reset_accumulated"):
        getattr(library, name).argtypes = [pointer]
        getattr(library, name).restype = None
    library.neuronsim_scalar_type_name.argtypes = [ctypes.c_int]
    library.neuronsim_scalar_type_name.restype = ctypes.c_char_p
    library.neuronsim_empty.argtypes = [pointer, i64, ctypes.c_int, ctypes.c_int, obj, obj, i64]
    library.neuronsim_empty.restype = obj


def library() -> ctypes.PyDLL | None:
    return _library
