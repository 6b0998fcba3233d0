"""Output-format dispatch: (header lines, tables, raw data) -> terminal, JSON, markdown or CSV.

Every command that prints a result goes through emit(), so a format means the same thing everywhere.
"""

from __future__ import annotations

import click

from . import csvfile, jsonfile, markdown, terminal
from .table import Table

FORMATS = ["terminal", "json", "markdown", "csv"]


def emit(fmt: str, data: object, lines: list[str], tables: list[Table], alarm: bool) -> None:
    """One place that turns (header lines, tables, raw data) into the chosen format."""
    if fmt == "json":
        click.echo(jsonfile.render(data), nl=False)
    elif fmt == "markdown":
        click.echo(markdown.render(lines, tables), nl=False)
    elif fmt == "csv":
        click.echo(csvfile.render(tables), nl=False)
    else:
        terminal.render(lines, tables, alarm=alarm)
