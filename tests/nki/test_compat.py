"""The compatibility runner on kernels written in AWS's style (tests/nki/compat_kernels): each runs
unchanged through ``import nki`` and its own numpy check; the table counts it."""

from pathlib import Path

from neuronsim.nki.compat.examples import find_examples, run_example
from neuronsim.nki.compat.report import markdown, reason

KERNELS = Path(__file__).parent / "compat_kernels"


def test_every_feature_kernel_runs_unchanged_and_matches():
    files = find_examples(KERNELS)
    n = len(files)
    assert n == len(list(KERNELS.glob("*_kernel.py"))) >= 5
    rows = []
    for path in files:
        row = run_example(path, "trn2", in_process=True)
        row.update(kernel=path.name, test=path.name, max_error=None, trn2_s=row["seconds"])
        assert row["ran"] and row["correct"], (path.name, row["error"])
        assert row["launches"] >= 1 and row["seconds"] > 0
        rows.append(row)
    text = markdown(rows, ["trn2"], "compat_kernels")
    assert f"- kernels: {n}; all cases correct {n} (100%)" in text


def test_failures_are_classified_by_what_unblocks_them():
    missing = "ModuleNotFoundError: No module named "
    assert reason({"ran": False, "error": missing + "'nki.collectives'"}).startswith("blocker 7")
    assert reason({"ran": False, "error": missing + "'neuronxcc'"}).startswith("legacy")
    assert reason({"ran": True, "correct": False, "error": "out: max |error| 3"}) == "wrong result"
    assert reason({"ran": False, "error": "ConstraintError: k.py:3: x"}) == "neuronsim"
