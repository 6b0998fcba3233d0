"""rssprobe show: a run's summary again, from disk, in any format."""

from __future__ import annotations

import click

from .. import storage
from ..analysis.summary import Summary
from ..reporters import csvfile, jsonfile, markdown, terminal, views

FORMATS = ["terminal", "json", "markdown", "csv"]


def print_summary(run: storage.RunDir, fmt: str, all_sites: bool = False) -> None:
    data = Summary(run).as_dict()
    lines = views.header_lines(data)
    tables = views.run_tables(data, all_sites=all_sites or fmt in ("csv", "json"))
    if fmt == "json":
        click.echo(jsonfile.render(data), nl=False)
    elif fmt == "markdown":
        click.echo(markdown.render(lines, tables), nl=False)
    elif fmt == "csv":
        click.echo(csvfile.render(tables), nl=False)
    else:
        terminal.render(lines, tables, alarm=data["status"] != "ok" or bool(data["never_took_effect"]))


@click.command("show")
@click.argument("run_ref", metavar="RUN", default="latest")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="terminal")
@click.option("--all-sites", is_flag=True, help="Every site row, also those with all figures near zero.")
def command(run_ref: str, fmt: str, all_sites: bool) -> None:
    """Show RUN (a run directory, an id under reports/runs, or 'latest')."""
    print_summary(storage.resolve(run_ref), fmt, all_sites)
