"""rssprobe show: a run's, a run group's or a size sweep's summary again, from disk, in any format."""

from __future__ import annotations

import click

from ..reporters import show
from ..workflows import inspect
from . import common_args
from .common_args import all_option, format_option


@click.command("show", epilog=common_args.examples(
    "rssprobe show latest",
    "rssprobe show runs/base --format markdown",
    "rssprobe show reports/scale/DIR --all"))
@click.argument("ref", metavar="RUN", default="latest")
@format_option()
@click.option("--all-sites", is_flag=True, help="Every site row, also those with all figures near zero.")
@all_option
@click.option("--rank", default=0, show_default=True, help="Which rank's tables (multi-rank runs).")
def command(ref: str, fmt: str, all_sites: bool, show_all: bool, rank: int) -> None:
    """Show RUN (a run, a group, a scale, matrix or plan directory, an id under reports/runs, or 'latest')."""
    found = inspect.view(ref, rank)
    show.view(found.kind, found.data, fmt, all_sites, found.log_tail, show_all)
