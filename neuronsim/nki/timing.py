"""Timing without values: trace, allocate, validate and schedule a kernel, and execute nothing.

``profile_timing(kernel, chip=...)(*arrays)`` returns the same :class:`~neuronsim.nki.profile.Profile`
as ``simulate(kernel, profile=True)`` would — the schedule is data-independent, computed when each
Program is prepared — but never runs the executor. Only the arguments' shapes and dtypes are read
(``np.empty`` arrays are fine, and cost no memory until touched).

What it skips, and so cannot report: the output values, ``device_print`` output, and every check
that needs values — reads of never-written SBUF/PSUM under ``NEURON_SIM_UNINITIALIZED=nan``
(``error`` is a static check and still runs). Everything else a simulated run raises — capacity,
constraint, dtype, engine-access and out-of-bounds errors — is raised here too: those are checked
when the kernel is traced, allocated and validated.

It exists for kernels whose values are too costly to compute on a CPU (the fidelity ruler's
[4096, 8192] x [8192, 8192] fp32 matmuls: 2.2e12 multiply-adds) and whose timing is the question.
"""

from __future__ import annotations

from neuronsim.errors import UnsupportedError
from neuronsim.nki import profile as _profile
from neuronsim.nki.kernel import as_kernel
from neuronsim.nki.traced import TracedKernel
from neuronsim.sim import api as sim_api


def profile_timing(kernel, *, chip=None):
    """A callable: ``profile_timing(k)(*arrays) -> Profile``, scheduling ``k`` without executing it."""
    k = as_kernel(kernel)

    def run(*args, **kwargs) -> _profile.Profile:
        traced = k.specialize(args, kwargs, chip=chip)
        return _profile.build_profile(traced, scheduled_runs(traced))

    run.__name__ = f"profile_timing({getattr(k, '__name__', 'kernel')})"
    return run


def scheduled_runs(traced: TracedKernel) -> list[list[sim_api.RunResult]]:
    """``runs[phase][instance]`` as ``simulate`` returns them, with timelines and no outputs."""
    n_phases = len(traced.instances[0].programs)
    runs = []
    for phase in range(n_phases):
        row = []
        for inst in traced.instances:
            prepared = sim_api.prepare(inst.programs[phase], traced.chip)
            if prepared.timeline is None:
                raise UnsupportedError(
                    f"kernel '{traced.name}' loops on register values: its time depends on its data, so it "
                    f"cannot be scheduled without running it (use nki.simulate)",
                    location=inst.programs[phase].location)
            row.append(sim_api.RunResult({}, prepared.timeline, prepared))
        runs.append(row)
    return runs
