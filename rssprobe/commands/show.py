"""rssprobe show: a run's (or a run group's) summary again, from disk, in any format."""

from __future__ import annotations

import click

from .. import scale, storage
from ..analysis.summary import Summary
from ..errors import UserError
from ..reporters import csvfile, jsonfile, markdown, scaleviews, terminal, views

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


def print_scale(ref: str, fmt: str, all_sites: bool = False) -> dict:
    """A scale directory: the fit of every figure over the sweep's sizes (returned as shown in JSON)."""
    data = scale.Sweep.load(ref).as_dict()
    tables = [scaleviews.fit_table(data, all_sites or fmt in ("csv", "json")), scaleviews.sizes_table(data)]
    emit(fmt, data, scaleviews.header_lines(data), tables, alarm=bool(data["problems"]))
    return data


def print_summary(entry: storage.RunDir | storage.GroupDir, fmt: str, all_sites: bool = False,
                  rank: int = 0) -> None:
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


@click.command("show")
@click.argument("ref", metavar="RUN", default="latest")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="terminal")
@click.option("--all-sites", is_flag=True, help="Every site row, also those with all figures near zero.")
@click.option("--rank", default=0, show_default=True, help="Which rank's tables (multi-rank runs).")
def command(ref: str, fmt: str, all_sites: bool, rank: int) -> None:
    """Show RUN (a run, group or scale directory, an id under reports/runs, or 'latest')."""
    if scale.ScaleDir.is_scale(ref):
        print_scale(ref, fmt, all_sites)
        return
    print_summary(storage.resolve_entry(ref), fmt, all_sites, rank)
