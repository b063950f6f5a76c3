"""``neuronsim info``: the chip table and its --json twin."""

import json

from cli_helpers import neuronsim
from click.testing import CliRunner

from neuronsim.cli.info import info
from neuronsim.sim.chips import get_chip


def test_info_json_for_trn3_has_every_value_with_status_and_source():
    result = neuronsim("info", "--chip", "trn3", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    spec = get_chip("trn3")
    assert data["chip"] == "trn3" and data["neuron_core_version"] == spec.neuron_core_version
    assert set(data["values"]) == set(spec.sources)
    for key, v in data["values"].items():
        assert v["value"] == spec.sources[key].value
        assert v["status"] in ("published", "derived", "assumed") and v["source"]
    assert data["derived"]["tensor_engine_peak_flops_bf16"]["value"] == spec.tensor_engine_peak_flops_bf16


def test_info_table_and_json_agree():
    runner = CliRunner()
    table = runner.invoke(info, ["--chip", "trn2"])
    as_json = runner.invoke(info, ["--chip", "trn2", "--json"])
    assert table.exit_code == as_json.exit_code == 0
    data = json.loads(as_json.output)
    for key in data["values"]:
        assert key[:12] in table.output  # long keys may fold across lines
    assert "published" in table.output and "assumed" in table.output


def test_info_reads_the_chip_from_the_environment():
    result = neuronsim("info", "--json", env={"NEURON_SIM_CHIP": "trn3"})
    assert json.loads(result.stdout)["chip"] == "trn3"


def test_info_unknown_chip_is_an_error_with_one_exit_path():
    result = neuronsim("info", "--chip", "trn9")
    assert result.returncode == 1
    assert "error:" in result.stderr and "trn9" in result.stderr and "Traceback" not in result.stderr
