"""rssprobe doctor: what this machine can measure, and what it cannot."""

from __future__ import annotations

import click

from ..reporters import output
from ..reporters.table import Table
from ..reporters.view import View
from ..workflows import doctor
from . import common_args


@click.command("doctor", epilog=common_args.examples(
    "rssprobe doctor"))
def command() -> None:
    """Check which probes work here."""
    table = Table("What this machine can measure", ["probe", "available", "detail"],
                        [[name, "yes" if ok else "no", detail] for name, ok, detail in doctor.checks()])
    output.render("terminal", View(None, [f"rssprobe doctor on {doctor.machine()}"], [table]))
