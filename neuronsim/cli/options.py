"""Options several commands share. Each one that reads an environment variable names it (env.py)."""

from __future__ import annotations

import click

from neuronsim import env

NUMERICS = ("exact", "fast")


def chip_option(f):
    return click.option(
        "--chip",
        envvar=env.NEURON_SIM_CHIP,
        show_envvar=True,
        default="trn2",
        show_default=True,
        metavar="trn2|trn3|FILE.toml",
        help=f"Chip to simulate: a built-in name or a chip file. Read from {env.NEURON_SIM_CHIP}; "
        f"the script sees it in {env.NEURON_SIM_CHIP}.",
    )(f)


def numerics_option(f):
    return click.option(
        "--numerics",
        envvar=env.NEURON_SIM_NUMERICS,
        show_envvar=True,
        type=click.Choice(NUMERICS),
        default="exact",
        show_default=True,
        help=f"exact: the simulator computes values with hardware numerics; fast: ATen-CPU computes "
        f"them (timing still simulated). Read from and passed on as {env.NEURON_SIM_NUMERICS}.",
    )(f)


def script_arguments(f):
    f = click.argument("args", nargs=-1, type=click.UNPROCESSED)(f)
    return click.argument("script", type=click.Path(exists=True, dir_okay=False))(f)


# Options after the script name belong to the script.
SCRIPT_CONTEXT = {"ignore_unknown_options": True, "allow_interspersed_args": False}


def chips_option(f):
    """``--chip`` of ``profile``: one chip, or several comma-separated to profile and compare each."""
    return click.option(
        "--chip",
        envvar=env.NEURON_SIM_CHIP,
        show_envvar=True,
        default="trn2",
        show_default=True,
        metavar="CHIP[,CHIP...]",
        help=f"Chip to simulate: trn2, trn3 or a chip file (.toml); several, comma-separated, run the "
        f"script once per chip and compare the profiles. Read from {env.NEURON_SIM_CHIP}; the script sees "
        f"its chip in {env.NEURON_SIM_CHIP}.",
    )(f)
