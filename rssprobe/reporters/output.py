"""Output-format dispatch: (header lines, tables, raw data) -> terminal, JSON, markdown or CSV.

Every command that prints a result goes through emit(), so a format means the same thing
everywhere; show_entry() and show_comparison() are the two views several commands print.
"""

from __future__ import annotations

import click

from .. import scale, storage, verdicts
from ..analysis.compare import Side, compare
from ..analysis.summary import Summary
from ..errors import UserError
from . import csvfile, diffviews, jsonfile, markdown, scaleviews, terminal, views

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
        info = entry.info()
        summaries = [Summary(r).as_dict() for r in entry.runs()]
        data = {"group": entry.id, **info, "runs": summaries}
        lines = [f"group {entry.id}: {len(summaries)} runs of {info['scenario']} "
                 f"[{info['label']}]"] + [views.header_lines(s)[0] for s in summaries]
        bad = any(s["status"] != "ok" or s["never_took_effect"] for s in summaries)
        tables = [status_table(summaries)] if fmt == "csv" else []
        emit(fmt, data, lines, [*tables, views.group_table(summaries)], bad)
        return
    if rank not in entry.ranks() and rank != 0:  # rank 0 without events: shown, and why (incomplete)
        raise UserError(f"{entry.path}: no rank {rank} in this run (ranks: {entry.ranks()})")
    data = Summary(entry, rank).as_dict()
    tables = views.run_tables(data, all_sites=all_sites or fmt in ("csv", "json"))
    if fmt == "csv":  # the header lines, which carry the status, are not part of CSV
        tables = [status_table([data]), *tables]
    emit(fmt, data, views.header_lines(data), tables, data["status"] != "ok" or bool(data["never_took_effect"]))
    tail = entry.manifest().get("log_tail")
    if fmt == "terminal" and data["status"] != "ok" and tail:
        click.echo(f"last lines of the worker's output ({entry.path}/worker*.log):\n{tail}", err=True)


def status_table(summaries: list[dict]) -> views.Table:
    """Each run's status (ok, failed, incomplete, running, ...) and why, as a table (CSV has no header lines)."""
    return views.Table("Status", ["run", "status", "reason", "steps", "zero"],
                       [[s["run"], s["status"], s.get("error") or "", f"{s['steps_done']}/{s['steps_requested']}",
                         views.zero_line(s)] for s in summaries])


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


def show_ref(ref: str, fmt: str, all_sites: bool = False, rank: int = 0) -> None:
    """Whatever REF names: a scale directory (its fit), or a run or group (its summary)."""
    if scale.ScaleDir.is_scale(ref):
        show_scale(ref, fmt, all_sites)
    else:
        show_entry(storage.resolve_entry(ref), fmt, all_sites, rank)


def show_scale(ref: str, fmt: str, all_sites: bool = False) -> dict:
    """A scale directory: the fit of every figure over the sweep's sizes (returned as shown in JSON)."""
    data = scale.Sweep.load(ref).as_dict()
    tables = [scaleviews.fit_table(data, all_sites or fmt in ("csv", "json")), scaleviews.sizes_table(data)]
    emit(fmt, data, scaleviews.header_lines(data), tables, alarm=bool(data["problems"]))
    return data


def show_scale_comparison(result: dict, fmt: str, all_sites: bool = False) -> tuple[list[str], list[views.Table]]:
    """Two size sweeps: slope and fixed part of every figure, each with its own verdict; (lines, tables) shown."""
    lines = [*scaleviews.diff_header_lines(result), scaleviews.verdict_line(result)]
    tables = [scaleviews.diff_table(result, all_sites or fmt in ("json", "csv"))]
    emit(fmt, result, lines, tables, alarm=verdicts.exit_code(result["verdict"]) != 0)
    return lines, tables


def compare_refs(a_ref: str, b_ref: str, threshold: float, alpha: float, force: bool, gated: tuple[str, ...],
                 fmt: str, all_sites: bool = False, allow_different_scripts: bool = False) -> dict:
    """`diff` (and `gate` on stored sides): two runs or groups, or two size sweeps (slope and fixed part
    judged apart); shows the comparison and returns it as JSON shows it."""
    if scale.ScaleDir.is_scale(a_ref) or scale.ScaleDir.is_scale(b_ref):
        result = scale.compare(a_ref, b_ref, gated, threshold, force=force).as_dict()
        show_scale_comparison(result, fmt, all_sites)
    else:
        result = compare(Side.load(a_ref), Side.load(b_ref), threshold, alpha, force, gated,
                         allow_different_scripts).as_dict()
        show_comparison(result, fmt, all_sites)
    return result
