"""The background compiler of the tiered executor (``tiers.py``): ``python -m neuronsim.sim.compile_worker``.

Reads unit names (``warmup.UNITS``), one a line, from stdin; compiles each into the disk cache
(``warmup.warm``: under the cache's compile lock, so processes sharing the cache compile a unit once)
and answers ``ready <unit>`` or ``failed <unit>`` on stdout. It ends at the end of its input — after
the process that started it exited, if that one left units for it — at a lower CPU priority than
that process. While it lives it holds ``tiers.WORKER_LOCK`` shared (``tiers.wait_for_workers``; the
caller takes it and hands it over, file descriptor given as the argument, so there is no moment
when a started worker does not hold it), and
when it ends it appends its CPU seconds and units to ``background.log`` in the cache directory (its
errors go to ``background.err`` there).
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import sys
import traceback


def main() -> int:
    try:
        os.nice(5)  # the process it works for comes first
    except OSError:
        pass
    from neuronsim.sim import tiers, warmup
    from neuronsim.sim._numba_cache import cache_dir

    units = {u.name: u for u in warmup.UNITS}
    if len(sys.argv) > 1:  # the lock the caller took for it (shared, on the file it opened)
        lock = int(sys.argv[1])
    else:
        lock = os.open(cache_dir() / tiers.WORKER_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(lock, fcntl.LOCK_SH)
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
    usage = resource.getrusage(resource.RUSAGE_SELF)
    record = {"pid": os.getpid(), "cpu_s": usage.ru_utime + usage.ru_stime, "units": done}
    with open(cache_dir() / "background.log", "a") as log:
        log.write(json.dumps(record) + "\n")
    os.close(lock)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
