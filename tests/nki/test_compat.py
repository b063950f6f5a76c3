"""The compatibility runner on kernels written in AWS's style (tests/nki/compat_kernels): each runs
unchanged through ``import nki`` and its own numpy check; the table counts it."""

from pathlib import Path

import pytest

from neuronsim.nki.compat.examples import find_examples, run_example
from neuronsim.nki.compat.report import markdown, reason

KERNELS = Path(__file__).parent / "compat_kernels"


def test_every_feature_kernel_runs_unchanged_and_matches():
    files = find_examples(KERNELS)
    n = len(files)
    assert n == len(list(KERNELS.glob("*_kernel.py"))) >= 6
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
    upstream = "AttributeError: 'NkiTensor' object has no attribute 'base_tensor'"  # moe_tkg's MX loaders
    moe_tkg_mx = {"ran": False, "test": "test_moe_tkg_mx[float4_e2m1fn_x4]", "error": upstream}
    assert reason(moe_tkg_mx) == "broken upstream"
    assert reason({"ran": True, "correct": False, "error": "out: max |error| 3"}) == "wrong result"
    mx_case = "test_moe_bwmm_mx_cte_unit[2-3072-float4_e2m1fn_x4]"
    assert reason({"ran": False, "test": mx_case, "error": "ValueError: x"}).startswith("blocker 7")
    mx_wrong = {"ran": True, "correct": False, "test": mx_case, "error": "output: max |error| 0"}
    assert reason(mx_wrong) == "wrong result"
    assert reason({"ran": False, "error": "ConstraintError: k.py:3: x"}) == "neuronsim"


def test_nki_version_option_names_the_known_releases(tmp_path, capsys):
    """``--nki-version`` selects the NKI release the kernels are simulated as; an unknown one stops
    the runner before anything runs, listing the known ones."""
    from neuronsim.nki.compat.__main__ import main

    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path), "--nki-version", "0.9"])
    assert stop.value.code == 2
    assert "--nki-version: NKI release '0.9' is not one neuronsim simulates; known: 0.3, 0.4, 0.5, 0.6" in \
        capsys.readouterr().err


@pytest.mark.slow  # two pytest processes (~10 s)
def test_library_runner_resumes_after_a_case_kills_its_process(tmp_path):
    """A case that kills the test process (as the host's OOM killer does) is recorded as failed and
    the run resumes with the cases after it."""
    from neuronsim.nki.compat.__main__ import run_library

    utils = tmp_path / "test" / "utils"
    utils.mkdir(parents=True)
    for name in ("__init__.py", "unit_test_framework.py"):
        (utils / name).write_text("")
    (utils / "ranged_test_harness.py").write_text('RANGE_TEST_FIXTURE_NAME = "range_test_options"\n')
    (tmp_path / "test" / "__init__.py").write_text("")
    (tmp_path / "test" / "integration").mkdir()
    (tmp_path / "test" / "integration" / "test_cases.py").write_text(
        "import os, signal, pytest\n"
        "@pytest.mark.fast\n"
        "@pytest.mark.parametrize('n', [0, 1, 2])\n"
        "def test_case(n):\n"
        "    if n == 1:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    assert n != 2\n")
    rows = run_library(tmp_path, ["trn2"], None, memory_gib=0)
    by_case = {r["test"].split("::")[-1]: r for r in rows}
    assert set(by_case) == {"test_case[1]", "test_case[2]"}  # [0] passed: no row, nothing failed
    assert by_case["test_case[1]"]["error"].startswith("the test process died in this case (signal 9")
    assert reason(by_case["test_case[1]"]) == "host memory"
    assert by_case["test_case[2]"]["error"].startswith("before the kernel ran: AssertionError")


def test_outputs_are_read_as_the_library_reads_them_on_a_host():
    """As the library's validator: an output's bytes as the test placeholder's dtype, in the golden's
    shape (mxfp_load's x4 words compared as float32); another element size is left as it is."""
    import numpy as np

    from neuronsim.nki.compat.harness import _as_read
    from neuronsim.nki.types import host_mx_dtype

    words = np.arange(8, dtype=np.uint32).view(host_mx_dtype("float8_e4m3fn_x4")).reshape(2, 4)
    placeholder = np.zeros((2, 4), np.float32)
    read = _as_read(words, placeholder, np.zeros((1, 8), np.float32))
    assert read.dtype == np.float32 and read.shape == (1, 8)
    assert np.array_equal(read.view(np.uint32).ravel(), np.arange(8))
    halves = np.ones((2, 4), np.float16)
    assert _as_read(halves, placeholder, placeholder).dtype == np.float16


def test_an_output_that_is_nan_where_the_reference_has_numbers_is_counted_not_hidden():
    """A NaN output has no finite error: the row says how many outputs are NaN/Inf where the golden
    is finite (moe_bwmm_mx_cte's all-NaN slot once read "max |error| 0")."""
    import numpy as np

    from neuronsim.nki.compat.harness import differences

    want = np.array([[1.0, 2.0, np.nan], [4.0, 0.0, 0.0]], np.float32)
    got = np.array([[1.5, np.nan, np.nan], [np.inf, 0.0, 0.25]], np.float32)
    assert differences(got, want) == (0.5, 2)  # the NaN where the golden is NaN is not counted
    assert differences(want, want) == (0.0, 0)


def test_library_harness_copies_only_the_arguments_a_kernel_writes(monkeypatch):
    """The library's inputs stay as the test made them for the next chip and its golden, but an input
    the kernel only reads is passed as it is: no second copy of a 4 GiB logits array."""
    from types import SimpleNamespace

    import numpy as np

    import neuronsim.nki as nki
    import neuronsim.nki.isa as nisa
    import neuronsim.nki.language as nl
    from neuronsim.nki.compat.harness import run_case

    @nki.jit
    def scale_in_place(x, y):
        tile = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=y)
        nisa.tensor_scalar(dst=tile, data=tile, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=x, src=tile)
        return x

    x, y = np.zeros((4, 8), np.float32), np.ones((4, 8), np.float32)
    seen = []
    real = nki.simulate

    def spy(kernel, **options):
        run = real(kernel, **options)

        def call(**kwargs):
            seen.append(kwargs)
            return run(**kwargs)
        return call

    monkeypatch.setattr(nki, "simulate", spy)
    args = SimpleNamespace(kernel_func=scale_in_place, kernel_input={"x": x, "y": y}, validation_args=None,
                           inference_args=None, compiler_input=None)
    row = run_case(args, ["trn2", "trn3"])
    assert row["ran"] and len(seen) == 2, row
    assert all(s["y"] is y and s["x"] is not x for s in seen)
    assert (x == 0).all() and scale_in_place.trace_count == 2  # one trace per chip
