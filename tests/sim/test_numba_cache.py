"""Machine code loaded from Numba's disk cache must behave like the fresh compile it was saved from.

A cached function's object code carries its own (re-optimized) copies of its callees, and a process
that loads it from the cache runs those copies; the process that compiled it ran the callees' own
compiles instead. The two once disagreed: O3 dropped the 16-bit cases of ``numerics.load_i64``'s
dtype switch in one loop version of the copy of ``access.load_rows_i64``, so predicated copies and
selects with a uint16 predicate were right on a cold cache and wrong on every warm run. Each test
runs the same instructions in two processes sharing one fresh cache dir (the first compiles, the
second loads) and checks both against the reference executor. Only the per-opcode kernels are
called (not the whole executor), so the cold compile stays short.
"""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import neuronsim
from neuronsim.sim.ir import Opcode

_ROOT = Path(neuronsim.__file__).resolve().parent.parent

# The child builds each case's program (DMAs of random inputs into SBUF, then the instruction under
# test), runs it on the reference executor, runs the prefix (the DMAs) on the reference executor
# too and then the instruction's Numba kernel alone on that state, and reports per case whether
# the instruction's destination bytes agree, plus the kernels' cache statistics.
_CHILD = r'''
import json, sys
import numpy as np
from neuronsim import sim
from neuronsim.sim import Engine, Instruction, Opcode, Program, ProgramBuilder
from neuronsim.sim.api import prepare
from neuronsim.sim.chips import get_chip
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import AccessPattern as AP, OPCODE_ENGINES, Memory
from neuronsim.sim.memory.state import core_memory
from neuronsim.sim.engines.vector_copy import _nb_copy_predicated, _nb_select

CHIP = get_chip("trn2")
DMA = OPCODE_ENGINES[Opcode.DMA_COPY][0]


def rand(rng, shape, dtype):
    dt = DType[dtype]
    n = int(np.prod(shape))
    if dt is DType.bool_:
        return (rng.random(n) < 0.5).reshape(shape)
    if dt.is_int:  # mostly zeros and small values, some full-range (high bits set)
        info = np.iinfo(dt.numpy)
        full = rng.integers(info.min, info.max, n, endpoint=True, dtype=np.int64)
        v = np.where(rng.random(n) < 0.5, 0, np.where(rng.random(n) < 0.5, rng.integers(1, 6, n), full))
        return v.astype(dt.numpy).reshape(shape)
    return (rng.standard_normal(n) * 10).astype(dt.numpy).reshape(shape)


def case(name, tensors, make, seed):
    """tensors: {name: (shape, dtype)}; make(t) -> (opcode, dst AP, src APs, imm)."""
    b = ProgramBuilder(name)
    for k, (shape, dtype) in tensors.items():
        b.hbm("h_" + k, shape, dtype)
        b.sbuf(k, shape, dtype)
    ts = {t.name: t for t in b.build().tensors}
    ins = []
    for k, (shape, _) in tensors.items():
        pat = ((shape[1], shape[0]), (1, shape[1]))
        ins.append(Instruction(Opcode.DMA_COPY, DMA, AP(ts[k], 0, pat), (AP(ts["h_" + k], 0, pat),), {},
                               location=name))
    op, dst, srcs, imm = make(ts)
    ins.append(Instruction(op, Engine.VECTOR, dst, tuple(srcs), imm, location=name))
    rng = np.random.default_rng(seed)
    inputs = {"h_" + k: rand(rng, shape, dtype) for k, (shape, dtype) in tensors.items()}
    tensors_t = tuple(ts.values())
    full, prefix = Program(name, tensors_t, tuple(ins)), Program(name, tensors_t, tuple(ins[:-1]))

    def dst_bytes(result):
        core = core_memory(result.prepared.chip)
        t = dst.tensor
        placement = result.prepared.placement
        start, off = placement.start_partition[t.id], placement.byte_offset[t.id]
        return core.sbuf[start:start + t.partitions, off:off + t.bytes_per_partition].copy()

    want = dst_bytes(sim.run(full, {k: a.copy() for k, a in inputs.items()}, CHIP, executor="reference",
                             uninitialized_memory="zero"))
    arrays = {k: a.copy() for k, a in inputs.items()}
    before = sim.run(prefix, arrays, CHIP, executor="reference", uninitialized_memory="zero")
    prep = prepare(full, CHIP, uninitialized_memory="zero", tiered=False)
    assert prep.placement.byte_offset == before.prepared.placement.byte_offset
    hbm = {t.id: arrays[t.name] for t in full.tensors if t.memory is Memory.HBM}
    bases = core_memory(prep.chip).executor_bases(full, prep.placement, hbm)
    kernel = _nb_copy_predicated if op is Opcode.TENSOR_COPY_PREDICATED else _nb_select
    kernel(prep.itab[-1], prep.ftab[-1], bases)
    got = dst_bytes(before)
    return bool(np.array_equal(got, want))


def ap(t, parts, *free):
    return AP(t, 0, ((t.shape[1], parts),) + tuple(free))


cases = {}
for pred_dtype in ("uint16", "uint8", "uint32", "bool_"):
    for reverse in (True, False):
        for parts, free in ((8, ((1, 1),)), (13, ((1, 5),)), (7, ((2, 3),)), (8, ((-2, 1),))):
            def make(ts, parts=parts, free=free, reverse=reverse):
                return (Opcode.TENSOR_COPY_PREDICATED, ap(ts["d"], parts, *free),
                        [ap(ts["s"], parts, *free), ap(ts["p"], parts, *free)], {"reverse_pred": reverse})
            start = 2 if free[0][0] < 0 else 0
            name = f"copy_pred_{pred_dtype}_rev{int(reverse)}_{parts}x{free}"
            shape = (16, 8)
            tensors = {"d": (shape, "float32"), "s": (shape, "float32"), "p": (shape, pred_dtype)}
            if start:
                def make(ts, parts=parts, free=free, reverse=reverse):  # noqa: F811 (a negative step)
                    return (Opcode.TENSOR_COPY_PREDICATED, AP(ts["d"], 2, ((8, parts),) + free),
                            [AP(ts["s"], 0, ((8, parts), (0, 1))), AP(ts["p"], 0, ((8, parts), (0, 1)))],
                            {"reverse_pred": reverse})
            cases[name] = case(name, tensors, make, len(cases))
for pred_dtype in ("uint16", "int16", "int8", "uint8", "int32"):
    for out_dtype in ("float32", "bfloat16"):  # raw select (all float32) and converting select
        for parts, free in ((8, ((1, 1),)), (13, ((1, 5),)), (7, ((2, 3),))):
            def make(ts, parts=parts, free=free):
                return (Opcode.SELECT, ap(ts["d"], parts, *free),
                        [ap(ts["p"], parts, *free), ap(ts["a"], parts, *free), ap(ts["b"], parts, *free)], {})
            shape = (16, 8)
            tensors = {"d": (shape, out_dtype), "p": (shape, pred_dtype), "a": (shape, "float32"),
                       "b": (shape, "float32")}
            name = f"select_{pred_dtype}_{out_dtype}_{parts}x{free}"
            cases[name] = case(name, tensors, make, len(cases))
stats = {k: {"hits": sum(f.stats.cache_hits.values()), "misses": sum(f.stats.cache_misses.values())}
         for k, f in (("copy_predicated", _nb_copy_predicated), ("select", _nb_select))}
print(json.dumps({"cases": cases, "stats": stats}))
'''


def _run_child(cache_dir: Path) -> dict:
    env = dict(os.environ, NEURON_SIM_CACHE_DIR=str(cache_dir),
               PYTHONPATH=os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_cached_kernels_agree_with_fresh_compiles_and_the_reference(tmp_path):
    cold = _run_child(tmp_path / "cache")
    warm = _run_child(tmp_path / "cache")
    # the first process compiled the kernels, the second loaded them: otherwise this test proves nothing
    assert all(s["misses"] > 0 and s["hits"] == 0 for s in cold["stats"].values()), cold["stats"]
    assert all(s["hits"] > 0 and s["misses"] == 0 for s in warm["stats"].values()), warm["stats"]
    assert len(cold["cases"]) == 62
    for label, run in (("fresh compile", cold), ("loaded from cache", warm)):
        wrong = sorted(k for k, ok in run["cases"].items() if not ok)
        assert not wrong, f"{label}: differs from the reference executor in {wrong}"


# The executor as a warm process runs it: random programs (program_fuzz's generator) in a child
# that loads every opcode's kernel (the common ones from their bundle) and the executor's loop from
# the cache this process filled, against the reference executor.
_FUZZ_CHILD = r'''
import json, random, sys
sys.path.insert(0, sys.argv[1])
from opcode_generators import random_program
from program_fuzz import assert_executors_agree, random_inputs
from neuronsim.sim import execute_numba, kernel_bundle
from neuronsim.sim.ir import Opcode

wrong = []
for seed in range(int(sys.argv[2])):
    _, program = random_program(random.Random(seed), seed)
    try:
        assert_executors_agree(program, random_inputs(program, seed), f"(seed {seed}) ")
    except AssertionError as err:
        wrong.append(str(err)[:1500])
bundled = kernel_bundle.bundled_opcodes()
units = [execute_numba.run_encoded, kernel_bundle.common_entries] + [
    execute_numba.kernel_for(op) for op in execute_numba.loaded_opcodes() - bundled]
print(json.dumps({"wrong": wrong[:3], "n_wrong": len(wrong), "opcodes": len(execute_numba.loaded_opcodes()),
                  "bundled": sorted(op.name for op in bundled),
                  "hits": sum(sum(u.stats.cache_hits.values()) for u in units),
                  "misses": sum(sum(u.stats.cache_misses.values()) for u in units)}))
'''


def test_random_programs_agree_when_the_executor_is_loaded_from_the_cache():
    from opcode_generators import random_program
    from program_fuzz import assert_executors_agree, random_inputs

    from neuronsim.sim import kernel_bundle
    from neuronsim.sim.warmup import warm_all

    warm_all()  # compiles the loop, every opcode's kernel and their bundle here: the cache is filled
    _, program = random_program(random.Random(0), 0)
    assert_executors_agree(program, random_inputs(program, 0))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _FUZZ_CHILD, str(Path(__file__).parent), "1500"], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["opcodes"] >= 10, result  # the programs used many opcodes (each kernel its own unit)
    # the common kernels ran from their bundle (kernel_bundle.py), the others from their own units
    assert result["bundled"] == sorted(op.name for op in kernel_bundle.COMMON), result
    assert result["hits"] > result["opcodes"] - len(result["bundled"]) and result["misses"] == 0, \
        f"the child compiled part of the executor itself instead of loading it from the cache: {result}"
    assert result["n_wrong"] == 0, "\n".join(result["wrong"])


def test_an_opcode_loaded_mid_program_resumes_where_the_loop_stopped():
    """The loop returns at the first instruction whose kernel is not loaded yet; ``execute`` loads it
    and goes on from there: every instruction runs once, in order, as on the reference executor."""
    from opcode_generators import random_program
    from program_fuzz import assert_executors_agree, random_inputs

    from neuronsim.sim import execute_numba

    for seed in range(40):
        _, program = random_program(random.Random(seed), seed, length=6)
        opcodes = [ins.opcode for ins in program.instructions]
        # straight-line programs only: a BRANCH may jump over an instruction, which then never loads
        if len(set(opcodes)) >= 3 and opcodes[0] is Opcode.DMA_COPY and Opcode.BRANCH not in opcodes:
            break
    assert_executors_agree(program, random_inputs(program, seed))  # every kernel it uses is loaded now
    saved = execute_numba.ENTRIES.copy()
    try:
        for op in set(opcodes):  # as in a new process: no kernel loaded, the loop stops at each first use
            execute_numba.ENTRIES[op] = 0
        assert_executors_agree(program, random_inputs(program, seed), "(kernels loaded mid-program) ")
        assert set(opcodes) <= execute_numba.loaded_opcodes()
    finally:
        execute_numba.ENTRIES[:] = saved


# Processes started together on a fresh cache compile once: each child imports the simulator, says
# it is ready, waits until all are, then loads one kernel (MEMSET's, the quickest to compile).
_RACE_CHILD = r'''
import json, sys, time
from pathlib import Path
from neuronsim.sim import execute_numba
from neuronsim.sim.ir import Opcode

here, n = Path(sys.argv[1]), int(sys.argv[2])
(here / f"ready-{sys.argv[3]}").touch()
while len(list(here.glob("ready-*"))) < n:
    time.sleep(0.01)
execute_numba.load_kernel(Opcode.MEMSET)
kernel = execute_numba.kernel_for(Opcode.MEMSET)
print(json.dumps({"misses": sum(kernel.stats.cache_misses.values()),
                  "hits": sum(kernel.stats.cache_hits.values())}))
'''


def test_processes_sharing_a_fresh_cache_compile_a_kernel_once(tmp_path):
    env = dict(os.environ, NEURON_SIM_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")]))
    n = 2
    procs = [subprocess.Popen([sys.executable, "-c", _RACE_CHILD, str(tmp_path), str(n), str(k)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(n)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-4000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    # one compiled the kernel while holding the cache's lock; the other waited, then loaded it
    assert sorted(r["misses"] for r in results) == [0, 1], results
    assert [r["hits"] for r in results if r["misses"] == 0] == [1], results


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_compile_shows_a_progress_line_on_a_terminal_only(monkeypatch, tmp_path):
    from neuronsim.sim import _numba_cache

    monkeypatch.setattr(_numba_cache._Progress, "_QUIET_SECONDS", 0.01)
    # a lock of its own: another process compiling into the suite's cache would make this one wait
    # (and show the waiting line instead)
    monkeypatch.setattr(_numba_cache, "_active_dir", tmp_path)
    for stream, shown in ((_Terminal(), True), (io.StringIO(), False)):
        monkeypatch.setattr(sys, "stderr", stream)
        with _numba_cache.compile_lock("memset kernel"):
            done = threading.Event()
            done.wait(0.3)  # a compile that takes a while
        text = stream.getvalue()
        if shown:
            assert "compiling the simulator's machine code (memset kernel)" in text
            assert text.endswith("\r\x1b[K")  # the line is erased when the compile ends
        else:
            assert text == ""


def test_other_versions_caches_are_kept_while_used_and_while_recent(tmp_path, monkeypatch):
    """Two checkouts sharing a cache root keep each other's caches: a version directory a live
    process holds (its in-use lock) is never deleted, nor the most recently used ones; older unused
    versions go, and nothing in the root that is not a version directory is touched."""
    import fcntl

    from neuronsim.sim import _numba_cache

    monkeypatch.setattr(_numba_cache, "KEEP_VERSIONS", 3)
    names = [f"{i:016x}" for i in range(6)]
    for age, name in enumerate(names):  # names[0] the most recently used
        (tmp_path / name).mkdir()
        (tmp_path / name / _numba_cache._IN_USE).touch()
        os.utime(tmp_path / name / _numba_cache._IN_USE, (1e9 - age, 1e9 - age))
    (tmp_path / "not-a-version").mkdir()
    held = os.open(tmp_path / names[5] / _numba_cache._IN_USE, os.O_RDWR)  # a live process of the oldest
    fcntl.flock(held, fcntl.LOCK_SH)
    try:
        _numba_cache._delete_unused_versions(tmp_path, tmp_path / ("f" * 16))
    finally:
        os.close(held)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([names[0], names[1], names[5], "not-a-version"])
