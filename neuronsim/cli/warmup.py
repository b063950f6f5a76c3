"""``neuronsim warmup``: fill Numba's disk cache ahead of time (CI caches, container images)."""

from __future__ import annotations

import click

from neuronsim import env

HELP = f"""Compile the simulator's machine code into Numba's disk cache now, not at the first kernel.

Run it once when building a container image or in a CI job before restoring/saving the cache
directory, so that tests start without the compile. The cache lives in {env.NEURON_SIM_CACHE_DIR}
(default ~/.cache/neuronsim/numba), in a subdirectory named after a hash of the simulator's
sources and Numba's version; a cache restored for another version is not used. Prints how long
each compile unit took (the executor's loop and scheduler, then one kernel per opcode: compiled,
or loaded from the cache) and where the cache is. Processes sharing the cache compile one at a
time; the others wait and load what it compiled. It also builds the `neuron` device's two C++
libraries (once per torch version and compiler, into the same cache root): the core one, which the
first `NEURON_SIM=1` process would otherwise build while it starts, and the cached native op's,
which it would run without and have built after it exits.

--cache-key prints a key for CI caches (neuronsim's version and that hash) and compiles nothing.
"""


@click.command(help=HELP)
@click.option("--cache-key", is_flag=True, help="Print the cache key for this install and exit.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def warmup(cache_key: bool, as_json: bool) -> int:
    import sys
    import time

    import neuronsim
    from neuronsim.cli.app import app

    if cache_key:
        from neuronsim.sim._numba_cache import sources_hash

        python = f"py{sys.version_info[0]}{sys.version_info[1]}"
        key = f"neuronsim-{neuronsim.__version__}-{sources_hash()}-{python}"
        app.console.out(key, highlight=False)
        return 0
    start = time.perf_counter()
    from neuronsim.sim import warmup as sim_warmup  # importing the simulator loads Numba

    results = []
    for unit in sim_warmup.UNITS:  # a terminal shows a progress line while a unit compiles
        result = sim_warmup.warm(unit)
        results.append(result)
        if not as_json:
            app.console.out(f"  {result.unit:<24} {result.seconds:8.1f} s  {_state(result)}", highlight=False)
    library = _build_device_library()
    if not as_json:
        state = "built" if library["built"] else "in the cache"
        app.console.out(f"  {'device library':<24} {library['seconds']:8.1f} s  {state}: {library['path']}",
                        highlight=False)
    total = time.perf_counter() - start
    where = str(sim_warmup.cache_dir())
    if as_json:
        app.print_json({"cache_dir": where, "seconds": total,
                        "units": [r.__dict__ for r in results], "device_library": library})
        return 0
    app.console.out(f"Numba cache: {where}", highlight=False)
    app.console.out(f"warmup took {total:.1f} s", highlight=False)
    return 0


def _build_device_library() -> dict:
    """The device's C++ libraries (``device/cpp/build.py``: the core and the cached op's), built now
    if no process has yet."""
    import time

    from neuronsim.cli.app import Abort
    from neuronsim.device.cpp import build
    from neuronsim.errors import NativeBuildError

    start = time.perf_counter()
    try:
        tc = build.toolchain()
        built = not build.ops_path(tc).exists() or not build.core_path(tc).exists()
        path = build.build_ops(tc)
    except NativeBuildError as exc:
        raise Abort(str(exc)) from exc
    return {"path": str(path), "core_path": str(build.core_path(tc)), "seconds": time.perf_counter() - start,
            "built": built}


def _state(result) -> str:
    if result.compiled:
        return f"compiled {result.compiled} functions"
    if result.loaded:
        return f"loaded {result.loaded} functions from the cache"
    return "nothing more to compile"
