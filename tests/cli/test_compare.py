"""``neuronsim compare A B`` and ``neuronsim profile --chip A,B``: tables, their --json twin, the HTML."""

import json
import textwrap

from cli_helpers import neuronsim
from click.testing import CliRunner

from neuronsim.cli.main import neuronsim as cli
from neuronsim.profiler.compare import compare_profiles

EXPECTED = """\
neuronsim compare — trn2 vs trn3
 field                             ┃     trn2 ┃     trn3 ┃ change ┃ trn3/trn2
━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━
 total_time                        │     2 ms │   1.6 ms │ -20.0% │     0.800
 mfu_estimated_percent             │   10.00% │   12.50% │ +25.0% │     1.250
 hfu_estimated_percent             │    0.00% │    0.00% │      = │         —
 model_flops                       │        0 │        0 │      = │         —
 kernel_count                      │        5 │        5 │      = │     1.000
 instruction_count                 │        0 │        0 │      = │         —
 kernel_launch_time                │     0 ns │     0 ns │      = │         —
 tensor_engine_active_time_percent │   25.00% │   25.00% │      = │     1.000
 vector_engine_active_time_percent │    0.00% │    0.00% │      = │         —
 scalar_engine_active_time_percent │    0.00% │    0.00% │      = │         —
 gpsimd_engine_active_time_percent │    0.00% │    0.00% │      = │         —
 dma_active_time_percent           │   50.00% │   50.00% │      = │     1.000
 hbm_read_bytes                    │ 1.00 MiB │ 1.00 MiB │      = │     1.000
 hbm_write_bytes                   │      0 B │      0 B │      = │         —
 dma_transfer_count                │        0 │        0 │      = │         —
 dma_transfer_average_bytes        │      0 B │      0 B │      = │         —
 host_fallback_time                │     0 ns │     0 ns │      = │         —
 host_fallback_count               │        0 │        0 │      = │         —
 host_transfer_time                │     0 ns │     0 ns │      = │         —
 sbuf_peak_bytes                   │      0 B │      0 B │      = │         —
 psum_peak_bytes                   │      0 B │      0 B │      = │         —
Engine active time
 engine ┃   trn2 ┃   trn3 ┃ change ┃ trn2 % ┃ trn3 %
━━━━━━━━╇━━━━━━━━╇━━━━━━━━╇━━━━━━━━╇━━━━━━━━╇━━━━━━━━
 tensor │ 500 us │ 400 us │ -20.0% │   25.0 │   25.0
 vector │   0 ns │   0 ns │      = │    0.0 │    0.0
 scalar │   0 ns │   0 ns │      = │    0.0 │    0.0
 gpsimd │   0 ns │   0 ns │      = │    0.0 │    0.0
 sync   │   0 ns │   0 ns │      = │    0.0 │    0.0
 dma    │   1 ms │ 800 us │ -20.0% │   50.0 │   50.0
Ops, largest change first (1 of 2)
 op       ┃ kind   ┃ trn2 calls ┃ trn3 calls ┃   trn2 ┃   trn3 ┃ change ┃ trn3/trn2
━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━
 aten::mm │ kernel │          4 │          4 │ 1.5 ms │ 1.2 ms │ -20.0% │     0.800
"""

NKI_ADD = """
    import numpy as np
    import neuronsim.nki as nki
    import neuronsim.nki.language as nl

    @nki.jit
    def add(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(a), nl.load(b)))
        return out

    if __name__ == "__main__":
        a = np.ones((128, 512), np.float32)
        print("sum", float(nki.simulate(add)(a, a).sum()))
"""


def _profile_dir(path, chip, total, mm):
    doc = {"chip": chip, "detail": "op", "total_time": total, "kernel_count": 5,
           "mfu_estimated_percent": 10.0 if chip == "trn2" else 12.5, "tensor_engine_active_time": total / 4,
           "dma_active_time": total / 2, "tensor_engine_active_time_percent": 25.0,
           "dma_active_time_percent": 50.0,
           "hbm_read_bytes": 1 << 20,
           "ops": [{"name": "aten::mm", "kind": "kernel", "count": 4, "total_time": mm},
                   {"name": "aten::add.Tensor", "kind": "kernel", "count": 1, "total_time": total - mm}]}
    path.mkdir()
    (path / "summary.json").write_text(json.dumps(doc))
    trace = {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0,
         "args": {"name": f"neuron:0 NeuronCore ({chip})"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "Device ops"}},
        {"ph": "X", "name": "aten::mm", "pid": 0, "tid": 1, "ts": 0.0, "dur": mm * 1e6, "cat": "kernel",
         "args": {"simulated_start_ns": 0.0}}], "displayTimeUnit": "ns"}
    (path / "trace.json").write_text(json.dumps(trace))
    return path, doc


def _lines(text):
    return [line.rstrip() for line in text.splitlines()]


def test_compare_prints_summary_engines_and_ops_tables(tmp_path):
    a, _ = _profile_dir(tmp_path / "a", "trn2", 2e-3, 1.5e-3)
    b, _ = _profile_dir(tmp_path / "b", "trn3", 1.6e-3, 1.2e-3)
    result = CliRunner().invoke(cli, ["compare", str(a), str(b), "--top", "1"])
    assert result.exit_code == 0, result.output
    assert _lines(result.output) == _lines(EXPECTED)


def test_compare_json_is_the_comparison_and_html_writes_the_report(tmp_path):
    a, doc_a = _profile_dir(tmp_path / "a", "trn2", 2e-3, 1.5e-3)
    b, doc_b = _profile_dir(tmp_path / "b", "trn3", 1.6e-3, 1.2e-3)
    report = tmp_path / "cmp.html"
    result = CliRunner().invoke(cli, ["compare", str(a), str(b), "--json", "--html", str(report)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == compare_profiles(doc_a, doc_b, ("trn2", "trn3"), (str(a), str(b)))
    page = report.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count('data-timeline="') == 2
    default = CliRunner().invoke(cli, ["compare", str(a), str(b), "--html"])
    assert default.exit_code == 0 and (tmp_path / "compare.html").exists()
    assert default.output.rstrip().endswith(f"report: {tmp_path / 'compare.html'}")


def test_compare_of_a_directory_that_is_not_a_profile(tmp_path):
    a, _ = _profile_dir(tmp_path / "a", "trn2", 2e-3, 1.5e-3)
    result = neuronsim("compare", a, tmp_path)
    assert result.returncode == 1 and "is not a profile directory" in result.stderr


def test_profile_on_two_chips_writes_both_profiles_and_compares_them(tmp_path):
    script = tmp_path / "add.py"
    script.write_text(textwrap.dedent(NKI_ADD))
    out = tmp_path / "prof"
    result = neuronsim("profile", "--chip", "trn2,trn3", "-o", out, "--detail", "instruction", "--html",
                       script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("sum 131072.0") == 2  # the script ran once per chip
    assert "neuronsim compare — trn2 vs trn3" in result.stdout and "neuronsim profile —" not in result.stdout
    for chip in ("trn2", "trn3"):
        doc = json.loads((out / chip / "summary.json").read_text())
        assert doc["chip"] == chip and doc["kernels"] == ["add"] and (out / chip / "report.html").exists()
    comparison = json.loads((out / "compare.json").read_text())
    assert comparison["a"]["name"] == "trn2" and comparison["b"]["name"] == "trn3"
    assert [r["name"] for r in comparison["ops"]] == ["add"]
    assert (out / "report.html").read_text().count('data-timeline="') == 2


def test_profile_chip_list_needs_two_different_chips(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("print('ran')\n")
    result = neuronsim("profile", "--chip", "trn2,trn2", "-o", tmp_path / "p", script)
    assert result.returncode == 1 and "two or more different chips" in result.stderr
    assert "ran" not in result.stdout
