"""rssprobe diff A B: two runs or run groups as report tables, with a noise-aware verdict."""

from __future__ import annotations

import click

from .. import scale
from ..analysis import stats
from ..analysis.compare import GATED, Side, compare
from ..reporters import diffviews, markdown, scaleviews
from .show import FORMATS, emit


@click.command("diff")
@click.argument("a_ref", metavar="A")
@click.argument("b_ref", metavar="B")
@click.option("--threshold", default=stats.THRESHOLD, show_default=True, type=float,
              help="Smallest change that matters, bytes per parameter.")
@click.option("--alpha", default=stats.ALPHA, show_default=True, type=float, help="Significance level.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="terminal")
@click.option("--all-sites", is_flag=True, help="Every site figure, also those below the threshold.")
@click.option("--force", is_flag=True, help="Compare runs of different scenarios.")
@click.option("--metric", "metrics", multiple=True, metavar="PATTERN",
              help=f"Figures that decide the verdict (glob; default {', '.join(GATED)}).")
def command(a_ref: str, b_ref: str, threshold: float, alpha: float, fmt: str, all_sites: bool, force: bool,
            metrics: tuple[str, ...]) -> None:
    """Compare B against A (runs, groups or two scale directories: paths, ids, 'latest')."""
    if scale.ScaleDir.is_scale(a_ref) or scale.ScaleDir.is_scale(b_ref):
        render_scale(scale.compare(a_ref, b_ref, tuple(metrics) or GATED, threshold, force=force).as_dict(), fmt,
                     all_sites)
        return
    result = compare(Side.load(a_ref), Side.load(b_ref), threshold, alpha, force, tuple(metrics) or GATED).as_dict()
    render(result, fmt, all_sites)


def render(result: dict, fmt: str, all_sites: bool = False) -> None:
    lines = diffviews.header_lines(result)
    tables = diffviews.tables(result, all_sites or fmt in ("json", "csv"))
    if fmt == "markdown":
        click.echo(diffviews.verdict_paragraph(result) + "\n\n" + markdown.render(lines, tables), nl=False)
    else:
        if fmt == "terminal":
            lines = [*lines, f"verdict: {result['verdict'].upper()}"]
        emit(fmt, result, lines, tables, alarm=result["verdict"] in ("regression", "undecided"))


def render_scale(result: dict, fmt: str, all_sites: bool = False) -> tuple[list[str], list]:
    """Two size sweeps: slope and fixed part of every figure, each with its own verdict; (lines, tables) shown."""
    lines = [*scaleviews.diff_header_lines(result), scaleviews.verdict_line(result)]
    tables = [scaleviews.diff_table(result, all_sites or fmt in ("json", "csv"))]
    emit(fmt, result, lines, tables, alarm=result["verdict"] in ("regression", "undecided"))
    return lines, tables
