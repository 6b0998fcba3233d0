"""rssprobe collect: conclude a run whose ranks were launched elsewhere (see `rssprobe prepare`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .. import launcher, storage
from ..errors import UserError
from .run import exit_code
from .show import print_summary


@click.command("collect")
@click.argument("run_dir", type=click.Path(path_type=Path))
def command(run_dir: Path) -> None:
    """Read every rank's events in RUN_DIR, write its tables and final status, show the summary."""
    run = storage.RunDir(run_dir)
    manifest = run.manifest()
    if not run.ranks():
        raise UserError(f"{run_dir}: no rank has written events yet (events*.jsonl)")
    world_size = max(manifest["scenario"]["world_size"], max(run.ranks()) + 1)
    result = launcher.conclude(run, world_size, returncode=None)
    print_summary(result.run, "terminal")
    sys.exit(exit_code(result.status))
