#!/usr/bin/env bash
# Run a project's tests on neuronsim's simulated Trainium, on any CI runner, with the compiled
# simulator (Numba's disk cache) kept between runs. Run it from the project's root; its arguments
# go to pytest. Settings, from the environment:
#   NEURONSIM_INSTALL      the install step (default below; set it empty to skip installing)
#   NEURONSIM_CACHE_STORE  a directory your CI keeps between runs: cache archives go there
#   NEURON_SIM_CACHE_DIR   Numba's cache for this run (default ~/.cache/neuronsim/numba)
set -euo pipefail

install=${NEURONSIM_INSTALL-"pip install torch==2.13.0 neuronsim && pip install -e ."}
store=${NEURONSIM_CACHE_STORE:-$HOME/.cache/neuronsim-ci}
export NEURON_SIM_CACHE_DIR=${NEURON_SIM_CACHE_DIR:-$HOME/.cache/neuronsim/numba}

# 1. Install neuronsim and the project.
if [ -n "$install" ]; then
    sh -c "$install"
fi

# 2. Restore the compiled simulator an earlier run saved for this neuronsim (the key names its
#    version and a hash of its simulator sources).
key=$(neuronsim warmup --cache-key)
archive=$store/$key.tar.gz
if [ -f "$archive" ]; then
    mkdir -p "$NEURON_SIM_CACHE_DIR"
    tar -xzf "$archive" -C "$NEURON_SIM_CACHE_DIR"
    echo "neuron-tests: restored the Numba cache from $archive"
fi

# 3. Compile what is missing (minutes on a cold cache, seconds on a restored one); keep it.
neuronsim warmup
if [ ! -f "$archive" ]; then
    mkdir -p "$store"
    tar -czf "$archive.partial" -C "$NEURON_SIM_CACHE_DIR" .
    mv "$archive.partial" "$archive"
    echo "neuron-tests: saved the Numba cache to $archive"
fi

# 4. The tests, with the emulated neuron device and the performance gates.
exec python -m pytest --neuron-sim "$@"
