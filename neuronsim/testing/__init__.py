"""Testing on the simulated device: measured blocks and deterministic performance gates.

    from neuronsim.testing import Gates, BaselineStore, measure

    with measure() as block:                      # device ops and nki.simulate launches
        model(x)
    block.summary["total_time"], block.fallback_ops

    gates = Gates(BaselineStore("perf/neuron_baselines.toml"), test="mlp")
    with gates.gate(no_fallback=True, budget_us=120, baseline="forward"):
        model(x)
    gates.check(nki.simulate(kernel, profile=True)(a, b)[1], bounds={"tensor": (50, None)})

The pytest plugin (``--neuron-sim``) gives these as fixtures: ``neuron_perf`` (Gates bound to the
test and to ``neuron_baselines.toml`` next to it), ``neuron_ops`` (an op-tracking scope) and
``neuron_profile`` (a measured block spanning the test). See docs/testing.md.
"""

from neuronsim.errors import GateFailure
from neuronsim.testing.baselines import BaselineStore, diff_table
from neuronsim.testing.gates import Gates, GateSpec
from neuronsim.testing.measure import Block, Measurement, from_profile, measure
from neuronsim.testing.ops import OpScope

__all__ = ["BaselineStore", "Block", "GateFailure", "GateSpec", "Gates", "Measurement", "OpScope",
           "diff_table", "from_profile", "measure"]
