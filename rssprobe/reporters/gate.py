"""A gate's decision shown: the report in the chosen format; the markdown verdict for $GITHUB_STEP_SUMMARY
(GitHub Actions' job summary: the same view, as markdown) and the JUnit cases are returned for the command to write
(workflows/gate.py: optional outputs, written through store/outputs.py)."""

from __future__ import annotations

from typing import Any

from .. import kinds, verdicts
from ..analysis.results import Comparison, GateLimits, SweepComparison
from . import output
from .show import comparison, scale_comparison
from .table import Table
from .view import View


def limits(data: GateLimits, fmt: str) -> View:
    """One side against ceilings: each figure's check."""
    table = Table(f"Ceilings from {data['limits']} (bytes per parameter)", ["figure", "limit", "values", "verdict"],
                  [[c["metric"], f"{c['limit']:.2f}", ", ".join(f"{v:.2f}" for v in c["values"]) or "n/a",
                    c["verdict"]] for c in data["checks"]])
    lines = [f"gate {data['side']} against {data['limits']}: verdict {data['verdict'].upper()}",
             *[f"WARNING: {p}" for p in data["problems"]]]
    return View(data, lines, [table], alarm=verdicts.exit_code(data["verdict"]) != 0, answer=data["answer"])


def sweeps(data: SweepComparison, fmt: str) -> View:
    """Two size sweeps: slope and fixed part judged apart."""
    return scale_comparison(data, fmt)


def runs(data: Comparison, fmt: str) -> View:
    """Two runs or groups: the comparison as diff prints it."""
    return comparison(data, fmt)


def show(kind: str, data: dict[str, Any], fmt: str, show_all: bool = False) -> str:
    """Print a gate's result (workflows.gate.GateResult's kind and data: the view rssprobe/kinds.py names for a
    gate on that result kind); return the job summary: that view made for markdown, its details folded."""
    ref = kinds.result(kind).gate_view
    if ref is None:
        raise ValueError(f"a gate does not decide on a {kind!r} result (rssprobe/kinds.py)")
    view = kinds.load(ref)
    output.render(fmt, view(data, fmt), show_all)
    return output.markdown_text(view(data, "markdown"))
