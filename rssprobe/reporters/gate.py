"""A gate's decision published: the report in the chosen format, one JUnit test case per decided figure,
and the markdown verdict appended to $GITHUB_STEP_SUMMARY when that is set (GitHub Actions' job summary).

The JUnit file and the step summary are optional outputs: one that cannot be written (a directory, a missing
directory, no permission, a full disk) is a warning on stderr, and the verdict's exit code stands (a PASS that
ended in a traceback would read as a regression to CI and to `git bisect run`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .. import verdicts
from . import junit, markdown
from .output import emit
from .show import comparison, comparison_markdown, scale_comparison
from .table import Table


def optional(what: str, path: str | Path, write: Callable[[], None]) -> None:
    """Write an optional output; if it cannot be written, say so on stderr and go on."""
    try:
        write()
    except OSError as e:
        click.echo(f"rssprobe: warning: {what} {path} not written ({e.strerror or e}); the verdict and its exit code "
                   "stand", err=True)


def publish(markdown_text: str) -> None:
    """Append to the GitHub Actions job summary, when running there."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        def append() -> None:
            with open(summary, "a") as f:
                f.write(markdown_text + "\n")

        optional("$GITHUB_STEP_SUMMARY", summary, append)


def _limits(data: dict[str, Any], fmt: str) -> None:
    table = Table(f"Ceilings from {data['limits']} (bytes per parameter)", ["figure", "limit", "values", "verdict"],
                  [[c["metric"], f"{c['limit']:.2f}", ", ".join(f"{v:.2f}" for v in c["values"]) or "n/a",
                    c["verdict"]] for c in data["checks"]])
    lines = [f"gate {data['side']} against {data['limits']}: verdict {data['verdict'].upper()}",
             *[f"WARNING: {p}" for p in data["problems"]]]
    emit(fmt, {k: v for k, v in data.items() if k not in ("side", "limits")}, lines, [table],
         alarm=verdicts.exit_code(data["verdict"]) != 0, answer=data["answer"])
    publish(markdown.render(lines, [table], data["answer"]))


def show(kind: str, data: dict[str, Any], cases: list[tuple[str, str, str]], fmt: str,
         junit_file: Path | None, show_all: bool = False) -> None:
    """Publish a gate's result (workflows.gate.GateResult's kind, data and cases)."""
    if kind == "limits":
        _limits(data, fmt)
    elif kind == "sweeps":
        publish(markdown.render(*scale_comparison(data, fmt), data["answer"]))
    else:
        comparison(data, fmt, show_all=show_all)
        publish(comparison_markdown(data))
    if junit_file:
        optional("--junit", junit_file, lambda: junit.write(junit_file, "rssprobe.gate", cases))
