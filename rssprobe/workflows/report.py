"""What a report page shows: every run that the references name (a run, a group, a size sweep, a matrix or
a plan: each member run once), with its summary and per-step table, and the fits of the size sweeps."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from .. import kinds
from ..analysis import stats
from ..analysis.metrics import GATED
from ..analysis.summary import Summary
from ..analysis.sweep import Sweep
from ..analysis.tables import read_steps, steps_frame
from ..contract.files import STEPS
from ..errors import UserError
from ..store import campaign, claim, layout, outputs
from ..store.rundir import GroupDir, RunDir, resolve_runs
from . import inspect


@dataclass
class RunPage:
    summary: dict[str, Any]  # Summary.as_dict()
    baseline: dict[str, Any] | None  # the pre_model phase event (the charts' glibc baseline)
    steps: pd.DataFrame
    side: str | None = None  # "A" or "B" when the report compares two runs or groups
    side_name: str = ""  # "A: baseline (3 runs)"


@dataclass
class Pages:
    """Everything one report shows, and where it goes."""

    runs: list[RunPage]
    sweeps: list[Sweep] = field(default_factory=list)
    html: Path = Path()
    out: Path | None = None
    comparison: dict[str, Any] | None = None  # two runs or groups: what `diff A B` says (compare.Result.as_dict())
    answer: list[str] = field(default_factory=list)  # what the page opens with
    verdict: str | None = None  # the comparison's, for the page's colour


def steps_table(run: RunDir, summary: Summary) -> pd.DataFrame:
    """steps.parquet when the run wrote it (the normal end), else the same table from the events."""
    path = run.path / STEPS
    return read_steps(path) if path.exists() else steps_frame(summary.events)


def _members(ref: str) -> list[RunDir]:
    kind = kinds.campaign(campaign.kind_of(Path(ref)))
    if kind is not None and kind.table is not None:  # a campaign shown whole: every run of every group
        index = campaign.read_index(Path(ref), kind.name)
        groups = [Path(ref) / campaign.entry_dir(index, e) for e in campaign.entries(index)]
        return [r for g in groups if GroupDir.is_group(g) for r in GroupDir(g).runs()]
    return resolve_runs(ref)[1]


def _default_html() -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = layout.reports_root() / f"report-{stamp}.html"
    n = 2
    while path.exists():  # two reports in one second must not overwrite each other
        path = layout.reports_root() / f"report-{stamp}-{n}.html"
        n += 1
    return path


def collect(refs: list[str], out: Path | None = None, html_file: Path | None = None) -> Pages:
    """Resolve every ref first, so a typo in the last one fails before any work is done; HTML to html_file,
    else out/report.html, else reports/report-<stamp>.html."""
    if not refs:
        raise UserError("report: name at least one run (a run directory, an id under reports/runs, or 'latest')")
    if out is not None and os.path.lexists(out) and not os.path.isdir(out):
        raise UserError(f"{out}: --out must be a directory")
    runs: list[tuple[RunDir, int]] = []  # each member once, with the index of the ref that named it first
    for i, ref in enumerate(refs):
        if os.path.exists(ref):
            outputs.note(ref)  # an input (an id or 'latest' is noted where it resolves): nothing written into it
        for run in _members(ref):  # a group, a sweep or a campaign contributes every member run
            if run.path.resolve() not in {r.path.resolve() for r, _i in runs}:
                runs.append((run, i))
    sweeps = [Sweep.load(r) for r in refs if (k := kinds.campaign(campaign.kind_of(Path(r)))) and k.compared]
    compared = None
    if len(refs) == 2 and not any(campaign.kind_of(Path(r)) for r in refs):  # two runs or groups: diff first
        compared = inspect.refs(refs[0], refs[1], stats.THRESHOLD, stats.ALPHA, True, GATED,
                                allow_different_scripts=True).data  # a page shows both: no option to ask for
    pages = []
    for run, i in runs:
        summary = Summary(run)
        side = "AB"[i] if compared else None
        who = compared and compared["a" if i == 0 else "b"]
        name = f"{side}: {who['label']} ({who['runs']} run{'s' if who['runs'] != 1 else ''})" if who else ""
        pages.append(RunPage(summary.as_dict(), summary.baseline, steps_table(run, summary), side, name))
    html = html_file or (out / "report.html" if out is not None else _default_html())
    if out is not None:  # over or into an input, a FIFO or a directory: refused before anything is written
        outputs.check_dir(out, "--out")
    outputs.check_file(html, "--html" if html_file is not None else "--out" if out is not None else "report")
    if out is not None:
        claim.claim(out, "report directory")  # one report writes it at a time (released when this one exits)
    answer = compared["answer"] if compared else _answer(refs)
    return Pages(pages, sweeps, html, out, compared, answer, compared["verdict"] if compared else None)


def _answer(refs: list[str]) -> list[str]:
    """A page of one thing opens with that thing's answer; of several, with the first sentence of each."""
    found = [inspect.view(ref).data.get("answer") or [] for ref in refs]
    if len(found) == 1:
        return found[0]
    return [f"A report of {len(refs)} runs, groups or sweeps.", *(a[0] for a in found if a)]
