"""What a reference names, read from disk: a run, a run group, a size sweep, a matrix or a plan; and two of
them compared. Returns the data every format shows (its JSON form); the commands hand it to the reporters.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import kinds
from ..analysis import answers, sweep
from ..analysis.compare import Side, check_metrics, compare
from ..analysis.metrics import GATED
from ..analysis.summary import Summary, across, summarise
from ..contract.status import Status
from ..errors import UserError
from ..store import campaign
from ..store.rundir import GroupDir, RunDir, resolve_entry


@dataclass
class View:
    """One thing to show: its result kind (rssprobe/kinds.py: run, group, scale, matrix, plan) and its data."""

    kind: str
    data: dict[str, Any]
    log_tail: str | None = None  # a run that did not end ok: the last lines of its worker's output


def entry(found: RunDir | GroupDir, rank: int = 0) -> View:
    """A run's (or a run group's) summary."""
    if isinstance(found, GroupDir):
        info = found.info()
        if not found.present():
            raise UserError(f"{found.path}: run group has no runs (none of its {found.repeat()} members is there)")
        summaries = [summarise(r) for r in found.runs()]
        data = {"group": found.id, **info, "runs": summaries, "across": across(summaries)}
        return View(kinds.GROUP.name, {"answer": answers.group(data), **data})
    if rank not in found.ranks() and rank != 0:  # rank 0 without events: shown, and why (incomplete)
        raise UserError(f"{found.path}: no rank {rank} in this run (ranks: {found.ranks()})")
    data = Summary(found, rank).as_dict()
    tail = found.manifest().log_tail if data["status"] != Status.OK else None
    return View(kinds.RUN.name, data, tail)


def view(ref: str, rank: int = 0) -> View:
    """Whatever REF names: a campaign directory (its fit or its table), or a run or group (its summary)."""
    kind = kinds.campaign(campaign.kind_of(Path(ref)))
    if kind is None:
        return entry(resolve_entry(ref), rank)
    if kind.table is None or kind.result is None:
        raise UserError(str(kind.not_shown).format(ref=str(Path(ref))))
    return View(kind.result, kinds.load(kind.table)(Path(ref)))


@dataclass
class Compared:
    kind: str  # a result kind (rssprobe/kinds.py): comparison (two runs or groups), sweep comparison (two sweeps)
    data: dict[str, Any]


def refs(a_ref: str, b_ref: str, threshold: float, alpha: float, force: bool, gated: tuple[str, ...],
         allow_different_scripts: bool = False) -> Compared:
    """`diff` (and `gate` on stored sides): two runs or groups, or two size sweeps (slope and fixed part
    judged apart)."""
    found = [kinds.campaign(campaign.kind_of(Path(r))) for r in (a_ref, b_ref)]
    if any(k is not None and k.compared for k in found):  # two size sweeps (the other side checked there)
        return Compared(kinds.SWEEP_COMPARISON.name,
                        sweep.compare(a_ref, b_ref, gated, threshold, force=force).as_dict())
    for ref, kind in zip((a_ref, b_ref), found, strict=True):
        if kind is not None and kind.by_cell:
            raise UserError(f"{ref}: a {kind.name} directory compares cell by cell: diff {ref}/CELL_A {ref}/CELL_B")
    a, b = Side.load(a_ref), Side.load(b_ref)
    check_metrics("--metric", [] if tuple(gated) == GATED else gated, [a, b])
    result = compare(a, b, threshold, alpha, force, gated, allow_different_scripts)
    return Compared(kinds.COMPARISON.name, result.as_dict())
