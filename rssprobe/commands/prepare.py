"""rssprobe prepare: a run directory for a launch rssprobe does not control (several nodes)."""

from __future__ import annotations

from pathlib import Path

import click

from ..workflows import run
from . import common_args


@click.command("prepare", epilog=common_args.examples(
    "rssprobe prepare default --world-size 16 --out /shared/rssprobe/run1"))
@common_args.script_options
@click.option("--out", required=True, type=click.Path(path_type=Path), help="A directory shared by all nodes.")
@click.option("--world-size", type=int, required=True, help="Total ranks over all nodes.")
@common_args.set_option
@click.option("--patched", is_flag=True, help="Apply the scenario's declared patch set (default pr8132).")
@common_args.patch_option()
def command(args: tuple[str, ...], script: Path | None, out: Path, world_size: int, overrides: tuple[str, ...],
            patched: bool, patches: tuple[str, ...]) -> None:
    """Prepare SCENARIO for an external multi-node launch into a shared directory."""
    spec = common_args.scenario_spec(args, script, overrides, world_size=world_size)
    assert spec is not None
    click.echo(run.prepare(spec, out, patched, list(patches)))
