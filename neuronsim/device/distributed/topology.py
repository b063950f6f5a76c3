"""Where ranks sit and what a collective costs: ``neuronsim.sim.interconnect`` (the cost model lives
in the simulator layer, so NKI collective launches use it too), under its name in this package."""

from neuronsim.sim.interconnect import (  # noqa: F401
    ALGORITHMS,
    CHIP,
    INSTANCE_NETWORK,
    LEVELS,
    NEURONLINK,
    Interconnect,
    collective_ns,
    interconnect,
    interconnect_for_option,
    interconnect_from_file,
)
