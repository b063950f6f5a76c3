"""Run a user's script in this process, as ``python script.py args...`` would.

In-process (``runpy``) so ``profile`` can read what the script ran; ``sys.argv``, ``sys.path[0]``
and ``__main__`` are the script's, its output goes straight to our stdout/stderr, and its exit
status is returned: ``sys.exit(n)`` gives n, an uncaught exception prints its traceback and gives 1.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback

from neuronsim import env


def enable_device_environment(chip: str, numerics: str) -> None:
    """What ``NEURON_SIM=1 NEURON_SIM_CHIP=.. NEURON_SIM_NUMERICS=.. python script.py`` sets.
    Must run before torch is imported: the device registers at ``import torch``."""
    os.environ[env.NEURON_SIM] = "1"
    os.environ[env.NEURON_SIM_CHIP] = chip
    os.environ[env.NEURON_SIM_NUMERICS] = numerics
    from neuronsim.nki_alias import install_alias

    install_alias()


def exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message"), as the interpreter does
    return 1


def run_script(path: str, args: tuple[str, ...] | list[str]) -> int:
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        runpy.run_path(path, run_name="__main__")
        return 0
    except SystemExit as exc:
        return exit_code(exc)
    except KeyboardInterrupt:
        traceback.print_exc()
        return 130
    except BaseException as exc:  # the script's own error: show it as python would
        tb = exc.__traceback__
        # drop our frames and runpy's: start at the script's first frame
        while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != os.path.abspath(path):
            tb = tb.tb_next
        traceback.print_exception(type(exc), exc, tb if tb is not None else exc.__traceback__)
        return 1
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        sys.stdout.flush()
        sys.stderr.flush()
