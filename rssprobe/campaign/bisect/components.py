"""Bisect over the components of a patch set: the smallest subset that still moves the figure.

The full set is the bad endpoint: it is tested first (ddmin needs it to show the change),
and the way it moved is the way a subset must move to count.
"""

from __future__ import annotations

from ...contract.interventions import expand
from ...errors import UserError
from ...store import layout
from ..matrix import Outcome
from . import search
from .rounds import Runner, bpp

REFERENCE = "00-baseline"


def components(text: str) -> list[str]:
    """--components SET|A,B,...: the interventions, expanded; UserError for none or an unknown one."""
    names = [c.strip() for c in text.split(",") if c.strip()]
    if not names:
        raise UserError(f"--components {text!r}: names no intervention (give a set such as pr8132, or A,B)")
    try:
        return expand(names)
    except KeyError as e:
        raise UserError(f"--components {text}: unknown intervention {e} (see `rssprobe patches`)") from None


def bisect_components(runner: Runner, text: str, worker: tuple[str, str | None], retries: int) -> Outcome:
    items = components(text)
    runner.direction = None  # the full set, tested first, says which way is bad
    runner.round(REFERENCE, "baseline", worker, [])
    runner.reference(REFERENCE)
    keys: dict[tuple[str, ...], str] = {}

    def test(subset: list[str]) -> bool:
        key = keys.setdefault(tuple(subset), f"{len(keys) + 1:02d}-{layout.slug('+'.join(subset), 60)}")
        for _ in range(retries + 1):
            runner.round(key, "+".join(subset), worker, subset)
            answer = runner.judge(REFERENCE, key, " + ".join(subset))
            if answer != "undecided":
                return answer == "moved"
        return False

    lines = [f"bisect components {', '.join(items)} on {runner.scen.name}: {runner.metric}, threshold "
             f"{runner.threshold} B/param against the unpatched baseline"]
    try:
        result = search.ddmin(items, test)
    except ValueError:
        lines.append(f"the full set does not move {runner.metric}: nothing to narrow down")
        return runner.report(lines, "baseline", None, None, {"mode": "components", "status": "unchanged",
                                                             "probes": runner.log})
    after = keys[tuple(result.minimal)]
    lines.append(f"CULPRIT: {' + '.join(result.minimal)} ({len(result.tests)} subsets tested): {runner.metric} "
                 f"{bpp(runner.mean(REFERENCE))} -> {bpp(runner.mean(after))} B/param")
    data = {"mode": "components", "status": "found", "components": items, "minimal": result.minimal,
            "tests": [{"subset": s, "shows_change": v} for s, v in result.tests], "probes": runner.log}
    return runner.report(lines, "baseline", REFERENCE, after, data)
