"""The background compiler of the tiered executor (``tiers.py``): ``python -m neuronsim.sim.compile_worker``.

Reads unit names (``warmup.UNITS``), one a line, from stdin; compiles each into the disk cache
(``warmup.warm``: under the cache's compile lock, so processes sharing the cache compile a unit once)
and answers ``ready <unit>`` or ``failed <unit>`` on stdout. At the end of its input it builds the
bundle of the common kernels if all of them are cached and it is not (``kernel_bundle.py``), then
ends — after the process that started it exited, if that one left units for it — at a lower CPU
priority than that process (one started at that process's exit is run only once the process is gone:
``tiers._START_WORKER``). While it lives it holds ``tiers.WORKER_LOCK`` shared
(``tiers.wait_for_workers``; the caller takes it and hands it over, file descriptor and path given
as the arguments, so there is no moment when a started worker does not hold it), and
when it ends it appends its CPU seconds and units to ``background.log`` in the cache directory (its
errors go to ``background.err`` there). It never outlives its cache: when the directory is
deleted (a test's temporary cache, a cleared cache), it stops at once, whatever is left.
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import sys
import threading
import traceback

from neuronsim.handoff import lock_is_there

_WATCH_SECONDS = 0.5


def _stop_when_deleted(lock: int, path: str) -> None:
    """Exit the process as soon as its cache directory is gone or replaced (its worker lock with
    it): nothing would read what it compiles."""
    if not lock_is_there(lock, path):
        os._exit(0)

    def watch() -> None:
        while lock_is_there(lock, path):
            threading.Event().wait(_WATCH_SECONDS)
        os._exit(0)

    threading.Thread(target=watch, name="neuronsim-cache-watch", daemon=True).start()


def main() -> int:
    try:
        os.nice(5)  # the process it works for comes first
    except OSError:
        pass
    if len(sys.argv) > 2:  # the lock the caller took for it (shared, on the file it opened), its path
        lock = int(sys.argv[1])
        _stop_when_deleted(lock, sys.argv[2])
    from neuronsim.sim import kernel_bundle, tiers, warmup
    from neuronsim.sim._numba_cache import cache_dir

    if len(sys.argv) <= 2:
        path = str(cache_dir() / tiers.WORKER_LOCK)
        lock = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(lock, fcntl.LOCK_SH)
        _stop_when_deleted(lock, path)
    units = {u.name: u for u in warmup.UNITS}
    done, answering = [], True
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        try:
            warmup.warm(units[name])
            answer = f"ready {name}"
            done.append(name)
        except Exception:  # noqa: BLE001 - the caller compiles it in place and sees the error there
            traceback.print_exc()
            answer = f"failed {name}"
        if answering:
            try:
                print(answer, flush=True)
            except OSError:  # the caller has exited: finish its units all the same
                answering = False
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    try:  # nothing left to do: link the common kernels into one unit once all of them are cached
        if kernel_bundle.build_if_due():
            done.append(kernel_bundle.UNIT)
    except Exception:  # noqa: BLE001 - processes load the kernels one by one instead
        traceback.print_exc()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    record = {"pid": os.getpid(), "cpu_s": usage.ru_utime + usage.ru_stime, "units": done}
    try:
        with open(cache_dir() / "background.log", "a") as log:
            log.write(json.dumps(record) + "\n")
    except OSError:
        pass  # the cache went away as the last unit ended
    os.close(lock)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
