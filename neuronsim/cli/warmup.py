"""``neuronsim warmup``: fill Numba's disk cache ahead of time (CI caches, container images)."""

from __future__ import annotations

import click

from neuronsim import env

HELP = f"""Compile the simulator's machine code into Numba's disk cache now, not at the first kernel.

Run it once when building a container image or in a CI job before restoring/saving the cache
directory, so that tests start without the compile. The cache lives in {env.NEURON_SIM_CACHE_DIR}
(default ~/.cache/neuronsim/numba), in a subdirectory named after a hash of the simulator's
sources and Numba's version; a cache restored for another version is not used. Prints where the
cache is and how long each part took (compiled, or loaded from the cache).

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
    with app.status("compiling the simulator (minutes on a cold cache)"):
        from neuronsim.sim import warmup as sim_warmup  # importing the simulator loads Numba

        results = sim_warmup.warm_all()
    total = time.perf_counter() - start
    where = str(sim_warmup.cache_dir())
    if as_json:
        app.print_json({"cache_dir": where, "seconds": total,
                        "units": [r.__dict__ for r in results]})
        return 0
    for r in results:
        if r.compiled:
            state = f"compiled {r.compiled} functions"
        elif r.loaded:
            state = f"loaded {r.loaded} functions from the cache"
        else:
            state = "nothing more to compile"
        app.console.out(f"  {r.unit:<10} {r.seconds:8.1f} s  {state}", highlight=False)
    app.console.out(f"Numba cache: {where}", highlight=False)
    app.console.out(f"warmup took {total:.1f} s", highlight=False)
    return 0
