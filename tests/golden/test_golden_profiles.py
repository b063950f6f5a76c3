"""Golden profiles: the simulated timing of a few small kernels, checked in and diffed.

Summary, per-instruction timeline and trace of three examples/nki kernels and of a few native
ops must equal the files in ``data/`` exactly (simulated time is deterministic). A change that
alters timing on purpose regenerates them with ``python -m pytest tests/golden --update-goldens``
and the diff is reviewed in the commit. The cases run in a fresh process (make_profiles.py).
Source locations inside neuronsim's own kernels are compared by file only: their line numbers move
with any edit of the kernel file and say nothing about timing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
DATA = HERE / "data"
CASES = ("nki_tensor_add", "nki_matmul_blocked", "nki_softmax", "native_ops")
SHOWN_DIFFERENCES = 12


@pytest.fixture(scope="module")
def profiles() -> dict:
    path = os.pathsep.join([str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("NEURON_SIM", None)  # make_profiles enables the device itself
    done = subprocess.run([sys.executable, str(HERE / "make_profiles.py")], capture_output=True, text=True,
                          env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


def without_library_lines(profile):
    """The profile with ``neuronsim/...py:LINE`` source locations cut to the file."""
    if isinstance(profile, dict):
        return {key: without_library_lines(value) for key, value in profile.items()}
    if isinstance(profile, list):
        return [without_library_lines(value) for value in profile]
    if isinstance(profile, str) and profile.startswith("neuronsim/"):
        return re.sub(r"\.py:\d+$", ".py", profile)
    return profile


def differences(expected, actual, path="") -> list[str]:
    """Where two JSON values differ, as 'path: expected -> actual' lines."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for key in sorted(set(expected) | set(actual), key=str):
            if key not in actual:
                out.append(f"{path}/{key}: removed")
            elif key not in expected:
                out.append(f"{path}/{key}: added")
            else:
                out += differences(expected[key], actual[key], f"{path}/{key}")
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        out = [f"{path}: length {len(expected)} -> {len(actual)}"] if len(expected) != len(actual) else []
        for i, (e, a) in enumerate(zip(expected, actual, strict=False)):
            out += differences(e, a, f"{path}[{i}]")
        return out
    return [] if expected == actual else [f"{path}: {expected!r} -> {actual!r}"]


@pytest.mark.parametrize("case", CASES)
def test_profile_matches_golden(case, profiles, request):
    path = DATA / f"{case}.json"
    actual = profiles[case]
    if request.config.getoption("--update-goldens"):
        path.write_text(json.dumps(actual, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"rewrote {path.relative_to(HERE.parents[1])}: review the diff")
    assert path.exists(), f"no golden for {case}: run python -m pytest tests/golden --update-goldens"
    expected = json.loads(path.read_text())
    diff = differences(without_library_lines(expected), without_library_lines(actual))
    summary = expected.get("summary", {})
    total = f" (total_time {summary.get('total_time')} -> {actual.get('summary', {}).get('total_time')})"
    assert not diff, (
        f"{case}: {len(diff)} differences from {path.name}{total if summary else ''}:\n  "
        + "\n  ".join(diff[:SHOWN_DIFFERENCES])
        + ("\n  ..." if len(diff) > SHOWN_DIFFERENCES else "")
        + "\nIf the timing change is intended: python -m pytest tests/golden --update-goldens,"
        " and review the diff."
    )


def test_library_kernel_lines_are_not_compared():
    profile = {"a": ["neuronsim/kernels/softmax.py:40", "examples/nki/softmax.py:12"]}
    expected = {"a": ["neuronsim/kernels/softmax.py", "examples/nki/softmax.py:12"]}
    assert without_library_lines(profile) == expected


def test_differences_name_the_path():
    assert differences({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}], "c": 0}) == ["/a[1]/b: 2 -> 3", "/c: added"]
