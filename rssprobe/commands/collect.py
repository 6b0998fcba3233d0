"""rssprobe collect: conclude a run whose ranks were launched elsewhere (see `rssprobe prepare`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..reporters import show
from ..run import launch
from ..run.group import exit_code
from ..workflows import inspect
from . import common_args


@click.command("collect", epilog=common_args.examples(
    "rssprobe collect /shared/rssprobe/run1"))
@click.argument("run_dir", type=click.Path(path_type=Path))
def command(run_dir: Path) -> None:
    """Read every rank's events in RUN_DIR, write its tables and final status, show the summary."""
    result = launch.collect(run_dir)
    shown = inspect.entry(result.run)
    show.view(shown.kind, shown.data, "terminal", log_tail=shown.log_tail)
    sys.exit(exit_code(result.status))
