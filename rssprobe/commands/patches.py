"""rssprobe patches: the interventions and patch sets that exist (as rssprobe.contract declares them)."""

from __future__ import annotations

import click

from ..contract.interventions import INTERVENTIONS, SETS
from . import common_args


@click.command("patches", epilog=common_args.examples(
    "rssprobe patches",
    "rssprobe patches --all"))
@click.option("--all", "show_all", is_flag=True, help="Show every intervention, the test-only ones too.")
def command(show_all: bool) -> None:
    """List interventions (--patch NAME) and patch sets, one line each."""
    for name, members in SETS.items():
        click.echo(f"{name:24} set: {' + '.join(members)}")
    for name, i in INTERVENTIONS.items():
        if show_all or not i.testing:
            click.echo(f"{name:24} {i.description}")
            for option in i.options:
                click.echo(f"{'':24}   {option.name}: {option.describe()}")
