"""Reading a run of reports/your-job's archive for its page's sections (tools/evidence/your_job.py and
your_job_finetune.py): its events, a census, its Summary, a figure as the page prints it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rssprobe.analysis.summary import Summary
from rssprobe.errors import UserError
from rssprobe.store.rundir import RunDir

MIB = 2**20


def events(run: Path, rank: int = 0) -> list[dict[str, Any]]:
    name = "events.jsonl" if rank == 0 else f"events.rank{rank}.jsonl"
    path = run / name
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def census(run: Path, at: str, rank: int = 0) -> dict[str, Any] | None:
    return next((e for e in events(run, rank) if e["event"] == "census" and e["at"] == at), None)


def summary(run: Path, rank: int = 0) -> Summary | None:
    try:
        return Summary(RunDir(run), rank) if (run / "manifest.json").exists() else None
    except UserError:
        return None


def fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"
