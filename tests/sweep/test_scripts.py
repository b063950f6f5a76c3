"""The sweep's example scripts (examples/*.py written as the popular public examples are): each on
``neuron`` in a fresh ``NEURON_SIM=1`` process against the CPU, with its fallbacks and native share.
Slow (a minute a script): CI runs the command line's listing; the table is docs/compat.md."""

from __future__ import annotations

import pytest

from neuronsim.sweep import scripts
from neuronsim.sweep.__main__ import main


def test_every_script_is_in_examples_with_a_main_and_a_device_flag(capsys):
    assert main(["--list", "--models"]) == 0
    listed = capsys.readouterr().out
    for s in scripts.SCRIPTS:
        assert s.name in listed
        path = scripts.EXAMPLES / f"{s.name}.py"
        if path.exists():  # helper-contributed CNN/VAE/DCGAN scripts may land later
            text = path.read_text()
            assert "def main(argv" in text and '"--device"' in text and '"--quiet"' in text


def test_a_missing_script_is_a_skip_with_its_reason():
    r = scripts.run_script(scripts.Script("no_such_example"))
    assert r.status == "skip" and "not in this checkout" in r.detail


@pytest.mark.slow
@pytest.mark.parametrize("name", ["word_language_model", "forward_forward", "nanogpt"])
def test_script_matches_the_cpu_natively(name):
    r = scripts.run_script(scripts.BY_NAME[name])
    assert r.passed, r.detail
    assert r.device.share is not None and r.device.share >= 0.95, scripts.line(r)
