"""The tiered executor (sim/tiers.py): a Program gives the same bytes and cycle counts whether its
instructions ran as machine code or, while their kernels compile, on the reference executor (and
its schedule from the scheduler's Python source); a kernel that raises is an error naming the
instruction; a cold process runs at once, its worker (started once it has run interpreted long
enough, or at exit) fills the cache, and the next process loads what the worker compiled."""

from __future__ import annotations

import fcntl
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from numba import njit
from opcode_generators import random_program
from program_fuzz import random_inputs, run_snapshot

import neuronsim
from neuronsim import sim
from neuronsim.errors import KernelFaultError
from neuronsim.sim import ProgramBuilder, execute_numba, kernel_bundle, tiers
from neuronsim.sim._numba_cache import _IN_USE
from neuronsim.sim.ir import Opcode, Program

_ROOT = Path(neuronsim.__file__).resolve().parent.parent


class _Cold:
    """This process as if none of ``units`` were compiled yet and the worker were compiling them:
    their uses take the interpreted tier (no worker is started: they are pending already, and
    however long they run interpreted, it is not due)."""

    def __init__(self, units):
        self.units = set(units) | {"loop", "branch_loop", "scheduler"}

    def __enter__(self):
        self.start_after = tiers.START_AFTER_CPU_S
        tiers.START_AFTER_CPU_S = float("inf")
        self.entries = execute_numba.ENTRIES.copy()
        self.state = dict(tiers._units.state)
        self.seconds = dict(tiers._units.seconds)
        self.loop = dict(execute_numba.run_encoded.overloads)
        self.branch_loop = dict(execute_numba.run_branching.overloads)
        self.scheduler = dict(sim.schedule.schedule_arrays.overloads)
        execute_numba.ENTRIES[:] = 0
        execute_numba.run_encoded.overloads.clear()
        execute_numba.run_branching.overloads.clear()
        sim.schedule.schedule_arrays.overloads.clear()
        for unit in self.units:
            tiers._units.state[unit] = "pending"
        return self

    def interpreted_seconds(self, unit: str) -> float:
        return tiers._units.seconds.get(unit, 0.0) - self.seconds.get(unit, 0.0)

    def __exit__(self, *exc):
        execute_numba.ENTRIES[:] = self.entries
        execute_numba.run_encoded.overloads.update(self.loop)
        execute_numba.run_branching.overloads.update(self.branch_loop)
        sim.schedule.schedule_arrays.overloads.update(self.scheduler)
        tiers._units.state.clear()
        tiers._units.state.update(self.state)
        tiers.START_AFTER_CPU_S = self.start_after


def _fresh(program: Program) -> Program:
    """The same instructions as a new Program object (``prepare`` caches per object)."""
    return Program(program.name, program.tensors, program.instructions)


def _same_on_every_tier(program: Program, seed: int) -> None:
    inputs = random_inputs(program, seed)
    compiled = run_snapshot(program, inputs, "numba")
    def run(executor: str):
        arrays = {name: a.copy() for name, a in inputs.items()}
        return sim.run(_fresh(program), arrays, "trn2", executor=executor, uninitialized_memory="zero")

    compiled_result = run("numba")
    opcodes = {ins.opcode.name.lower() for ins in program.instructions}
    cold_program = _fresh(program)
    with _Cold(opcodes) as cold:
        interpreted = run_snapshot(cold_program, inputs, "tiered")
        cold_result = run("tiered")
        assert not execute_numba.loaded_opcodes(), "a kernel was loaded: nothing ran interpreted"
        assert cold.interpreted_seconds("scheduler") > 0
        ran = {ins.opcode.name.lower() for ins in cold_result.prepared.program.instructions}  # on its path
        assert all(cold.interpreted_seconds(op) > 0 for op in ran)
    for name in compiled:
        np.testing.assert_array_equal(interpreted[name], compiled[name], err_msg=f"seed {seed}: {name}")
    timeline, compiled_timeline = cold_result.timeline, compiled_result.timeline
    assert [id(ins) for ins in cold_result.prepared.program.instructions] == \
        [id(ins) for ins in compiled_result.prepared.program.instructions]  # the same path
    for field in ("start_ns", "end_ns", "done_ns", "issue_ns", "pre_start_ns", "pre_done_ns"):
        np.testing.assert_array_equal(getattr(timeline, field), getattr(compiled_timeline, field),
                                      err_msg=f"seed {seed}: {field}")
    assert timeline.total_ns == compiled_timeline.total_ns


def test_a_program_gives_the_same_bytes_and_cycles_on_every_tier():
    tried = 0
    for seed in range(40):
        _, program = random_program(random.Random(seed), seed, length=6)
        if program.has_control:
            continue
        tried += 1
        if tried > 8:
            break
        _same_on_every_tier(program, seed)


def test_a_program_with_branches_gives_the_same_bytes_path_and_cycles_on_every_tier():
    """Registers and jumps cross between the tiers through ``bases``: a loop whose counter, branch
    and body run interpreted takes the same path as the compiled one."""
    tried = 0
    for seed in range(400):
        _, program = random_program(random.Random(seed), seed, length=6)
        if not program.has_control or not any(i.opcode is Opcode.BRANCH for i in program.instructions):
            continue
        tried += 1
        _same_on_every_tier(program, seed)
        if tried == 4:
            break
    assert tried == 4


def test_the_common_kernels_from_their_bundle_give_the_same_bytes_and_cycles_as_every_tier():
    """A process that finds the bundle of the common kernels in the cache (``kernel_bundle.py``)
    runs them from it: the same bytes and cycle counts as the interpreted tier."""
    kernel_bundle.build()  # asked for here (~9 s once per cache; the compile worker builds it otherwise)
    saved = execute_numba.ENTRIES.copy(), kernel_bundle._addresses, kernel_bundle._tried
    try:
        execute_numba.ENTRIES[list(kernel_bundle.COMMON)] = 0  # as in a new process
        kernel_bundle._addresses, kernel_bundle._tried = None, False
        execute_numba.load_kernel(Opcode.MEMSET)  # the first common kernel loads all of them
        assert kernel_bundle.bundled_opcodes() == set(kernel_bundle.COMMON)
        tried = 0
        for seed in range(40):
            _, program = random_program(random.Random(seed), seed, length=6)
            used = {ins.opcode for ins in program.instructions}
            if program.has_control or len(used & set(kernel_bundle.COMMON)) < 3:
                continue
            _same_on_every_tier(program, seed)
            tried += 1
            if tried == 4:
                break
        assert tried == 4 and kernel_bundle.bundled_opcodes() == set(kernel_bundle.COMMON)
    finally:
        execute_numba.ENTRIES[:], kernel_bundle._addresses, kernel_bundle._tried = saved


def test_the_worker_builds_the_bundle_once_every_common_kernel_is_cached(monkeypatch):
    cached, built = set(), []
    monkeypatch.setattr(kernel_bundle, "build", lambda: built.append(True))
    monkeypatch.setattr(tiers, "load_cached", lambda dispatcher, sig: dispatcher in cached)
    kernels = [execute_numba.kernel_for(op) for op in kernel_bundle.COMMON]
    cached.update(kernels[1:])
    assert not kernel_bundle.build_if_due() and built == []  # a common kernel is not cached yet
    cached.add(kernels[0])
    assert kernel_bundle.build_if_due() and built == [True]
    cached.add(kernel_bundle.common_entries)
    assert not kernel_bundle.build_if_due() and built == [True]  # the bundle is in the cache already


@njit(cache=False)
def _raising_kernel(row, frow, bases):
    if row[0] >= 0:
        raise ValueError("a kernel bug")


def test_a_kernel_that_raises_is_an_error_naming_the_instruction(capfd):
    b = ProgramBuilder("raises")
    tile = b.sbuf("tile", (4, 8), "float32")
    b.emit(Opcode.MEMSET, tile, [], location="kernel.py:7", value=1.0)
    program = b.build()
    sim.run(program, executor="numba")  # MEMSET's kernel is loaded
    _raising_kernel.compile(execute_numba.KERNEL_ARGS)
    saved = execute_numba.ENTRIES[Opcode.MEMSET]
    execute_numba.ENTRIES[Opcode.MEMSET] = execute_numba.entry_address(_raising_kernel)
    try:
        with pytest.raises(KernelFaultError,
                           match=r"kernel\.py:7: memset on vector: the MEMSET kernel raised"):
            sim.run(_fresh(program), executor="numba")
    finally:
        execute_numba.ENTRIES[Opcode.MEMSET] = saved
    assert "a kernel bug" not in capfd.readouterr().err  # raised, not printed by Numba's wrapper


class _Worker:
    """What a started worker is to its caller: the unit names written to its stdin."""

    def __init__(self):
        self.sent, self.closed, self.returncode = [], False, None
        self.stdin = self

    def write(self, text: str) -> None:
        self.sent += text.split()

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def units(monkeypatch):
    """A fresh process's tier state whose worker start is recorded (``units.starts``), not done."""
    units = tiers._Units()
    units.starts, units.at_exit, units.startable = [], [], True

    def start_worker(at_exit: bool = False) -> bool:
        units.starts.append(sum(units.seconds.values()))
        units.at_exit.append(at_exit)
        if units.startable:
            units.worker = _Worker()
        return units.startable

    monkeypatch.setattr(units, "start_worker", start_worker)
    monkeypatch.setattr(tiers, "_units", units)
    return units


def _cold(unit: str) -> bool:
    return tiers.available(unit, lambda: False, lambda: pytest.fail("compiled in place"))


def test_the_worker_starts_once_the_process_has_spent_enough_time_interpreted(units):
    assert not _cold("memset") and not _cold("scheduler") and units.starts == []
    tiers.ran_interpreted("memset", tiers.START_AFTER_CPU_S * 0.6)
    assert units.starts == []  # a short run: the worker would only take CPU from it
    tiers.ran_interpreted("scheduler", tiers.START_AFTER_CPU_S * 0.1)
    tiers.ran_interpreted("memset", tiers.START_AFTER_CPU_S * 0.3)
    assert units.starts == [tiers.START_AFTER_CPU_S] and units.worker.sent == ["scheduler"]  # the loop first
    assert units.at_exit == [False]
    assert not _cold("activation")  # sent after the scheduler is ready
    units.hand_over()
    assert units.worker.sent == ["scheduler", "memset", "activation"] and units.worker.closed


def test_a_short_run_starts_its_worker_at_exit_with_everything_it_lacked(units):
    assert not _cold("memset") and not _cold("activation")
    tiers.ran_interpreted("activation", tiers.START_AFTER_CPU_S / 2)
    units.hand_over()
    assert len(units.starts) == 1 and units.worker.sent == ["activation", "memset"] and units.worker.closed
    assert units.at_exit == [True]  # it compiles once this process is gone


def test_a_process_that_cannot_start_its_worker_compiles_in_place(units):
    units.startable = False
    assert not _cold("memset")
    tiers.ran_interpreted("memset", tiers.START_AFTER_CPU_S)
    compiled = []
    assert tiers.available("memset", lambda: False, lambda: compiled.append("memset"))
    assert compiled == ["memset"] and units.state["memset"] == "loaded"


# A process on a fresh cache runs a Program at once (reference tier, interpreted scheduler) and
# waits for its worker; the next process finds every unit in the cache and runs machine code only.
_CHILD = r'''
import json, sys
import numpy as np
from neuronsim import sim
from neuronsim.sim import ProgramBuilder, Opcode, execute_numba, tiers
b = ProgramBuilder("two_tiers")
a = b.sbuf("a", (8, 16), "float32")
t = b.psum("t", (16, 8), "float32")
b.emit(Opcode.MEMSET, a, [], location="child:1", value=3.5)
b.emit(Opcode.NC_TRANSPOSE, t, [a], location="child:2")
program = b.build()
result = sim.run(program)
from neuronsim.sim.memory.state import core_memory
core = core_memory(result.prepared.chip)
placement = result.prepared.placement
tile = core.psum[placement.start_partition[t.id]:placement.start_partition[t.id] + 16,
                 placement.byte_offset[t.id]:placement.byte_offset[t.id] + 32].copy()
print(json.dumps({"bytes": tile.reshape(-1).tolist(), "total_ns": result.timeline.total_ns,
                  "pending": sorted(tiers.pending_units()),
                  "loaded": sorted(op.name for op in execute_numba.loaded_opcodes())}))
'''


@pytest.mark.slow
def test_a_cold_process_runs_at_once_and_the_next_loads_what_its_worker_compiled(tmp_path):
    env = dict(os.environ, NEURON_SIM_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("NEURON_SIM_EXECUTOR", None)

    def child() -> dict:
        proc = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr[-4000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    cold = child()
    assert cold["pending"] and not cold["loaded"], cold  # it ran before anything was compiled
    tiers.wait_for_workers(next(tmp_path.iterdir()))
    warm = child()
    assert warm["pending"] == [] and warm["loaded"] == ["MEMSET", "NC_TRANSPOSE"], warm
    assert warm["bytes"] == cold["bytes"] and warm["total_ns"] == cold["total_ns"]
    assert np.frombuffer(bytes(warm["bytes"]), np.float32).tolist() == [3.5] * 128


def _start_worker(root: Path, deleted_first: bool = False, caller: int | None = None):
    """A compile worker on a new cache under ``root``, as ``tiers`` starts one (``caller``: the read end
    of its caller's pipe, as at exit): (the process, its cache directory)."""
    from neuronsim.sim._numba_cache import sources_hash

    cache = root / sources_hash()
    cache.mkdir(parents=True)
    lock_path = cache / tiers.WORKER_LOCK
    lock = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(lock, fcntl.LOCK_SH)
    if deleted_first:  # while the worker is being started
        shutil.rmtree(root)
    env = dict(os.environ, NEURON_SIM_CACHE_DIR=str(root),
               PYTHONPATH=os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")]))
    argv, fds = [sys.executable, "-c", tiers._START_WORKER, str(lock), str(lock_path)], [lock]
    if caller is not None:
        argv.append(str(caller))
        fds.append(caller)
    try:
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                pass_fds=fds), cache
    finally:
        os.close(lock)


def _wait_until_up(worker: subprocess.Popen, cache: Path) -> None:
    """Until the worker has imported the simulator (which marks the cache in use)."""
    deadline = time.monotonic() + 300
    while not (cache / _IN_USE).exists():
        assert worker.poll() is None and time.monotonic() < deadline, worker.stderr.read()
        time.sleep(0.05)


def test_a_worker_stops_when_its_cache_directory_is_deleted(tmp_path):
    """A compile worker never outlives its cache (a test's temporary cache, a cleared one): one
    whose directory is gone before it starts never imports the simulator (which would make the
    directory again), and one running stops within a second of the deletion, even while it waits
    for units."""
    gone, _ = _start_worker(tmp_path / "gone", deleted_first=True)
    running, cache = _start_worker(tmp_path / "running")
    assert gone.wait(timeout=60) == 0
    assert not (tmp_path / "gone").exists()
    _wait_until_up(running, cache)
    shutil.rmtree(tmp_path / "running")
    assert running.wait(timeout=10) == 0  # its stdin is still open: it left because the cache went
    running.stdin.close()


def test_a_worker_started_at_exit_starts_once_its_caller_is_gone(tmp_path):
    """Not during its caller's own exit: it imports nothing while the caller's end of the pipe is
    open (the caller's process lives), and starts at the EOF."""
    caller, caller_end = os.pipe()
    worker, cache = _start_worker(tmp_path / "c", caller=caller)
    os.close(caller)
    time.sleep(1.0)  # (the simulator's import takes ~0.5 s)
    assert worker.poll() is None and not (cache / _IN_USE).exists()
    os.close(caller_end)  # the caller is gone
    _wait_until_up(worker, cache)
    worker.stdin.close()
    assert worker.wait(timeout=60) == 0
