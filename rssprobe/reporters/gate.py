"""A gate's decision shown: the report in the chosen format; the markdown verdict for $GITHUB_STEP_SUMMARY
(GitHub Actions' job summary) and the JUnit cases are returned for the command to write (workflows/gate.py:
optional outputs, written through store/outputs.py)."""

from __future__ import annotations

from typing import Any

from .. import kinds, verdicts
from ..analysis.results import GateLimits, SweepComparison
from . import markdown
from .output import emit
from .show import comparison, comparison_markdown, scale_comparison
from .table import Table


def limits(data: GateLimits, fmt: str, show_all: bool = False) -> str:
    """One side against ceilings: each figure's check."""
    table = Table(f"Ceilings from {data['limits']} (bytes per parameter)", ["figure", "limit", "values", "verdict"],
                  [[c["metric"], f"{c['limit']:.2f}", ", ".join(f"{v:.2f}" for v in c["values"]) or "n/a",
                    c["verdict"]] for c in data["checks"]])
    lines = [f"gate {data['side']} against {data['limits']}: verdict {data['verdict'].upper()}",
             *[f"WARNING: {p}" for p in data["problems"]]]
    emit(fmt, data, lines, [table],
         alarm=verdicts.exit_code(data["verdict"]) != 0, answer=data["answer"])
    return markdown.render(lines, [table], data["answer"])


def sweeps(data: SweepComparison, fmt: str, show_all: bool = False) -> str:
    """Two size sweeps: slope and fixed part judged apart."""
    return markdown.render(*scale_comparison(data, fmt), data["answer"])


def runs(data: Any, fmt: str, show_all: bool = False) -> str:
    """Two runs or groups: the comparison as diff prints it."""
    comparison(data, fmt, show_all=show_all)
    return comparison_markdown(data)


def show(kind: str, data: dict[str, Any], fmt: str, show_all: bool = False) -> str:
    """Print a gate's result (workflows.gate.GateResult's kind and data: the view rssprobe/kinds.py names for a
    gate on that result kind); the markdown for the job summary."""
    view = kinds.result(kind).gate_view
    if view is None:
        raise ValueError(f"a gate does not decide on a {kind!r} result (rssprobe/kinds.py)")
    return str(kinds.load(view)(data, fmt, show_all))
