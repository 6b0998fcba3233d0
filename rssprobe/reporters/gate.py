"""A gate's decision shown: the report in the chosen format; the markdown verdict for $GITHUB_STEP_SUMMARY
(GitHub Actions' job summary) and the JUnit cases are returned for the command to write (workflows/gate.py:
optional outputs, written through store/outputs.py)."""

from __future__ import annotations

from typing import Any

from .. import verdicts
from ..analysis.results import GateLimits
from . import markdown
from .output import emit
from .show import comparison, comparison_markdown, scale_comparison
from .table import Table


def _limits(data: GateLimits, fmt: str) -> str:
    table = Table(f"Ceilings from {data['limits']} (bytes per parameter)", ["figure", "limit", "values", "verdict"],
                  [[c["metric"], f"{c['limit']:.2f}", ", ".join(f"{v:.2f}" for v in c["values"]) or "n/a",
                    c["verdict"]] for c in data["checks"]])
    lines = [f"gate {data['side']} against {data['limits']}: verdict {data['verdict'].upper()}",
             *[f"WARNING: {p}" for p in data["problems"]]]
    emit(fmt, data, lines, [table],
         alarm=verdicts.exit_code(data["verdict"]) != 0, answer=data["answer"])
    return markdown.render(lines, [table], data["answer"])


def show(kind: str, data: Any, fmt: str, show_all: bool = False) -> str:
    """Print a gate's result (workflows.gate.GateResult's kind and data); the markdown for the job summary."""
    if kind == "limits":
        return _limits(data, fmt)
    if kind == "sweeps":
        return markdown.render(*scale_comparison(data, fmt), data["answer"])
    comparison(data, fmt, show_all=show_all)
    return comparison_markdown(data)
