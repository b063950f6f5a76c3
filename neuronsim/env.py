"""Every environment variable neuronsim reads, in one place (CLI help texts name these too)."""

NEURON_SIM = "NEURON_SIM"  # "1" enables the emulated neuron device at `import torch`
NEURON_SIM_CHIP = "NEURON_SIM_CHIP"  # trn2 | trn3 | path to a chip .toml
NEURON_SIM_NUMERICS = "NEURON_SIM_NUMERICS"  # exact | fast
NEURON_SIM_EXECUTOR = "NEURON_SIM_EXECUTOR"  # numba | reference
NEURON_SIM_UNINITIALIZED = "NEURON_SIM_UNINITIALIZED"  # nan | zero | error
NEURON_SIM_SEED = "NEURON_SIM_SEED"  # integer seed for simulated randomness
NEURON_SIM_HBM_BYTES = "NEURON_SIM_HBM_BYTES"  # simulated HBM bytes per logical core (default: the chip's)
NEURON_SIM_CAST_64BIT = "NEURON_SIM_CAST_64BIT"  # "0": compute float64/int64 ops in 64 bits (default "1")
NEURON_SIM_COLLECTIVE_TIMEOUT = "NEURON_SIM_COLLECTIVE_TIMEOUT"  # seconds a collective waits for its peers (default 60)
NEURON_SIM_CACHE_DIR = "NEURON_SIM_CACHE_DIR"  # Numba cache + device C++ library (default ~/.cache/neuronsim/...)
