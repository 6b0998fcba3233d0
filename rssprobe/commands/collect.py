"""rssprobe collect: conclude a run whose ranks were launched elsewhere (see `rssprobe prepare`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..reporters import show
from ..workflows import run
from . import common_args


@click.command("collect", epilog=common_args.examples(
    "rssprobe collect /shared/rssprobe/run1"))
@click.argument("run_dir", type=click.Path(path_type=Path))
def command(run_dir: Path) -> None:
    """Read every rank's events in RUN_DIR, write its tables and final status, show the summary."""
    collected = run.collect(run_dir)
    show.view(collected.view.kind, collected.view.data, "terminal", log_tail=collected.view.log_tail)
    sys.exit(collected.exit_code)
