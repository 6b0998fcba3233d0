"""rssprobe show: a run's (or a run group's) summary again, from disk, in any format."""

from __future__ import annotations

import click

from .. import storage
from ..reporters.output import show_entry
from .common_args import format_option


@click.command("show")
@click.argument("ref", metavar="RUN", default="latest")
@format_option()
@click.option("--all-sites", is_flag=True, help="Every site row, also those with all figures near zero.")
@click.option("--rank", default=0, show_default=True, help="Which rank's tables (multi-rank runs).")
def command(ref: str, fmt: str, all_sites: bool, rank: int) -> None:
    """Show RUN (a run or group directory, an id under reports/runs, or 'latest')."""
    show_entry(storage.resolve_entry(ref), fmt, all_sites, rank)
