"""``neuronsim run``: run a script on the emulated device."""

from __future__ import annotations

import click

from neuronsim import env
from neuronsim.cli.options import SCRIPT_CONTEXT, chip_option, numerics_option, script_arguments

HELP = f"""Run SCRIPT with the emulated `neuron` device enabled.

The same as `{env.NEURON_SIM}=1 python SCRIPT ARGS...`, with {env.NEURON_SIM_CHIP} and
{env.NEURON_SIM_NUMERICS} set from the options: the script's output and exit code are its own.
Arguments after SCRIPT go to the script. With --nproc N it starts N ranks instead, one process per
emulated logical NeuronCore, as `torchrun --standalone --nproc_per_node N SCRIPT ARGS...` would
(scripts join them with `dist.init_process_group("neuron")`); the exit code is torchrun's.
"""


@click.command(context_settings=SCRIPT_CONTEXT, help=HELP)
@chip_option
@numerics_option
@click.option("--nproc", type=click.IntRange(min=1), default=1, show_default=True, metavar="N",
              help="Ranks to start under torchrun (one per emulated logical NeuronCore).")
@script_arguments
def run(chip: str, numerics: str, nproc: int, script: str, args: tuple[str, ...]) -> int:
    from neuronsim.cli.script import enable_device_environment, run_script

    enable_device_environment(chip, numerics)
    if nproc > 1:
        return run_ranks(nproc, script, args)
    return run_script(script, args)


def run_ranks(nproc: int, script: str, args: tuple[str, ...]) -> int:
    """torchrun in a child process; it and its ranks inherit the device environment just set."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               script, *args]
    return subprocess.call(command)
