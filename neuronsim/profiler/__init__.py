"""The profiler: summaries in Neuron Explorer's names, Chrome/Perfetto traces, profile directories.

It reads timelines and event records, never tensors: nothing here imports torch at module level
(``lane.py`` imports it inside the torch.profiler hook), nor the simulator (imported when a Program
is summarized or drawn).

    from neuronsim.profiler import KernelRun, summarize, kernel_trace
    run = KernelRun.from_prepared(neuronsim.sim.prepare(program, "trn2"))
    summarize(run)["mfu_estimated_percent"], kernel_trace(run)
"""

from neuronsim.profiler.events import DeviceOpEvent, KernelRun, PlacedRun, from_clock_events
from neuronsim.profiler.lane import add_device_lane, install_export_hook
from neuronsim.profiler.summary import (
    device_summary,
    kernel_summary,
    launch_summary,
    merge_summaries,
    summarize,
)
from neuronsim.profiler.trace import device_trace, kernel_trace, launch_trace
from neuronsim.profiler.validate import check_trace, validate_trace

__all__ = [
    "DeviceOpEvent", "KernelRun", "PlacedRun", "add_device_lane", "check_trace", "device_summary",
    "device_trace", "from_clock_events", "install_export_hook", "kernel_summary", "kernel_trace",
    "launch_summary", "launch_trace", "merge_summaries", "summarize", "validate_trace",
]
