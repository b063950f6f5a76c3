"""``neuronsim run``: the script runs as under ``NEURON_SIM=1 python``; output and exit code are its own."""

import textwrap

from cli_helpers import neuronsim


def _script(tmp_path, body: str):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_exit_code_arguments_and_output_are_preserved(tmp_path):
    script = _script(tmp_path, """
        import os, sys
        print("argv", sys.argv[1:])
        e = os.environ
        print("env", e["NEURON_SIM"], e["NEURON_SIM_CHIP"], e["NEURON_SIM_NUMERICS"])
        print("name", __name__, "path0", sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
        print("to stderr", file=sys.stderr)
        sys.exit(int(sys.argv[1]))
    """)
    result = neuronsim("run", "--chip", "trn3", "--numerics", "fast", script, "3", "--flag", "-x")
    assert result.returncode == 3
    assert result.stdout.splitlines() == [
        "argv ['3', '--flag', '-x']", "env 1 trn3 fast", "name __main__ path0 True"]
    assert result.stderr == "to stderr\n"


def test_an_uncaught_exception_prints_the_scripts_traceback_and_exits_1(tmp_path):
    script = _script(tmp_path, """
        def f():
            raise ValueError("boom")
        f()
    """)
    result = neuronsim("run", script)
    assert result.returncode == 1
    assert "ValueError: boom" in result.stderr
    assert "script.py" in result.stderr and "runpy" not in result.stderr


def test_sys_exit_with_a_message(tmp_path):
    result = neuronsim("run", _script(tmp_path, "import sys; sys.exit('bad input')"))
    assert result.returncode == 1 and result.stderr.strip() == "bad input"


def test_the_device_is_enabled_for_the_script(tmp_path):
    script = _script(tmp_path, """
        import torch
        x = torch.arange(4.0, device="neuron")
        print(x.device.type, (x * 2).cpu().tolist())
    """)
    result = neuronsim("run", script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "neuron [0.0, 2.0, 4.0, 6.0]"


def test_a_missing_script_is_a_usage_error(tmp_path):
    result = neuronsim("run", tmp_path / "nope.py")
    assert result.returncode == 2 and "does not exist" in result.stderr
