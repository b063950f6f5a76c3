"""aws-neuron/nki-samples: its legacy kernels (``neuronxcc.nki``, NKI 0.1) run unchanged, each
against the repository's own check, one row per kernel.

- ``src/nki_samples/tutorials`` and ``contributed``: each file with a ``__main__`` (or a check at
  module level) runs as it is (its numpy/torch check: "NKI and NumPy match", ``matches? True``,
  ``Is close: True``, an ``assert``); every kernel the file launches gets a row with the file's
  outcome and the kernel's simulated time (its last launch: the benchmark's, when the file
  benchmarks after checking).
- A tutorial test file (``test_attention.py``): its test function, ``test_attn_tutorial(mode,
  version)``, is called for every kernel of the module it star-imports — ``"accuracy"`` (the
  numpy comparison) for the row, then ``"benchmark"`` (``nki.benchmark``, the shipped performance
  test) for the simulated latency it prints.
- ``test/unit``: each file through pytest with the repository's conftest and ``--simulation-only``
  (its CI's command: the ``simulation``-marked numerical tests). At 6905a68 they import
  ``nki_samples.reference``, which upstream removed (#116) while keeping the tests: their rows say
  so; a checkout from before that commit runs them. Current-API tutorials
  (``mxfp-matmul``) are not legacy kernels: the examples mode runs them. ``test/integration`` holds
  framework scripts (torch_xla, torch_neuronx model compiles that download Stable Diffusion):
  listed, not run.
"""

from __future__ import annotations

import re
from pathlib import Path

from neuronsim.nki.compat.examples import run_example

_LEGACY = re.compile(r"^\s*(import neuronxcc|from neuronxcc)", re.M)
_MAIN = re.compile(r"^if __name__ == .__main__.", re.M)
_CHECK = re.compile(r"^(np\.testing\.assert|assert )", re.M)
_STAR = re.compile(r"^from (\w+) import \*", re.M)
_KERNEL_DEF = re.compile(r"^@(?:nki\.)?(?:jit|baremetal)\b[\s\S]*?^def (\w+)", re.M)
_TEST_FN = re.compile(r"^def (test_\w+)\(mode, version\)", re.M)
_FRAMEWORKS = (("torch_xla", "torch_xla"), ("diffusers", "diffusers (a Stable Diffusion model download)"))


def is_samples(root: Path) -> bool:
    return (root / "src" / "nki_samples").is_dir()


def _kernel_files(root: Path) -> list[Path]:
    found = []
    for folder in (root / "src" / "nki_samples" / "tutorials", root / "contributed"):
        for path in sorted(folder.rglob("*.py")):
            text = path.read_text(errors="replace")
            if _LEGACY.search(text):  # current-API tutorials (mxfp-matmul): the examples mode's
                found.append(path)
    return found


def cases(root: Path) -> list[dict]:
    """What to run: ``{"file", "call" (None: the main), "kernel" (None: those the run launches)}``."""
    out = []
    for path in _kernel_files(root):
        text = path.read_text(errors="replace")
        test = _TEST_FN.search(text)
        if path.name.startswith("test_") and test:
            for module in _STAR.findall(text):
                src = path.parent / f"{module}.py"
                for kernel in _KERNEL_DEF.findall(src.read_text(errors="replace")) if src.exists() else []:
                    out.append({"file": path, "kernel": kernel,
                                "call": f'{test.group(1)}("accuracy", {kernel})',
                                "bench": f'{test.group(1)}("benchmark", {kernel})'})
        elif not path.name.startswith("test_") and (_MAIN.search(text) or _CHECK.search(text)):
            out.append({"file": path, "kernel": None, "call": None})  # checks in __main__ or at module level
    for path in sorted((root / "test" / "unit").glob("test_*.py")):
        call = '__import__("neuronsim.nki.compat.samples").nki.compat.samples.pytest_file(__file__)'
        out.append({"file": path, "kernel": None, "unit": True, "call": call})
    return out


def pytest_file(path: str) -> None:
    """Run one of the repository's pytest files (its own fixtures and asserts) in this process;
    an AssertionError naming the first failing test when any fails."""
    import pytest

    failures: list[str] = []

    class _Failures:
        @staticmethod
        def pytest_runtest_logreport(report):
            if report.failed:
                lines = str(report.longrepr).strip().splitlines()
                failures.append(f"{report.nodeid.split('::', 1)[-1]}: {lines[-1] if lines else 'failed'}")

    args = [path, "-q", "-p", "no:cacheprovider", "--rootdir", str(Path(path).parent)]
    conftest = Path(path).parent / "conftest.py"
    if conftest.exists() and "--simulation-only" in conftest.read_text(errors="replace"):
        args.append("--simulation-only")  # the `simulation` tests, as the repository's CI runs them
    code = pytest.main(args, plugins=[_Failures()])
    if failures or int(code) not in (0, 5):
        raise AssertionError(failures[0] if failures else f"pytest exit code {int(code)}")


def _listed(root: Path) -> list[dict]:
    """``test/integration``'s framework scripts: a row each, not run."""
    rows = []
    for path in sorted((root / "test" / "integration").rglob("*.py")):
        text = path.read_text(errors="replace")
        needs = [label for mod, label in _FRAMEWORKS if re.search(rf"^\s*(import|from) {mod}\b", text, re.M)]
        if not needs:
            continue
        rel = str(path.relative_to(root))
        rows.append({"kernel": rel, "test": rel, "ran": False, "correct": False, "max_error": None,
                     "error": f"needs {needs[0]} (its main runs on a framework device; not an NKI failure)"})
    return rows


def run_samples(root: Path, chips: list[str], timeout: float, select: str | None = None) -> list[dict]:
    """The table's rows (``select``: only files whose path contains it, and their kernels)."""
    rows = []
    for case in cases(root):
        path = case["file"]
        rel = str(path.relative_to(root))
        if select and select not in f"{rel}::{case['kernel']}":
            continue
        results = []
        for chip in chips:  # the other chips only after the first ran
            results.append(run_example(path, chip, timeout, call=case["call"], path_extra=[root / "src"]))
            if not results[0]["ran"]:
                break
        results += [{}] * (len(chips) - len(results))
        first = results[0]
        kernels = [case["kernel"]] if case["kernel"] else sorted(first.get("kernels") or {})
        for kernel in kernels or [None]:
            test = "pytest" if case.get("unit") else case["call"] or "__main__"
            row = {"kernel": f"{rel}::{kernel}" if kernel else rel, "test": test,
                   "ran": first["ran"], "correct": first["correct"] and bool(kernels), "max_error": None,
                   "error": first["error"]}
            for chip, r in zip(chips, results, strict=True):
                times = r.get("kernels") or {}
                row[f"{chip}_s"] = times.get(kernel) if kernel else r.get("seconds")
            if case.get("bench") and row["correct"]:
                bench = [run_example(path, chip, timeout, call=case["bench"], path_extra=[root / "src"])
                         for chip in chips]
                for chip, r in zip(chips, bench, strict=True):
                    row[f"{chip}_s"] = (r.get("kernels") or {}).get(kernel, row[f"{chip}_s"])
                if not all(r["ran"] for r in bench):
                    row["error"] = "benchmark mode: " + next(r["error"] for r in bench if not r["ran"])
            rows.append(row)
    return rows + [r for r in _listed(root) if not select or select in r["kernel"]]
