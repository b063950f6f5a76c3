"""``torch_neuronx.profiling``: TorchNeuron's profiler hand-off, writing neuronsim profiles.

TorchNeuron profiles through ``torch.profiler.profile`` (tools/neuron-explorer/how-to-profile-pytorch)::

    cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir="out")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 experimental_config=cfg, on_trace_ready=NeuronProfiler(cfg).export_trace):
        ...

Here ``export_trace`` writes, per profiled window, the files ``neuronsim profile`` writes
(``trace.json``: torch.profiler's host ops with the device ops merged in, aligned to the host op
that issued each; ``summary.json`` with Neuron Explorer's field names; ``ops.csv``) into
``<profile_output_dir>/<host>_pid_<pid>/<timestamp>/``, TorchNeuron's layout, one directory per
process. ``ProfileMode.DEVICE`` (hardware instructions) draws every engine instruction of the
native kernels; without it the device ops are drawn one slice each. ``capture_enabled_for_nc``
("0,2-3") picks the devices; ``max_events_per_nc`` caps the slices drawn per device.
"""

from __future__ import annotations

import datetime
import enum
import os
import socket
import tempfile
from pathlib import Path

from torch._C._profiler import _ExperimentalConfig


class ProfileMode(enum.Enum):
    DEVICE = "device"  # hardware instructions (NTFF on TorchNeuron)
    RUNTIME = "runtime"  # runtime system trace
    CPU_UTIL = "cpu_util"
    HOST_MEMORY = "host_memory"


class NeuronConfig(_ExperimentalConfig):
    """What to capture; passed both as ``experimental_config`` and to :class:`NeuronProfiler`."""

    def __init__(self, modes=None, max_events_per_nc: int = 1_000_000,
                 capture_enabled_for_nc: str | None = None, profile_output_dir: str = "./output",
                 neff_cache_dir: str | None = None, precache_node_info: bool = True):
        super().__init__()
        self.modes = list(modes) if modes is not None else [ProfileMode.DEVICE, ProfileMode.RUNTIME]
        for m in self.modes:
            if not isinstance(m, ProfileMode):
                raise TypeError(f"NeuronConfig modes are ProfileMode values, got {m!r}")
        if max_events_per_nc < 1:
            raise ValueError(f"max_events_per_nc must be positive, got {max_events_per_nc}")
        self.max_events_per_nc = int(max_events_per_nc)
        self.capture_enabled_for_nc = capture_enabled_for_nc
        self.profile_output_dir = str(profile_output_dir)
        self.neff_cache_dir = neff_cache_dir  # no NEFFs here: kept for scripts that set it
        self.precache_node_info = precache_node_info
        self.cores = parse_cores(capture_enabled_for_nc)


def parse_cores(spec: str | None) -> frozenset[int] | None:
    """``"0,2-3"`` -> {0, 2, 3}; None (every core) when unset."""
    if spec is None or not str(spec).strip():
        return None
    cores: set[int] = set()
    for part in str(spec).split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ValueError(f"capture_enabled_for_nc: {part!r} is not a core or a range like 2-5") from None
        if first < 0 or last < first:
            raise ValueError(f"capture_enabled_for_nc: bad range {part!r}")
        cores.update(range(first, last + 1))
    return frozenset(cores)


class NeuronProfiler:
    """Writes a neuronsim profile of each ``torch.profiler`` window (its ``export_trace``)."""

    def __init__(self, config: NeuronConfig | None = None):
        self.config = config or NeuronConfig()
        self.written: list[Path] = []  # the profile directories written, in order

    def output_dir(self) -> Path:
        stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S_%f")
        return Path(self.config.profile_output_dir) / f"{socket.gethostname()}_pid_{os.getpid()}" / stamp

    def export_trace(self, prof) -> Path:
        """``on_trace_ready`` handler: write the profile of ``prof``'s window; returns its directory."""
        from neuronsim.device import settings
        from neuronsim.profiler import lane, report, session

        host_text = _host_trace(prof)
        window = getattr(prof, "_neuronsim_window", None) or [0, None]
        lo, hi = window[0], window[1]
        cores = self.config.cores
        devices = {}
        for index, events in session.device_events().items():
            if cores is not None and index not in cores:
                continue
            kept = [e for e in events
                    if e.wall_ns is not None and e.wall_ns >= lo and (hi is None or e.wall_ns <= hi)]
            if kept:
                devices[index] = kept
        detail = "instruction" if ProfileMode.DEVICE in self.config.modes else "op"
        recording = session.Session(detail, started_wall_ns=lo or 0)
        limit = self.config.max_events_per_nc
        doc, device_trace = report.session_profile(
            recording, devices, settings.chip(), host_base_ns=lane.trace_base_ns(host_text),
            max_instruction_events=limit, max_op_events=limit)
        out = report.write_profile(self.output_dir(), doc, lane.merge_trace_text(host_text, device_trace))
        self.written.append(out)
        return out


def _host_trace(prof) -> str:
    """torch.profiler's own chrome trace of the window (host ops), as JSON text."""
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.profiler.export_chrome_trace(path)  # the underlying profiler's: without the device lane
        return Path(path).read_text()
    finally:
        os.unlink(path)
