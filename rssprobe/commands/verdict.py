"""rssprobe verdict: a plan's runs judged against its claims, as a markdown report with its charts (make verdict)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click

from ..reporters import verdict as page
from ..store import outputs
from ..workflows import verdict
from . import common_args


@click.command("verdict", epilog=common_args.examples(
    "rssprobe verdict reports/issue7693/plan.toml --runs reports/matrix/issue7693",
    "rssprobe verdict plan.toml --runs merged-shards --out review/verdict.md"))
@click.argument("plan_file", metavar="PLAN", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--runs", type=click.Path(path_type=Path), required=True,
              help="The plan's run directory (rssprobe matrix --plan PLAN --out DIR, or a merge of its shards).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("reports/issue7693-verdict.md"),
              show_default=True, help="The markdown report; its charts go in a folder beside it.")
def command(plan_file: Path, runs: Path, out: Path) -> None:
    """Judge each claim of PLAN (the B/param it says a configuration holds) against what its runs measured, and
    PR #8132's parts against the baseline of the same configuration."""
    report = verdict.judge(plan_file, runs, out)
    files = page.render(report, out, datetime.now(UTC).isoformat(timespec="seconds"))
    for path in files:  # every file checked before any is written (never over or into an input)
        outputs.check_file(path, "--out")
    for path, data in files.items():
        outputs.write_file(path, data, "--out")
    if not report.measurable:  # the answer, in one line
        click.echo(f"rssprobe: {page.unmeasured(report)} Wrote {out}, which says so.", err=True)
        return
    click.echo(f"wrote {out} (+ {len(files) - 1} PNG files in {out.parent / out.stem})", err=True)
