"""rssprobe report: one or more runs as a self-contained HTML page (and, with --out, PNGs + markdown)."""

from __future__ import annotations

from pathlib import Path

import click

from ..reporters import report as page
from ..store import outputs
from ..workflows import report
from . import common_args


def write_report(refs: list[str], out: Path | None = None, html_file: Path | None = None,
                 all_sites: bool = False) -> page.Written:
    """The report for refs; HTML to html_file, else out/report.html, else reports/report-<stamp>.html. Every
    file is checked before any is written (never over or into an input, a FIFO or a directory)."""
    pages = report.collect(refs, out, html_file)
    written, files = page.render(pages, all_sites)
    flags = {path: "--html" if html_file is not None and path == written.html else "--out" if out is not None
             else "report" for path in files}
    for path in files:
        outputs.check_file(path, flags[path])
    for path, data in files.items():
        outputs.write_file(path, data, flags[path])
    return written


@click.command("report", epilog=common_args.examples(
    "rssprobe report runs/base runs/pr8132 --out report/",
    "rssprobe report reports/scale/DIR"))
@click.argument("run_refs", metavar="RUN...", nargs=-1)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Also write the PNG charts and report.md here (and report.html unless --html says otherwise).")
@click.option("--html", "html_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the HTML page to this file (default: reports/report-<timestamp>.html).")
@click.option("--all-sites", is_flag=True, help="Every site row, also those with all figures near zero.")
def command(run_refs: tuple[str, ...], out: Path | None, html_file: Path | None, all_sites: bool) -> None:
    """Report on RUN... (run directories, groups, scale or campaign directories, ids under reports/runs, or
    'latest'): charts and tables, one HTML file."""
    written = write_report(list(run_refs), out, html_file, all_sites)
    click.echo(f"HTML report: {written.html}")
    if written.markdown is not None:
        click.echo(f"markdown: {written.markdown} (+ {len(written.images)} PNG files in {written.markdown.parent})")
