"""rssprobe diff A B: two runs, run groups or size sweeps as report tables, with a noise-aware verdict."""

from __future__ import annotations

import sys

import click

from .. import verdicts
from ..analysis.metrics import GATED
from ..reporters import show
from ..workflows import inspect
from . import common_args
from .common_args import alpha_option, format_option, threshold_option


@click.command("diff", epilog=common_args.examples(
    "rssprobe diff runs/base runs/pr8132",
    "rssprobe diff runs/base runs/pr8132 --format markdown > review.md"))
@click.argument("a_ref", metavar="A")
@click.argument("b_ref", metavar="B")
@threshold_option()
@alpha_option()
@format_option()
@common_args.all_option
@click.option("--all-sites", is_flag=True, help="Every site figure, also those below the threshold.")
@click.option("--force", is_flag=True, help="Compare runs of different scenarios.")
@common_args.allow_different_scripts_option
@click.option("--metric", "metrics", multiple=True, metavar="PATTERN",
              help=f"Figures that decide the verdict (glob; default {', '.join(GATED)}).")
def command(a_ref: str, b_ref: str, threshold: float, alpha: float, fmt: str, show_all: bool, all_sites: bool,
            force: bool, allow_different_scripts: bool, metrics: tuple[str, ...]) -> None:
    """Compare B against A (runs or groups: paths, ids, 'latest'; or two scale directories).

    Exit 0 once shown; 125 (undecided) when a side cannot be compared: a failed or incomplete run, a patch
    that never took effect, no gated figure in both. A verdict on the figures is the gate's to exit on."""
    result = inspect.refs(a_ref, b_ref, threshold, alpha, force, tuple(metrics) or GATED, allow_different_scripts)
    show.compared(result.kind, result.data, fmt, all_sites, show_all)
    if result.data["problems"]:
        sys.exit(verdicts.exit_code("undecided"))
