"""Output-format dispatch: (answer, header lines, tables, folded tables, raw data) -> terminal, JSON, markdown or CSV.

Every command that prints a result goes through emit(), so a format means the same thing everywhere: the answer
sentences first (JSON carries them as "answer" in its data), then the context lines, the key tables, and the
detail tables (terminal: only with --all, else a hint; markdown: folded under <details>; CSV: all of them).
"""

from __future__ import annotations

import click

from . import csvfile, jsonfile, markdown, terminal
from .table import Table

FORMATS = ["terminal", "json", "markdown", "csv"]


def emit(fmt: str, data: object, lines: list[str], tables: list[Table], alarm: bool,
         answer: list[str] | tuple[str, ...] = (), details: list[Table] | tuple[Table, ...] = (),
         show_details: bool = False, details_summary: str = "") -> None:
    """One place that turns a result into the chosen format."""
    if fmt == "json":
        click.echo(jsonfile.render(data), nl=False)
    elif fmt == "markdown":
        click.echo(markdown.render(lines, [*tables, *(details if show_details else ())], answer,
                                   () if show_details else details, details_summary), nl=False)
    elif fmt == "csv":
        click.echo(csvfile.render([*tables, *details]), nl=False)
    else:
        hidden = "" if show_details or not details else (
            f"{len(details)} more table{'s' if len(details) > 1 else ''} ({details_summary or 'the detail'}): "
            "add --all")
        terminal.render(lines, [*tables, *(details if show_details else ())], alarm=alarm, answer=answer, hint=hidden)
