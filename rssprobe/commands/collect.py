"""rssprobe collect: conclude a run whose ranks were launched elsewhere (see `rssprobe prepare`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .. import groups, launcher
from ..reporters.output import show_entry


@click.command("collect")
@click.argument("run_dir", type=click.Path(path_type=Path))
def command(run_dir: Path) -> None:
    """Read every rank's events in RUN_DIR, write its tables and final status, show the summary."""
    result = launcher.collect(run_dir)
    show_entry(result.run, "terminal")
    sys.exit(groups.exit_code(result.status))
