"""Every environment variable neuronsim reads, in one place (CLI help texts name these too)."""

NEURON_SIM = "NEURON_SIM"  # "1" enables the emulated neuron device at `import torch`
NEURON_SIM_CHIP = "NEURON_SIM_CHIP"  # trn2 | trn3 | path to a chip .toml
NEURON_SIM_NUMERICS = "NEURON_SIM_NUMERICS"  # exact | fast
NEURON_SIM_EXECUTOR = "NEURON_SIM_EXECUTOR"  # tiered | numba | reference
NEURON_SIM_UNINITIALIZED = "NEURON_SIM_UNINITIALIZED"  # nan | zero | error
NEURON_SIM_SEED = "NEURON_SIM_SEED"  # integer seed for simulated randomness
NEURON_SIM_HBM_BYTES = "NEURON_SIM_HBM_BYTES"  # simulated HBM bytes per logical core (default: the chip's)
NEURON_SIM_CAST_64BIT = "NEURON_SIM_CAST_64BIT"  # "0": compute float64/int64 ops in 64 bits (default "1")
# seconds a collective waits for its peers (default 60)
NEURON_SIM_COLLECTIVE_TIMEOUT = "NEURON_SIM_COLLECTIVE_TIMEOUT"
# the NKI release simulated where releases differ: 0.3 .. 0.6 (default 0.6)
NEURON_SIM_NKI_VERSION = "NEURON_SIM_NKI_VERSION"
NEURON_SIM_NKI_HINTS = "NEURON_SIM_NKI_HINTS"  # "0": no migration hints for legacy (neuronxcc.nki) kernels
# Numba's disk cache and the device's C++ library (default ~/.cache/neuronsim/...)
NEURON_SIM_CACHE_DIR = "NEURON_SIM_CACHE_DIR"
XDG_CACHE_HOME = "XDG_CACHE_HOME"  # the user's cache directory (XDG base directories), ~/.cache when unset
CXX = "CXX"  # the C++ compiler that builds the device's library (default: g++, c++ or clang++ on PATH)
# tests: "1" makes the browser tests fail, not skip, when no Chromium is installed (.ci/run sets it)
NEURON_SIM_REQUIRE_BROWSER = "NEURON_SIM_REQUIRE_BROWSER"

# The pytest plugin (neuronsim/pytest_plugin.py): its command-line options, marker and baseline file.
PYTEST_SIM_OPTION = "--neuron-sim"  # enable the emulated device for the session (or NEURON_SIM=1)
PYTEST_CHIP_OPTION = "--neuron-chip"  # trn2 | trn3 | path to a chip .toml (or NEURON_SIM_CHIP)
PYTEST_UPDATE_BASELINES_OPTION = "--neuron-update-baselines"  # rewrite the performance baselines
PYTEST_PROFILE_DIR_OPTION = "--neuron-profile-dir"  # write each neuron_profile'd test's profile here
PYTEST_MARKER = "neuron_sim"  # @pytest.mark.neuron_sim: run the test only under the simulator
PYTEST_BASELINE_FILE = "neuron_baselines.toml"  # performance baselines, one file per test directory

# TorchNeuron's own names, read by torch.compile(backend="neuron") as TorchNeuron does ("1" / "true": on)
# CPU tensors among a compiled graph's inputs are an error instead of copied to the device
TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY = "TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY"
TORCH_NEURONX_RETAIN_DEVICE_MODE = "TORCH_NEURONX_RETAIN_DEVICE_MODE"  # results go back to the inputs' device
