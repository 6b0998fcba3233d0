"""Output-format dispatch: a View (reporters/view.py: answer, header lines, tables, folded tables, raw data) ->
terminal, JSON, markdown or CSV.

Every command that prints a result renders its view here, so a format means the same thing everywhere: the answer
sentences first (JSON carries them as "answer" in its data), then the context lines, the key tables, and the
detail tables (terminal: only with --all, else a hint; markdown: folded under <details>; CSV: all of them). This
is the one module that calls a format's render (tests/test_views.py holds that).
"""

from __future__ import annotations

import click

from . import csvfile, jsonfile, markdown, terminal
from .view import View

FORMATS = ["terminal", "json", "markdown", "csv"]


def render(fmt: str, view: View, show_details: bool = False) -> None:
    """One place that turns a view into the chosen format, on stdout (a terminal's aside on stderr)."""
    if fmt == "json":
        click.echo(jsonfile.render(view.data), nl=False)
        return
    if fmt == "markdown":
        click.echo(markdown_text(view, show_details), nl=False)
    elif fmt == "csv":
        click.echo(csvfile.render([*view.tables, *view.details]), nl=False)
    else:
        details = view.details
        hidden = "" if show_details or not details else (
            f"{len(details)} more table{'s' if len(details) > 1 else ''} ({view.details_summary or 'the detail'}): "
            "add --all")
        terminal.render(list(view.lines), [*view.tables, *(details if show_details else ())], alarm=view.alarm,
                        answer=tuple(view.answer), hint=hidden)
    if view.closing:
        click.echo(("\n" if fmt == "markdown" else "") + view.closing)
    if fmt == "terminal" and view.aside:
        click.echo(view.aside, err=True)


def markdown_text(view: View, show_details: bool = False) -> str:
    """The view as markdown (stdout's, a job summary's, a report page's): the detail tables folded unless shown."""
    shown = [*view.tables, *(view.details if show_details else ())]
    return markdown.render(list(view.lines), shown, tuple(view.answer), () if show_details else tuple(view.details),
                           view.details_summary)
