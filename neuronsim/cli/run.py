"""``neuronsim run``: run a script on the emulated device."""

from __future__ import annotations

import click

from neuronsim import env
from neuronsim.cli.options import SCRIPT_CONTEXT, chip_option, numerics_option, script_arguments

HELP = f"""Run SCRIPT with the emulated `neuron` device enabled.

The same as `{env.NEURON_SIM}=1 python SCRIPT ARGS...`, with {env.NEURON_SIM_CHIP} and
{env.NEURON_SIM_NUMERICS} set from the options: the script's output and exit code are its own.
Arguments after SCRIPT go to the script.
"""


@click.command(context_settings=SCRIPT_CONTEXT, help=HELP)
@chip_option
@numerics_option
@script_arguments
def run(chip: str, numerics: str, script: str, args: tuple[str, ...]) -> int:
    from neuronsim.cli.script import enable_device_environment, run_script

    enable_device_environment(chip, numerics)
    return run_script(script, args)
