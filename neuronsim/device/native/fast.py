"""The cached native op in C++ (``cpp/neuron_ops.cpp``): which ops it serves, the launch records
Python publishes to it, and the charges it queues.

For each native op with a kernel on the device's own dispatch key, the C++ library's kernel sits on
PrivateUse1 and the Python chokepoint on PrivateUse2. The C++ kernel keys a call by its arguments;
a key it knows runs in C++; any other call it hands to the chokepoint with the same stack. The
chokepoint's Entry, having run such a call, publishes what the call needs here (:func:`publish`,
:func:`publish_host`), and the key is known from then on:

* exact numerics: the launch record (outputs to allocate, where each HBM slot's address comes from,
  the calling thread's core bases, the Program's compiled loop);
* fast numerics: that ATen-CPU computes it on host views (``host.py``'s short path) and whether its
  results are fresh tensors to adopt, ``self`` or nothing.

Records are kept per options value (a slot, the first word of every key). Hits are taken while one
set of options is in effect for every thread — the environment's, or those of the one open
``options()`` scope (threads that opened none read it) — and not for the reference executor; with
two scopes open, every call goes through Python.

What a hit owes Python — the clock charge and the native-op count — is queued in C++ and drained
(:func:`drain`) before any clock or count is charged or read (``clock._drained``), so the
profiler, ``torch.neuron``'s op tracking and the clocks see each call in order, as if it had charged
itself. A run that stopped (an index out of bounds, a kernel that raised) is handed to Python with
the stop, and the chokepoint's kernel raises the Python path's error (:func:`raise_stopped`).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import threading
import weakref

import numpy as np
import torch

from neuronsim.device import clock, tracking

sim_options = importlib.import_module("neuronsim.options")  # (``neuronsim.options`` is also a function)

_KEYWORD = 10_000  # entry.py: positions from here on are keyword arguments
_KINDS = {"nothing": 0, "self": 1, "each": 2, "list": 3}

_lib = None
_records: list = []  # published record -> (clock record, op name, entry)
_keep: list = []  # what published records point into: (itab, ftab, loop overload)
_lock = threading.Lock()
_drain_lock = threading.Lock()
_buffer = (ctypes.c_int64 * (3 * 4096))()
_cores: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # CoreMemory -> token
_cores_kept: list = []  # cores whose bases a record holds (kept alive as long as it may run)
_loops: dict = {}  # id of a run_encoded overload (kept in _keep) -> its native address, or 0 (a
# calling convention not understood)
pending = None  # ctypes views set by install(): queued charges,
publishable = None  # calls handed to Python that may publish,
stops = None  # and runs that stopped
_armed = None  # the options records are published and run under now (None: no hits)
_slots: dict = {}  # options -> their records' slot (C++ keys start with it)
_paused = 0  # disabled() scopes open
_CORES_KEPT = 8  # cores (threads) whose bases records hold
_next_token = 0
_entries_set = False


def install(registrations: list[tuple[str, str, bool]]) -> set[str]:
    """Register the C++ kernel of each (name for the library, op name, writes its first argument);
    returns the op names it took (their Python kernels go on PrivateUse2). Nothing if the cached-op
    library is not built yet (a process on a cold cache: it is built after the process exits)."""
    global _lib, pending, publishable, stops
    try:
        from neuronsim.device import cpp

        lib = cpp.load_ops()
    except Exception:  # (a missing compiler was reported by the device guard's install already)
        return set()
    if lib is None:
        return set()
    _declare(lib)
    _lib = lib
    pending = ctypes.c_int64.from_address(lib.neuronsim_fast_pending_address())
    publishable = ctypes.c_int64.from_address(lib.neuronsim_fast_publishable_address())
    stops = ctypes.c_int64.from_address(lib.neuronsim_fast_stops_address())
    taken = set()
    for name, op_name, writes in registrations:
        if lib.neuronsim_fast_register(name.encode(), op_name.encode(), int(writes)) == 0:
            taken.add(op_name)
    clock.queued, clock.drain = pending, drain
    from neuronsim.device import dispatch

    dispatch.on_change = clear
    sim_options.listeners.append(_options_changing)
    _options_changing(False)
    return taken


def _declare(lib) -> None:
    p, i64, i32, c = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_char_p
    i64p = ctypes.POINTER(ctypes.c_int64)
    for name, args, res in (
        ("neuronsim_fast_register", [c, c, ctypes.c_int], ctypes.c_int),
        ("neuronsim_fast_set_slot", [i64], None),
        ("neuronsim_fast_publish_host", [c, i64p, i64p, i64, i64, i32], ctypes.c_int),
        ("neuronsim_fast_clear", [], None),
        ("neuronsim_fast_set_memory", [ctypes.c_int, p, i64], None),
        ("neuronsim_fast_set_entries", [p, i64], None),
        ("neuronsim_fast_pending_address", [], p),
        ("neuronsim_fast_publishable_address", [], p),
        ("neuronsim_fast_stops_address", [], p),
        ("neuronsim_fast_drain", [i64p, i64], i64),
        ("neuronsim_fast_take_stop", [i64p, i64], i64),
        ("neuronsim_fast_hits", [], i64),
        ("neuronsim_fast_set_queue_limit", [i64], None),
        ("neuronsim_fast_publish", [c, i64p, i64, p, p, i64, i64, p, i64, i64p, i64, i64p, i64, i64p,
                                    i64, i64p, i64, i32, i32, i64, i64p, i64], ctypes.c_int),
    ):
        getattr(lib, name).argtypes = args
        getattr(lib, name).restype = res


def active() -> bool:
    return _lib is not None


QUEUE_LIMIT = 1 << 16  # queued calls (past it, calls go through Python, whose charge drains them)


def set_queue_limit(limit: int = QUEUE_LIMIT) -> None:
    _lib.neuronsim_fast_set_queue_limit(limit)


def hits() -> int:
    """Calls the C++ kernel ran itself so far (0 when it is not in use)."""
    return _lib.neuronsim_fast_hits() if _lib is not None else 0


def _in_effect():
    """The options every thread runs under, if one set is (none, or one ``options()`` scope, open:
    threads that opened no scope read the innermost open one), else None; None also for the
    reference executor (it runs no compiled loop)."""
    scopes = sim_options._open_scopes
    if len(scopes) > 1:
        return None
    opts = scopes[0] if scopes else sim_options.environment_default()
    return None if opts.executor == "reference" else opts


def _options_changing(before: bool) -> None:
    """Stand down (queued charges drained under the options they were made in) ahead of a change
    of options; after it, take hits under the new options' slot (records are kept per options)."""
    global _armed
    if before:
        _armed = None
        _lib.neuronsim_fast_set_slot(0)
        drain()
        return
    opts = _in_effect()
    if opts is not None and not _paused:
        from neuronsim.device import settings

        slot = _slots.setdefault(opts, len(_slots) + 1)
        _armed = opts
        _lib.neuronsim_fast_set_memory(-1, None, settings.hbm_capacity_bytes())  # (these options' HBM)
        _lib.neuronsim_fast_set_slot(slot)


def clear() -> None:
    """Forget every published record (the next call of each signature goes through Python)."""
    if _lib is not None:
        drain()
        _lib.neuronsim_fast_clear()


@contextlib.contextmanager
def disabled():
    """No C++ hits inside (every call runs the Python path): for tests comparing the two."""
    global _paused
    _options_changing(True)
    _paused += 1
    try:
        yield
    finally:
        _paused -= 1
        _options_changing(True)
        _options_changing(False)


def drain() -> None:
    """Charge the queued calls to their clocks and count them, in the order they ran."""
    if pending is None or not pending.value:
        return
    with _drain_lock:
        buffer = _buffer
        while True:
            n = _lib.neuronsim_fast_drain(buffer, 4096)
            if not n:
                return
            values = buffer[: 3 * n]
            for k in range(0, 3 * n, 3):
                record, name, _ = _records[values[k]]
                clock.clock(values[k + 1]).charge_queued(record, values[k + 2])
                tracking.record_queued(name)


def python_kernel(op: torch._ops.OpOverload, execute):
    """The chokepoint's kernel of ``op`` on PrivateUse2, where the C++ kernel hands calls over."""

    def kernel(*args, **kwargs):
        if stops.value:
            raise_stopped()
        return execute(op, *args, **kwargs)

    return kernel


def raise_stopped() -> None:
    """Raise the error of this thread's stopped C++ run, if it has one (as the Python path would)."""
    size = 1 << 12
    buffer = (ctypes.c_int64 * size)()
    n = _lib.neuronsim_fast_take_stop(buffer, size)
    if not n:
        return
    from neuronsim.device.dispatch import as_torch_error
    from neuronsim.errors import KernelFaultError
    from neuronsim.sim import execute_numba

    _, _, entry = _records[buffer[0]]
    stopped = buffer[1]
    if stopped < 0:
        exc = KernelFaultError(f"{entry.name}: the compiled executor loop failed")
    else:
        bases = np.array(buffer[2:n], dtype=np.int64)
        exc = execute_numba.stop_error(entry.program, stopped, bases)
    raise as_torch_error(exc) from exc


# ---- publishing -----------------------------------------------------------------------------------

def publish(entry, inputs: list, index: int, opts) -> None:
    """Offer ``entry``'s launch record for the call just run (``inputs``, on device ``index``, under
    ``opts``) to the C++ kernel that handed the call over, if one did. Call only after a successful
    run of the compiled loop."""
    if opts is not _armed:
        return
    described = entry._fast
    if described is None:
        described = entry._fast = _describe(entry)
    if not described:
        return
    py_index, fields = described
    from neuronsim.device import hbm, settings
    from neuronsim.sim.memory.state import core_memory

    core = core_memory(entry.prepared.chip)
    template = entry.base_template()
    with _lock:
        token = _cores.get(core)
        if token is None:
            if len(_cores_kept) >= _CORES_KEPT:  # threads come and go: start afresh
                _lib.neuronsim_fast_clear()
                _cores.clear()
                _cores_kept.clear()
            global _next_token
            _next_token += 1
            token = _cores[core] = _next_token
            _cores_kept.append(core)  # (records hold its addresses: it stays while they may run)
    _lib.neuronsim_fast_set_memory(index, hbm.ledger(index).handle, settings.hbm_capacity_bytes())
    pointers = (ctypes.c_int64 * len(inputs))(*(t.data_ptr() for t in inputs))
    _lib.neuronsim_fast_publish(entry.name.encode(), pointers, py_index, *fields, token,
                                template.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), len(template))


def publish_host(entry, first, index: int, opts) -> None:
    """``publish`` for a call fast numerics computed with ATen-CPU on host views (``first``: the
    entry's first input, whose data pointer identifies the call)."""
    if opts is not _armed:
        return
    found = entry._fast_host
    if found is None:
        found = entry._fast_host = _describe_host(entry)
    if found is False:
        return
    py_index, positions, result = found
    from neuronsim.device import hbm, settings

    _lib.neuronsim_fast_set_memory(index, hbm.ledger(index).handle, settings.hbm_capacity_bytes())
    pointer = (ctypes.c_int64 * 1)(first.data_ptr())
    _lib.neuronsim_fast_publish_host(entry.name.encode(), pointer, positions, 1, py_index, result)


_HOST_RESULTS = {"fresh": 0, "fresh_many": 0, "self": 1, "none": 2}


def _describe_host(entry):
    result = _HOST_RESULTS.get(entry.plan.fast_path)
    if result is None or entry._check is not None or entry.out_positions:
        return False
    names = [a.name for a in entry.op._schema.arguments]
    pos, name, element = entry.input_positions[0]
    position = pos if pos < _KEYWORD else names.index(name) if name in names else -1
    if position < 0:
        return False
    positions = (ctypes.c_int64 * 2)(position, -1 if element is None else element)
    with _lock:
        py_index = len(_records)
        _records.append((entry._record, entry.op._name, entry))
        _keep.append(positions)
    return py_index, positions, result


def _describe(entry):
    """(record index, the publish call's fixed arguments), or False for an entry the C++ kernel
    cannot run (per-call checks, runtime scalars, results made in Python, ``out=``...)."""
    from neuronsim.device import memory

    if entry.runtime or entry._check is not None or entry.result is not None or entry.seeded \
            or entry.out_positions:
        return False
    prep = entry.prepared
    itab, ftab = prep.itab, prep.ftab
    if not (_c_array(itab, np.int64, 2) and _c_array(ftab, np.float64, 2) and itab.shape[0] == ftab.shape[0]):
        return False
    template = entry.base_template()
    if not _c_array(template, np.int64, 1):
        return False
    run = _loop_address(itab, ftab, template)
    if not run:
        return None  # not compiled yet: ask again at the next run
    schema = entry.op._schema
    names = [a.name for a in schema.arguments]
    inputs = []
    for pos, name, element in entry.input_positions:
        position = pos if pos < _KEYWORD else names.index(name) if name in names else -1
        if position < 0:
            return False
        inputs += [position, -1 if element is None else element]
    slots = []
    for tid, role, i in entry._slots:
        if role not in (0, 1):
            return False
        slots += [tid, role, i]
    numbers = memory._scalar_types()
    outputs = []
    fresh = () if entry.written else entry.output_specs  # (an in-place op writes its first inputs)
    for (size, stride, dtype), nbytes in zip(fresh, entry.output_bytes, strict=False):
        if dtype not in numbers or len(size) != len(stride):
            return False
        outputs += [numbers[dtype], nbytes, len(size), *size, *stride]
    if entry.written:
        returns = _KINDS["self"] if entry.plan.returns else _KINDS["nothing"]
    elif entry.returns_list:
        returns = _KINDS["list"]
    elif len(entry.output_specs) == len(schema.returns):
        returns = _KINDS["each"]
    else:
        return False
    opcodes = np.unique(itab[:, 0]).astype(np.int64)
    arrays = [np.array(a, dtype=np.int64) for a in (opcodes, slots, inputs, outputs)]
    ptr = ctypes.POINTER(ctypes.c_int64)
    with _lock:
        py_index = len(_records)
        _records.append((entry._record, entry.op._name, entry))
        _keep.append((itab, ftab, arrays))
    fields = (run, itab.ctypes.data, itab.shape[0], itab.shape[1], ftab.ctypes.data, ftab.shape[1],
              arrays[0].ctypes.data_as(ptr), len(opcodes), arrays[1].ctypes.data_as(ptr), len(slots) // 3,
              arrays[2].ctypes.data_as(ptr), len(inputs) // 2, arrays[3].ctypes.data_as(ptr),
              len(fresh), entry.written, returns)
    return py_index, fields


def _c_array(a, dtype, ndim: int) -> bool:
    return isinstance(a, np.ndarray) and a.dtype == dtype and a.ndim == ndim and a.flags.c_contiguous


# run_encoded's arguments as Numba passes them to its native function (each array's data model
# members, flattened), after the return and exception slots: what neuron_ops.cpp's RunFn declares.
_ARRAY_2D = ["ptr", "ptr", "i64", "i64", "ptr", "i64", "i64", "i64", "i64"]
_ARRAY_1D = ["ptr", "ptr", "i64", "i64", "ptr", "i64", "i64"]
_EXPECTED = ["ptr", "ptr", *_ARRAY_2D, *_ARRAY_2D, *_ARRAY_1D, *_ARRAY_1D, "i64"]


def _loop_address(itab, ftab, bases) -> int:
    """The native address of the compiled loop for these arrays (0 if not compiled, or if its
    function type is not the one the C++ side calls)."""
    from neuronsim.sim import execute_numba

    global _entries_set
    if not _entries_set:  # (here, not at install: importing the executor loads Numba)
        _lib.neuronsim_fast_set_entries(execute_numba.ENTRIES.ctypes.data, len(execute_numba.ENTRIES))
        _entries_set = True
    loop = execute_numba.run_encoded
    sig = tuple(loop.typeof_pyval(a) for a in (itab, ftab, bases, execute_numba.ENTRIES, 0))
    found = loop.overloads.get(sig)
    if found is None:
        return 0
    address = _loops.get(id(found))
    if address is None:
        address = 0
        try:
            fnty = found.target_context.call_conv.get_function_type(found.signature.return_type,
                                                                    found.signature.args)
            kinds = ["ptr" if str(t).endswith("*") or str(t) == "ptr" else str(t) for t in fnty.args]
            if str(fnty.return_type) == "i32" and kinds == _EXPECTED:
                address = found.library.get_pointer_to_function(found.fndesc.llvm_func_name)
        except Exception:
            address = 0
        _loops[id(found)] = address
        _keep.append(found)  # (its machine code stays loaded while a record may call it)
    return address
