"""The verdict report of a plan (#7693 / PR #8132): its runs judged against its claims, written as markdown with
its two charts beside it. The numbers are analysis/claims.py's; the page is reporters/verdict.py's."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from ..analysis import claims
from ..errors import UserError
from ..reporters import verdict as page
from ..store import outputs


def write_report(plan_file: Path, runs: Path, out: Path) -> Path:
    """Write the report to `out` (its charts in a folder named after it); never over or into an input."""
    for given in (plan_file, runs):
        outputs.note(given)
    outputs.check_file(out, "--out")
    try:
        report = claims.collect(plan_file, runs)
    except UserError as e:
        raise UserError(f"{e}; run `rssprobe matrix --plan {plan_file} --out {runs}` first") from None
    return page.write(report, out, datetime.now(timezone.utc).isoformat(timespec="seconds"))
