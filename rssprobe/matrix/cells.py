"""The run matrix as data: the cells of a cartesian product, their index on disk, their figures.

<matrix root>/<name>/matrix.json indexes the cells; each cell is a run group in
<name>/<cell-id>/ (rssprobe.layout).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

from .. import layout, storage
from ..analysis import stats
from ..analysis.compare import Side
from ..errors import UserError

# headline figure -> its column in the table (the JSON output keeps the metric names)
FIGURES = {"init.rss": "init", "first_step.rss": "first step", "steady.rss": "steady", "peak": "peak",
           "budget.live": "live", "budget.rss_after_trim_above_baseline": "after trim"}
EFFECTS = ("steady.rss", "budget.rss_after_trim_above_baseline")  # patched minus baseline, per env and allocator
BASELINE = "baseline"


@dataclass(frozen=True)
class Cell:
    torch: str | None  # None: the worker Python's own version (no env)
    deepspeed: str | None
    patch: str
    allocator: str

    @property
    def id(self) -> str:
        parts = [f"torch{self.torch}" if self.torch else "", f"ds{self.deepspeed}" if self.deepspeed else "",
                 self.patch, self.allocator]
        return layout.slug("-".join(p for p in parts if p))

    @property
    def env_key(self) -> tuple[str | None, str | None, str]:
        """Cells that a patch effect compares: same versions and allocator."""
        return self.torch, self.deepspeed, self.allocator


def cells(torch: list[str], deepspeed: list[str], patches: list[str], allocators: list[str]) -> list[Cell]:
    """Env pairs outermost, so each environment is built once and its cells run together."""
    product = itertools.product(torch or [None], deepspeed or [None], patches or [BASELINE],
                                allocators or ["glibc"])
    return [Cell(*values) for values in product]


def default_name(scenario: str, definition: dict[str, Any]) -> str:
    digest = hashlib.sha1(json.dumps(definition, sort_keys=True).encode()).hexdigest()[:8]
    return f"{layout.slug(scenario)}-{digest}"


@dataclass
class Index:
    """matrix.json: the definition (what makes two commands the same matrix) and each cell's state."""

    path: Path
    definition: dict[str, Any]
    cells: dict[str, dict[str, Any]]
    command: list[str] = field(default_factory=list)  # the latest command line that worked on it

    @classmethod
    def open(cls, directory: Path, definition: dict[str, Any], all_cells: list[Cell]) -> Index:
        path = directory / layout.MATRIX_INDEX
        states: dict[str, dict[str, Any]] = {}
        if path.is_file():
            old = json.loads(path.read_text())
            if old.get("definition") != definition:
                raise UserError(f"{path}: made by a different matrix command; give another --out")
            states = {c["id"]: c for c in old.get("cells", [])}
        fresh = {c.id: {"id": c.id, **asdict(c), "status": "pending"} for c in all_cells}
        return cls(path, definition, {k: {**v, **states.get(k, {})} for k, v in fresh.items()})

    def update(self, cell_id: str, **fields: Any) -> None:
        self.cells[cell_id].update(fields)
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        storage.write_json_atomic(self.path, {"definition": self.definition, "command": self.command,
                                              "updated": storage.now_iso(), "cells": list(self.cells.values())})


def figures(side: Side) -> dict[str, float]:
    """Mean over the finished repeats of each headline figure (B/param)."""
    out = {}
    for metric in {*FIGURES, *EFFECTS}:
        values = side.samples(metric)
        if values:
            out[metric] = fmean(values)
    return out


def effects(sides: dict[str, Side], all_cells: list[Cell], threshold: float = stats.THRESHOLD,
            alpha: float = stats.ALPHA) -> dict[str, dict[str, stats.Comparison]]:
    """cell id -> metric -> patched against the baseline cell of the same versions and allocator."""
    baselines = {c.env_key: c.id for c in all_cells if c.patch == BASELINE}
    out: dict[str, dict[str, stats.Comparison]] = {}
    for cell in all_cells:
        base = baselines.get(cell.env_key)
        if cell.patch == BASELINE or base not in sides or cell.id not in sides:
            continue
        a, b = sides[base], sides[cell.id]
        out[cell.id] = {m: stats.compare(m, a.samples(m), b.samples(m), threshold, alpha)
                        for m in EFFECTS if a.samples(m) and b.samples(m)}
    return out
