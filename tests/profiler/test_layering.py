"""The profiler reads timelines and event records: importing it pulls in neither torch nor the simulator.
(That its sources never name the device or nki is checked with the other layers: tests/test_layers.py.)"""

import subprocess
import sys

MODULES = ["neuronsim.profiler", "neuronsim.profiler.report", "neuronsim.profiler.html",
           "neuronsim.profiler.session", "neuronsim.profiler.validate", "neuronsim.profiler.compare",
           "neuronsim.profiler.compare_html", "neuronsim.profiler.timeline_model"]


def test_profiler_imports_neither_torch_nor_the_simulator():
    heavy = ("torch", "numba", "neuronsim.sim", "neuronsim.device", "rich", "click")
    code = f"import sys; import {', '.join(MODULES)}; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
