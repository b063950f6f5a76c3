"""``nki.baremetal``, ``nki.simulate_kernel``, ``nki.benchmark`` and ``nki.profile`` of NKI 0.1,
on the simulator.

``benchmark(warmup=, iters=)(kernel)(*arrays)`` runs the kernel once (the simulation is
deterministic: every iteration would take the same simulated time) and sets
``benchmark_result.nc_latency``, whose ``get_latency_percentile(p)`` is the simulated kernel latency
in microseconds for every ``p`` in NKI's ``[0, 1, 10, 25, 50, 90, 99, 100]`` (p50 = p99). Files
AWS's tools write are written with the simulator's content, under the names asked for:
``save_trace_name`` — the Perfetto (Chrome JSON) trace of the run, which ``neuronsim view`` and
ui.perfetto.dev open (not an NTFF); ``save_neff_name`` — a text listing of the simulated Programs
(not a NEFF); ``profile``'s ``json_reports/`` — the Neuron-Explorer-style summary, one per profiled
execution.
"""

from __future__ import annotations

import json
import os

from neuronsim.nki import launch
from neuronsim.nki.kernel import Kernel
from neuronsim.nki.legacy import hints
from neuronsim.nki.legacy.call import legacy_kernel as as_kernel
from neuronsim.nki.profile import build_profile, layout
from neuronsim.profiler.events import KernelRun, PlacedRun
from neuronsim.profiler.trace import launch_trace, write_trace

PERCENTILES = (0, 1, 10, 25, 50, 90, 99, 100)


def baremetal(kernel=None, **kwargs):
    """``nki.baremetal``: the kernel, run on numpy arrays by the simulator."""
    hints.hint("nki.baremetal")
    if kernel is None:
        return lambda k: as_kernel(k)
    return as_kernel(kernel)


def simulate_kernel(kernel, *args, **kwargs):
    """``nki.simulate_kernel(kernel, *arrays)``: the kernel's outputs."""
    hints.hint("nki.simulate_kernel")
    k = as_kernel(kernel)
    outputs, _runs = launch.run(k.specialize(args, kwargs), k.arrays(args, kwargs))
    return outputs


class LatencyStats:
    """``nc_latency``: percentiles of the kernel latency in microseconds (all equal: deterministic)."""

    def __init__(self, latency_us: float, iters: int):
        self.latency_us = latency_us
        self.iters = iters

    def get_latency_percentile(self, percentile: int) -> float:
        if int(percentile) not in PERCENTILES:
            raise ValueError(f"percentile {percentile} is not one of {list(PERCENTILES)}")
        return self.latency_us

    def __repr__(self) -> str:
        return f"<nc_latency {self.latency_us:.3f} us (simulated, {self.iters} iterations)>"


class BenchmarkResult:
    def __init__(self, nc_latency: LatencyStats, profile):
        self.nc_latency = nc_latency
        self.profile = profile  # the neuronsim Profile of the run (summary, timeline)


def _programs_listing(traced) -> str:
    lines = [f"# neuronsim: the simulated Programs of kernel {traced.name} on {traced.chip.name} "
             f"(a listing, not a NEFF)"]
    for inst in traced.instances:
        for phase, prog in enumerate(inst.programs):
            lines.append(f"instance {inst.program_id} phase {phase}: {len(prog.instructions)} instructions")
            lines.extend(f"  {ins.opcode.name:<24} {ins.engine.name:<7} {ins.location or ''}"
                         for ins in prog.instructions)
    return "\n".join(lines) + "\n"


def _run(kernel: Kernel, args, kwargs):
    traced = kernel.specialize(args, kwargs)
    outputs, runs = launch.run(traced, kernel.arrays(args, kwargs))
    return traced, outputs, runs, build_profile(traced, runs)


def _write_trace(path: str, traced, runs) -> None:
    placed = [PlacedRun(KernelRun.from_prepared(result.prepared), core, offset)
              for _phase, _i, core, offset, result in layout(runs, traced.chip)]
    write_trace(launch_trace(placed, name=traced.name), path)


class BenchmarkKernel:
    """A kernel under ``nki.benchmark``: calling it runs it and sets ``benchmark_result``."""

    def __init__(self, kernel: Kernel, warmup: int, iters: int, save_neff_name=None, save_trace_name=None):
        self.kernel = kernel
        self.warmup, self.iters = int(warmup), int(iters)
        self.save_neff_name, self.save_trace_name = save_neff_name, save_trace_name
        self.benchmark_result: BenchmarkResult | None = None
        self.__name__ = getattr(kernel, "__name__", "kernel")

    def __getitem__(self, grid) -> BenchmarkKernel:
        return BenchmarkKernel(self.kernel[grid], self.warmup, self.iters, self.save_neff_name,
                               self.save_trace_name)

    def __call__(self, *args, **kwargs):
        traced, outputs, runs, prof = _run(self.kernel, args, kwargs)
        latency_us = prof.summary["total_time"] * 1e6
        self.benchmark_result = BenchmarkResult(LatencyStats(latency_us, self.iters), prof)
        if self.save_trace_name:
            _write_trace(self.save_trace_name, traced, runs)
        if self.save_neff_name:
            with open(self.save_neff_name, "w") as f:
                f.write(_programs_listing(traced))
        print(f"nki.benchmark (neuronsim): {self.__name__} {latency_us:.3f} us simulated "
              f"(p0 = p50 = p99 = p100; warmup={self.warmup}, iters={self.iters} not run: deterministic)")
        return outputs


def benchmark(kernel=None, warmup=10, iters=100, save_neff_name=None, save_trace_name=None,
              additional_compile_opt=None, **kwargs):
    """``nki.benchmark``: the simulated latency in ``benchmark_result.nc_latency`` (microseconds)."""
    hints.hint("nki.benchmark")

    def wrap(k):
        return BenchmarkKernel(as_kernel(k), warmup, iters, save_neff_name, save_trace_name)

    return wrap if kernel is None else wrap(kernel)


class ProfileKernel:
    """A kernel under ``nki.profile``: each call writes the trace, listing and summary reports."""

    def __init__(self, kernel: Kernel, working_directory, save_neff_name="file.neff",
                 save_trace_name="profile.ntff", overwrite=False, num_execs=None, profile_nth=1):
        if not working_directory or not os.path.isabs(str(working_directory)):
            raise ValueError("nki.profile needs working_directory=, an absolute path")
        self.kernel = kernel
        self.dir = str(working_directory)
        self.neff, self.trace = save_neff_name or "file.neff", save_trace_name or "profile.ntff"
        self.overwrite = overwrite
        self.num_execs = int(num_execs) if num_execs else 1
        self.profile_nth = max(1, int(profile_nth or 1))
        self.__name__ = getattr(kernel, "__name__", "kernel")

    def __getitem__(self, grid) -> ProfileKernel:
        return ProfileKernel(self.kernel[grid], self.dir, self.neff, self.trace, self.overwrite,
                             self.num_execs, self.profile_nth)

    def _trace_path(self, n: int) -> str:
        stem = os.path.splitext(os.path.basename(self.trace))[0]
        return os.path.join(self.dir, f"{stem}.ntff" if n == 1 else f"{stem}_exec_{n}.ntff")

    def __call__(self, *args, **kwargs):
        traced, outputs, runs, prof = _run(self.kernel, args, kwargs)
        os.makedirs(os.path.join(self.dir, "json_reports"), exist_ok=True)
        with open(os.path.join(self.dir, self.neff), "w") as f:
            f.write(_programs_listing(traced))
        # every execution would take the same simulated time: the profiled ones are written
        nths = list(range(self.profile_nth, self.num_execs + 1, self.profile_nth)) or [self.profile_nth]
        for n in nths:
            _write_trace(self._trace_path(n), traced, runs)
            report = os.path.join(self.dir, "json_reports", f"profile_exec_{n}.json")
            with open(report, "w") as f:
                json.dump({"kernel": traced.name, "chip": traced.chip.name, "execution": n,
                           "summary": prof.summary}, f, indent=1, default=float)
        return outputs


def profile(func=None, working_directory=None, save_neff_name="file.neff", save_trace_name="profile.ntff",
            additional_compile_opt=None, overwrite=False, num_execs=None, profile_nth=1, **kwargs):
    """``nki.profile``: runs the kernel and writes the simulated trace and summary reports."""
    hints.hint("nki.profile")

    def wrap(k):
        return ProfileKernel(as_kernel(k), working_directory, save_neff_name, save_trace_name, overwrite,
                             num_execs, profile_nth)

    return wrap if func is None else wrap(func)
