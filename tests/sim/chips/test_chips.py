"""Chips as data: every value has a source; unknown or missing keys are errors."""

import tomllib

import pytest

from neuronsim.errors import ChipSpecError
from neuronsim.sim.chips import _CHIP_DIR, VALUE_STATUSES, available_chips, get_chip, load_chip_file


def test_builtin_chips_load():
    assert {"trn2", "trn3"} <= set(available_chips())
    trn2, trn3 = get_chip("trn2"), get_chip("trn3")
    assert trn2.neuron_core_version == "v3" and trn3.neuron_core_version == "v4"


@pytest.mark.parametrize("name", ["trn2", "trn3"])
def test_every_value_has_a_source_and_status(name):
    spec = get_chip(name)
    assert spec.sources
    for key, entry in spec.sources.items():
        assert entry.status in VALUE_STATUSES, key
        assert entry.source.strip(), key
        assert getattr(spec, key) == entry.value


def test_derived_quantities_trn2():
    """S5/S12: 96 GiB over 4 logical cores (LNC=2) = 24 GiB; S10: 128x128 PEs x 2 x 2.4 GHz."""
    spec = get_chip("trn2")
    assert spec.logical_cores_per_chip == 4
    assert spec.hbm_bytes_per_logical_core == 24 * 2**30
    assert spec.tensor_engine_peak_flops_bf16 == pytest.approx(78.6432e12)
    assert spec.dma_peak_bandwidth_bytes_per_s == pytest.approx(368e9)
    assert spec.psum_bytes_per_partition == 16 * 1024


def _write_variant(tmp_path, mutate):
    doc = (_CHIP_DIR / "trn2.toml").read_text()
    path = tmp_path / "mine.toml"
    path.write_text(mutate(doc))
    return path


def test_user_chip_file_works_like_builtin(tmp_path):
    path = _write_variant(tmp_path, lambda d: d.replace('name = "trn2"', 'name = "what_if"').replace(
        "dma_engines = { value = 16,", "dma_engines = { value = 32,"))
    spec = get_chip(str(path))
    assert spec.name == "what_if" and spec.dma_engines == 32


def test_missing_key_is_an_error(tmp_path):
    path = _write_variant(tmp_path, lambda d: "\n".join(
        line for line in d.splitlines() if not line.startswith("psum_banks")))
    with pytest.raises(ChipSpecError, match="missing keys.*psum_banks"):
        load_chip_file(path)


def test_unknown_key_is_an_error(tmp_path):
    path = _write_variant(
        tmp_path, lambda d: d + '\nwarp_drive = { value = 1, status = "assumed", source = "x" }\n')
    with pytest.raises(ChipSpecError, match="unknown keys.*warp_drive"):
        load_chip_file(path)


def test_value_without_source_is_an_error(tmp_path):
    path = _write_variant(tmp_path, lambda d: d.replace(
        'psum_banks = { value = 8, status = "published", source = "S9: 8 PSUM banks per partition" }',
        'psum_banks = { value = 8, status = "published", source = " " }'))
    with pytest.raises(ChipSpecError, match="psum_banks has an empty source"):
        load_chip_file(path)


def test_bad_status_and_unknown_chip():
    with pytest.raises(ChipSpecError, match="unknown chip 'trn9'"):
        get_chip("trn9")
    doc = tomllib.loads((_CHIP_DIR / "trn2.toml").read_text())
    assert all(set(v) == {"value", "status", "source"} for v in doc["values"].values())
