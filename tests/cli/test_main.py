"""Every command has --help; --help lists the env vars the options read; the entry point works."""

import shutil
import subprocess

import pytest
from cli_helpers import neuronsim

from neuronsim import env


def test_top_level_help_lists_every_command():
    result = neuronsim("--help")
    assert result.returncode == 0, result.stderr
    for command in ("run", "profile", "view", "info", "warmup"):
        assert command in result.stdout


@pytest.mark.parametrize("command", ["run", "profile", "view", "info", "warmup"])
def test_each_command_has_help(command):
    result = neuronsim(command, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Usage: neuronsim {command}")


@pytest.mark.parametrize("command", ["run", "profile"])
def test_help_names_the_environment_variables(command):
    out = neuronsim(command, "--help").stdout
    for var in (env.NEURON_SIM, env.NEURON_SIM_CHIP, env.NEURON_SIM_NUMERICS):
        assert var in out


def test_help_does_not_import_torch_or_the_simulator():
    code = ("import sys; from neuronsim.cli.main import neuronsim; "
            "from click.testing import CliRunner; r = CliRunner().invoke(neuronsim, ['profile', '--help']); "
            "assert r.exit_code == 0; "
            "print(sorted(m for m in ('torch', 'numba', 'neuronsim.sim', 'rich') if m in sys.modules))")
    out = subprocess.run(["python", "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.skipif(shutil.which("neuronsim") is None, reason="the console script is not installed")
def test_console_script_entry_point():
    result = subprocess.run(["neuronsim", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and "neuronsim" in result.stdout


def test_unknown_command_is_a_usage_error():
    result = neuronsim("frobnicate")
    assert result.returncode == 2
    assert "No such command" in result.stderr
