"""``neuronsim``: run, profile and inspect programs on the simulated NeuronCore.

The command tree mirrors the package: ``neuronsim <command>`` is ``neuronsim/cli/<command>.py``.
"""

from __future__ import annotations

import sys

import click

from neuronsim.cli import compare, info, profile, run, view, warmup
from neuronsim.cli.app import Abort, app

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="neuronsim", prog_name="neuronsim")
def neuronsim() -> None:
    """A cycle-approximate Trainium2/3 NeuronCore simulator and its emulated `neuron` PyTorch device.

    \b
      neuronsim run train.py            run a script on the emulated device (NEURON_SIM=1)
      neuronsim profile train.py        ... and write a trace, a summary and an op table
      neuronsim view profile/           show a profile again (--html for a report file)
      neuronsim compare trn2/ trn3/     two profiles side by side, with their deltas
      neuronsim info --chip trn3        the chip's numbers, each with its source
      neuronsim warmup                  compile the simulator into its disk cache ahead of time
    """


for command in (run.run, profile.profile, view.view, compare.compare, info.info, warmup.warmup):
    neuronsim.add_command(command)


def main(argv: list[str] | None = None) -> None:
    """The one exit path: a command's return value, an Abort or a click error becomes the exit code."""
    try:
        code = neuronsim.main(args=argv, prog_name="neuronsim", standalone_mode=False)
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
    except click.exceptions.Abort:
        app.err.print("Aborted.")
        code = 130
    except Abort as exc:
        app.error(exc.message)
        code = exc.code
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
