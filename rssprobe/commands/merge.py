"""rssprobe merge: the shards of one campaign (matrix, plan or scale run with --shard K/N) in one directory."""

from __future__ import annotations

from pathlib import Path

import click

from ..campaign import merge as merging
from ..reporters import output, show
from . import common_args
from .common_args import format_option


@click.command("merge", epilog=common_args.examples(
    "rssprobe merge shard-1 shard-2 shard-3 shard-4 --out campaign"))
@click.argument("shards", metavar="DIR...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", required=True, type=click.Path(path_type=Path), help="A new directory for the whole campaign.")
@format_option()
def command(shards: tuple[Path, ...], out: Path, fmt: str) -> None:
    """Join the shards' directories DIR... into --out: show, diff, report and the verdict report then read it as
    if it had run on one machine. Refuses shards of different campaigns, and an --out that is not empty."""
    output.render(fmt, show.merged(merging.merge(list(shards), out).as_dict(), fmt))
