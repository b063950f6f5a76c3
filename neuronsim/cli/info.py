"""``neuronsim info``: the chip's numbers, each with its status and source."""

from __future__ import annotations

import click

from neuronsim.cli.app import Abort, app
from neuronsim.cli.options import chip_option

# Computed from the chip file's values (ChipSpec properties), shown with status "computed".
DERIVED = {
    "logical_cores_per_chip": "physical_cores_per_chip / default_lnc",
    "hbm_bytes_per_logical_core": "hbm_bytes_per_chip / logical_cores_per_chip",
    "psum_bytes_per_partition": "psum_banks x psum_bank_bytes_per_partition",
    "partitions_per_dma_engine": "partitions / dma_engines",
    "dma_peak_bandwidth_bytes_per_s": "dma_engine_bandwidth_bytes_per_s x dma_engines",
    "tensor_engine_peak_flops_bf16": "pe_array_rows x pe_array_cols x 2 x tensor_engine_clock_hz",
}


def chip_info(spec) -> dict:
    values = {k: {"value": v.value, "status": v.status, "source": v.source} for k, v in spec.sources.items()}
    derived = {
        k: {"value": getattr(spec, k), "status": "computed", "source": how} for k, how in DERIVED.items()
    }
    return {
        "chip": spec.name,
        "neuron_core_version": spec.neuron_core_version,
        "nki_target": spec.nki_target,
        "values": values,
        "derived": derived,
    }


@click.command()
@chip_option
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
def info(chip: str, as_json: bool) -> int:
    """Show a chip's numbers: value, status (published / derived / fitted / assumed) and source."""
    from neuronsim.errors import ChipSpecError
    from neuronsim.sim.chips import get_chip

    try:
        data = chip_info(get_chip(chip))
    except ChipSpecError as exc:
        raise Abort(str(exc)) from None
    if as_json:
        app.print_json(data)
        return 0
    from rich.markup import escape
    from rich.table import Table

    table = Table(
        title=f"{data['chip']} — NeuronCore-{data['neuron_core_version']} (NKI target {data['nki_target']})",
        title_justify="left",
    )
    for col, style in (("key", "bold"), ("value", None), ("status", None), ("source", "dim")):
        table.add_column(col, style=style, overflow="fold")
    colours = {"published": "green", "derived": "cyan", "fitted": "magenta", "assumed": "yellow",
               "computed": "blue"}
    for section in ("values", "derived"):
        for key, v in data[section].items():
            status = v["status"]
            table.add_row(key, _fmt(v["value"]), f"[{colours[status]}]{status}[/]", escape(v["source"]))
    app.console.print(table)
    return 0


def _fmt(v) -> str:
    if isinstance(v, float) and (abs(v) >= 1e6 or (v and abs(v) < 1e-3)):
        return f"{v:.4g}"
    return f"{v:,}" if isinstance(v, int) else f"{v:g}"
