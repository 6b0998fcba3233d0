"""The kinds of campaign and of result, and what each one means to every reader, in one table.

A campaign kind (matrix, plan, scale, bisect) is a directory with an index: the store finds and checks it, `show`
prints its table, `report` charts its runs, `diff` compares two of it (or refuses to), `merge` joins its shards.
A result kind (run, group, comparison, ...) is what a workflow returns and a reporter renders: its declaration
lives in analysis/results.py, its view in reporters/. Every reader dispatches on the entry here, so no module
outside this one compares a kind's name (tests/test_kinds.py holds that).

Behaviour stays in its own layer: an entry names it as "module:function", resolved on use (`load`) by the layer
that calls it, never by a lower one (tests/test_kinds.py checks each reference lies in the layer its field says).
Adding a kind: one entry here, plus its module in each layer it needs (docs/developing.md: "Where a new thing
goes").

Top level beside verdicts.py, for the same reason: the store (the lowest reader) and the reporters (whose door
admits only analysis, the contract and the verdicts) both read it. Standard library only.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ResultKind:
    """What a workflow returns and a reporter renders."""

    name: str
    declared: str  # its TypedDict in rssprobe/analysis/results.py (held to real outputs by tests/test_results.py)
    # "module:function(data, fmt, **options) -> View" of reporters/ that shows it (reporters/view.py; rendered in
    # each format by reporters/output.py); None: nested only
    view: str | None = None
    options: tuple[str, ...] = ()  # which of show's options (all_sites, log_tail) its view takes
    gate_view: str | None = None  # "module:function(data, fmt) -> View" when `gate` decides on it


@dataclass(frozen=True)
class CampaignKind:
    """A campaign directory's kind: its index on disk and who reads it."""

    name: str
    index: str  # the index file in the directory (store/campaign.py reads and writes it)
    members: str  # the index's list of group entries
    member_dir: str  # the key of an entry that names its group's directory (under the campaign directory)
    member_fields: tuple[tuple[str, type], ...] = ()  # what each entry must hold to be read ((): not checked)
    counts: tuple[str, ...] = ()  # index keys that, when present, are counts of runs (>= 1)
    marker: str | None = None  # a file beside the index that makes a directory this kind, not another with its index
    table: str | None = None  # "module:function(directory) -> result" that `show DIR` prints; None: not shown whole
    result: str | None = None  # the result kind of its table
    listing: str | None = None  # the result kind of its dry run (--dry-run)
    compared: str | None = None  # the result kind when `diff` compares two of it; None: not compared whole
    by_cell: bool = False  # its groups are cells, compared one by one (diff DIR/CELL_A DIR/CELL_B)
    mergeable: bool = False  # `merge` joins its shards
    not_shown: str | None = None  # why `show DIR` shows no table, and where its result is ({ref} is the directory)


RESULTS: tuple[ResultKind, ...] = (
    ResultKind("run", "RunSummary", "rssprobe.reporters.show:run", ("all_sites", "log_tail")),
    ResultKind("group", "GroupView", "rssprobe.reporters.show:group"),
    ResultKind("scale", "ScaleSweep", "rssprobe.reporters.show:scale", ("all_sites",)),
    ResultKind("comparison", "Comparison", "rssprobe.reporters.show:comparison", ("all_sites",),
               gate_view="rssprobe.reporters.gate:runs"),
    ResultKind("side", "SideDescription"),
    ResultKind("figure comparison", "FigureComparison"),
    ResultKind("estimate", "Estimate", "rssprobe.reporters.estimateviews:show"),
    ResultKind("matrix", "MatrixTable", "rssprobe.reporters.show:matrix"),
    ResultKind("plan", "PlanTable", "rssprobe.reporters.show:plan"),
    ResultKind("matrix-list", "MatrixListing", "rssprobe.reporters.show:matrix_list"),
    ResultKind("plan-list", "PlanListing", "rssprobe.reporters.show:plan_list"),
    ResultKind("sweep comparison", "SweepComparison", "rssprobe.reporters.show:scale_comparison", ("all_sites",),
               gate_view="rssprobe.reporters.gate:sweeps"),
    ResultKind("limits", "GateLimits", gate_view="rssprobe.reporters.gate:limits"),
    ResultKind("merge", "Merged", "rssprobe.reporters.show:merged"),
    ResultKind("bisect versions", "BisectVersions", "rssprobe.reporters.show:bisect"),
    ResultKind("bisect components", "BisectComponents", "rssprobe.reporters.show:bisect"),
    ResultKind("bisect commits", "BisectCommits", "rssprobe.reporters.show:bisect"),
)

CAMPAIGNS: tuple[CampaignKind, ...] = (
    CampaignKind("matrix", "matrix.json", "cells", "id", (("id", str), ("status", str)),
                 table="rssprobe.campaign.matrix:table", result="matrix", listing="matrix-list", by_cell=True,
                 mergeable=True),
    CampaignKind("plan", "matrix.json", "cells", "id", (("id", str), ("status", str)), marker="plan.json",
                 table="rssprobe.campaign.plan:table", result="plan", listing="plan-list", by_cell=True,
                 mergeable=True),
    CampaignKind("scale", "scale.json", "groups", "dir", (("params", int), ("dir", str)), counts=("repeat",),
                 table="rssprobe.analysis.sweep:table", result="scale", compared="sweep comparison",
                 mergeable=True),
    CampaignKind("bisect", "definition.json", "rounds", "id",
                 not_shown="{ref}: a bisect directory; its result is {ref}/bisect.json, its rounds are groups "
                           "(show DIR/CONFIG/round-N)"),
)

_RESULTS = {k.name: k for k in RESULTS}
_CAMPAIGNS = {k.name: k for k in CAMPAIGNS}
CAMPAIGN_NAMES = frozenset(_CAMPAIGNS)

# each kind by name, for the code that makes one (a producer names its kind through these, never by a string)
RUN, GROUP, SCALE_SWEEP, COMPARISON = (_RESULTS[n] for n in ("run", "group", "scale", "comparison"))
SWEEP_COMPARISON, LIMITS, MERGE = (_RESULTS[n] for n in ("sweep comparison", "limits", "merge"))
MATRIX, PLAN, SCALE, BISECT = (_CAMPAIGNS[n] for n in ("matrix", "plan", "scale", "bisect"))


def result(name: str) -> ResultKind:
    """The result kind of this name (KeyError: a name no entry declares, a bug rather than an input)."""
    return _RESULTS[name]


def campaign(name: str | None) -> CampaignKind | None:
    """The campaign kind of this name; None for None (a directory that is no campaign)."""
    return None if name is None else _CAMPAIGNS[name]


def campaign_kind(name: str) -> CampaignKind:
    """The campaign kind of this name (KeyError: no entry; an index's stated kind is checked before: store)."""
    return _CAMPAIGNS[name]


def campaign_result(name: str) -> str | None:
    """The result kind a campaign's table is (None: it has none)."""
    return _CAMPAIGNS[name].result


def mergeable() -> tuple[str, ...]:
    return tuple(k.name for k in CAMPAIGNS if k.mergeable)


def load(ref: str) -> Callable[..., Any]:
    """The function an entry names ("package.module:function"), imported now: by the layer that calls it."""
    module, _, name = ref.partition(":")
    target: Any = importlib.import_module(module)
    for part in name.split("."):
        target = getattr(target, part)
    return target
