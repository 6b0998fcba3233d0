"""rssprobe prepare: a run directory for a launch rssprobe does not control (several nodes)."""

from __future__ import annotations

from pathlib import Path

import click

from ..run import multinode


@click.command("prepare")
@click.argument("scenario_ref", metavar="[SCENARIO]", default="default")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="A directory shared by all nodes.")
@click.option("--world-size", type=int, required=True, help="Total ranks over all nodes.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE")
@click.option("--patched", is_flag=True)
@click.option("--patch", "patches", multiple=True, metavar="NAME")
def command(scenario_ref: str, out: Path, world_size: int, overrides: tuple[str, ...], patched: bool,
            patches: tuple[str, ...]) -> None:
    """Prepare SCENARIO for an external multi-node launch into a shared directory."""
    click.echo(multinode.prepare(scenario_ref, out, world_size, list(overrides), patched, list(patches)))
