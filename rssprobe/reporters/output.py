"""Output-format dispatch: (header lines, tables, raw data) -> terminal, JSON, markdown or CSV.

Every command that prints a result goes through emit(), so a format means the same thing
everywhere; show_entry() and show_comparison() are the two views several commands print.
"""

from __future__ import annotations

import click

from .. import storage, verdicts
from ..analysis.summary import Summary
from ..errors import UserError
from . import csvfile, diffviews, jsonfile, markdown, terminal, views

FORMATS = ["terminal", "json", "markdown", "csv"]


def emit(fmt: str, data: object, lines: list[str], tables: list[views.Table], alarm: bool) -> None:
    """One place that turns (header lines, tables, raw data) into the chosen format."""
    if fmt == "json":
        click.echo(jsonfile.render(data), nl=False)
    elif fmt == "markdown":
        click.echo(markdown.render(lines, tables), nl=False)
    elif fmt == "csv":
        click.echo(csvfile.render(tables), nl=False)
    else:
        terminal.render(lines, tables, alarm=alarm)


def show_entry(entry: storage.RunDir | storage.GroupDir, fmt: str, all_sites: bool = False, rank: int = 0) -> None:
    """A run's (or a run group's) summary."""
    if isinstance(entry, storage.GroupDir):
        summaries = [Summary(r).as_dict() for r in entry.runs()]
        data = {"group": entry.id, **entry.info(), "runs": summaries}
        lines = [f"group {entry.id}: {len(summaries)} runs of {entry.info()['scenario']} "
                 f"[{entry.info()['label']}]"] + [views.header_lines(s)[0] for s in summaries]
        bad = any(s["status"] != "ok" or s["never_took_effect"] for s in summaries)
        emit(fmt, data, lines, [views.group_table(summaries)], bad)
        return
    if rank not in entry.ranks():
        raise UserError(f"{entry.path}: no rank {rank} in this run (ranks: {entry.ranks()})")
    data = Summary(entry, rank).as_dict()
    tables = views.run_tables(data, all_sites=all_sites or fmt in ("csv", "json"))
    emit(fmt, data, views.header_lines(data), tables, data["status"] != "ok" or bool(data["never_took_effect"]))
    tail = entry.manifest().get("log_tail")
    if fmt == "terminal" and data["status"] != "ok" and tail:
        click.echo(f"last lines of the worker's output ({entry.path}/worker*.log):\n{tail}", err=True)


def show_comparison(result: dict, fmt: str, all_sites: bool = False) -> None:
    """A comparison (analysis.compare.Result.as_dict()) as diff and gate print it."""
    lines = diffviews.header_lines(result)
    tables = diffviews.tables(result, all_sites or fmt in ("json", "csv"))
    if fmt == "markdown":
        click.echo(diffviews.verdict_paragraph(result) + "\n\n" + markdown.render(lines, tables), nl=False)
    else:
        if fmt == "terminal":
            lines = [*lines, f"verdict: {result['verdict'].upper()}"]
        emit(fmt, result, lines, tables, alarm=verdicts.exit_code(result["verdict"]) != 0)
