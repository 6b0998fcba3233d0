"""The verdict report of a plan (#7693 / PR #8132): its runs judged against its claims. The numbers are
analysis/claims.py's; the page (markdown and two charts) is reporters/verdict.py's."""

from __future__ import annotations

from pathlib import Path

from ..analysis import claims
from ..errors import UserError
from ..store import outputs


def judge(plan_file: Path, runs: Path, out: Path) -> claims.ClaimsReport:
    """The plan's claims against its runs, once `out` is known to be writable and neither an input nor inside
    one (checked before anything is read: a refusal costs nothing)."""
    for given in (plan_file, runs):
        outputs.note(given)
    outputs.check_file(out, "--out")
    try:
        return claims.collect(plan_file, runs)
    except UserError as e:
        raise UserError(f"{e}; run `rssprobe matrix --plan {plan_file} --out {runs}` first") from None
