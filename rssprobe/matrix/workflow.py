"""Running a matrix: build environments on demand, run every unfinished cell, print one table.

Cells run one at a time (memory figures of concurrent runs would disturb each other); a
cell whose environment cannot be built is marked failed while the rest goes on. A cell
whose group finished (every repeat ended ok, failed or timed out) is never run again, so
rerunning the same command resumes where it stopped (--fresh starts over). Every run ends
with malloc_trim(0), and glibc's mmap threshold is fixed unless --malloc-env says otherwise,
so the low-noise figure budget.rss_after_trim_above_baseline is in every row.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .. import envs, groups, host, launcher, layout, patchset, preflight, scenario, storage
from ..analysis.compare import Side
from ..errors import UserError
from ..log import say
from ..reporters import views
from ..reporters.output import emit
from . import cells as matrix


class Overall:
    """The matrix's progress bar, printed between cells (each cell draws its own run bar)."""

    def __init__(self, total: int, title: str) -> None:
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=Console(stderr=True))
        self.task = self.progress.add_task(title, total=total)
        self.title = title

    def show(self, done: int, text: str) -> None:
        self.progress.update(self.task, completed=done, description=f"{self.title}: {text}")
        self.progress.start()
        self.progress.stop()


@dataclass
class MatrixRequest:
    scenario_ref: str
    sets: list[str]
    torch: list[str] = field(default_factory=list)
    deepspeed: list[str] = field(default_factory=list)
    patches: list[str] = field(default_factory=list)
    allocators: list[str] = field(default_factory=list)
    repeat: int = 3
    out: Path | None = None
    dry_run: bool = False
    retry_failed: bool = False
    fresh: bool = False
    python: str | None = None
    malloc_env: dict[str, str] = field(default_factory=lambda: dict(groups.STEADY_MALLOC_ENV))
    pip: tuple[str, ...] = ()
    fmt: str = "terminal"


def values(options: tuple[str, ...] | list[str]) -> list[str]:
    """Repeatable options whose values may also be comma-separated (not inside 'name:opts')."""
    out: list[str] = []
    for value in options:
        out += [value] if ":" in value else [v.strip() for v in value.split(",") if v.strip()]
    return list(dict.fromkeys(out))


def _patch_specs(scen: scenario.Scenario, patches: list[str]) -> dict[str, list[str]]:
    out = {}
    for value in patches:
        if value == matrix.BASELINE:
            out[value] = []
        elif value == "patched":
            out[value] = patchset.resolve(scen, False, True, [])[1]
        else:
            out[value] = patchset.resolve(scen, False, False, value.split("+"))[1]
    return out


def run(m: MatrixRequest) -> int:
    """Run (or list, with dry_run) the matrix; 0 all done, 1 a cell failed, 130 interrupted."""
    sets = [*m.sets, groups.TRIM_AT_END]
    scen = scenario.load(m.scenario_ref, sets)
    preflight.check_memory(scen)  # as run does: a model that cannot fit is refused before any environment or run
    axes = {"torch": values(m.torch), "deepspeed": values(m.deepspeed),
            "patch": values(m.patches) or [matrix.BASELINE], "allocator": values(m.allocators) or ["glibc"]}
    if m.python and (axes["torch"] or axes["deepspeed"]):
        raise UserError("--python fixes torch and DeepSpeed for every cell; drop --torch/--deepspeed or --python")
    if bool(axes["torch"]) != bool(axes["deepspeed"]):  # an env needs both: the other is this Python's version
        missing = "deepspeed" if axes["torch"] else "torch"
        axes[missing] = [host.package_version(missing) or "?"]
    unknown = [a for a in axes["allocator"] if a not in host.ALLOCATORS]
    if unknown:
        raise UserError(f"--allocator {unknown[0]}: unknown allocator (known: {', '.join(host.ALLOCATORS)})")
    specs = _patch_specs(scen, axes["patch"])
    worker_python = envs.resolve_python(None, m.python)[0] if m.python else None
    definition = {"scenario": m.scenario_ref, "sets": sets, "repeat": m.repeat, "python": worker_python, **axes,
                  **({"malloc_env": m.malloc_env} if m.malloc_env else {})}
    directory = m.out or layout.matrix_root() / matrix.default_name(scen.name, definition)
    all_cells = matrix.cells(axes["torch"], axes["deepspeed"], axes["patch"], axes["allocator"])
    if m.dry_run:
        _list(all_cells, directory, m.repeat, m.fmt)
        return 0
    if m.fresh and directory.exists():
        shutil.rmtree(directory)
    if m.malloc_env:
        say("glibc fixed for every run: " + " ".join(f"{k}={v}" for k, v in m.malloc_env.items())
            + " (--malloc-env overrides)")
    index = matrix.Index.open(directory, definition, all_cells)
    index.command = list(sys.argv)
    index.save()
    interrupted = _run_cells(m, all_cells, index, directory, scen, sets, specs, worker_python)
    failed = _report(all_cells, index, directory, m.fmt)
    return 130 if interrupted else 1 if failed else 0


def _run_cells(m: MatrixRequest, all_cells: list[matrix.Cell], index: matrix.Index, directory: Path,
               scen: scenario.Scenario, sets: list[str], specs: dict[str, list[str]], python: str | None) -> bool:
    """Run every cell not yet finished; True if interrupted (Ctrl-C)."""
    overall = Overall(len(all_cells), f"matrix {directory.name}")
    skipped = 0
    for done, cell in enumerate(all_cells):
        group_dir = directory / cell.id
        if groups.finished(group_dir, m.repeat):
            statuses = judged_statuses(group_dir)
            if not (m.retry_failed and set(statuses) != {"ok"}):
                skipped += 1
                index.update(cell.id, status="done" if set(statuses) == {"ok"} else "failed", statuses=statuses)
                continue
        overall.show(done, f"cell {cell.id}")
        if group_dir.exists():
            shutil.rmtree(group_dir)  # an unfinished group proves nothing: run it whole again
        try:
            worker, env_name = (python, None) if python else envs.for_versions(cell.torch, cell.deepspeed, m.pip, say)
            argv = groups.rerun_argv(m.scenario_ref, sets, specs[cell.patch], m.repeat, group_dir, env_name, worker,
                                     cell.allocator, m.malloc_env)
            req = launcher.RunRequest(scenario=scen, scenario_ref=m.scenario_ref, label=cell.patch,
                                      patches=specs[cell.patch], allocator=cell.allocator, malloc_env=m.malloc_env,
                                      out=group_dir, python=worker, command=argv)
            index.update(cell.id, status="running", env=env_name, python=worker, group=str(group_dir), error=None)
            groups.run_group(req, m.repeat, show=False)
            statuses = judged_statuses(group_dir)
        except UserError as e:
            say(f"cell {cell.id} failed: {e}")
            index.update(cell.id, status="failed", error=str(e))
            continue
        status = "interrupted" if "interrupted" in statuses else "done" if set(statuses) == {"ok"} else "failed"
        index.update(cell.id, status=status, statuses=statuses,
                     error=None if status == "done" else f"runs ended {', '.join(statuses)}")
        if status == "interrupted":
            return True
    overall.show(len(all_cells), "finished" + (f" ({skipped} finished cells skipped)" if skipped else ""))
    return False


def judged_statuses(group_dir: Path) -> list[str]:
    """Each run's status as its files back it (rundata.judged): the index never says ok for an
    incomplete run (an ok manifest whose events are truncated, an orchestrator killed mid-run)."""
    out = []
    for run in storage.GroupDir(group_dir).runs():
        try:
            out.append(run.judged()[0])
        except UserError:
            out.append("damaged")
    return out


def _list(all_cells: list[matrix.Cell], directory: Path, repeat: int, fmt: str) -> None:
    rows = [[c.id, c.torch or "(worker's)", c.deepspeed or "(worker's)", c.patch, c.allocator,
             "finished" if groups.finished(directory / c.id, repeat) else "to run"] for c in all_cells]
    table = views.Table(f"{len(all_cells)} cells x {repeat} runs in {directory}",
                        ["cell", "torch", "deepspeed", "patch", "allocator", "state"], rows)
    data = [{"id": c.id, "torch": c.torch, "deepspeed": c.deepspeed, "patch": c.patch, "allocator": c.allocator,
             "finished": r[-1] == "finished"} for c, r in zip(all_cells, rows, strict=True)]
    emit(fmt, {"matrix": str(directory), "cells": data}, [], [table], alarm=False)


def _report(all_cells: list[matrix.Cell], index: matrix.Index, directory: Path, fmt: str) -> bool:
    """The one table: headline figures per cell and each patch's effect; True if a cell failed."""
    sides: dict[str, Side] = {}
    for cell in all_cells:
        group = directory / cell.id
        if (group / storage.GROUP).is_file() and storage.GroupDir(group).runs():
            sides[cell.id] = Side.load(str(group))
    effects = matrix.effects(sides, all_cells)
    rows, data = [], []
    for cell in all_cells:
        state = index.cells[cell.id]
        side = sides.get(cell.id)
        versions = (side.describe()["versions"] or {}) if side else {}
        figures = matrix.figures(side) if side else {}
        runs = f"{len(side.ok)}/{len(side.summaries)}" if side else state["status"]
        effect = effects.get(cell.id, {})
        rows.append([versions.get("torch") or cell.torch or "?", versions.get("deepspeed") or cell.deepspeed or "?",
                     cell.patch, cell.allocator, runs, *[views.bpp(figures.get(k)) for k in matrix.FIGURES],
                     *[_effect(effect.get(k)) for k in matrix.EFFECTS]])
        data.append({**state, "versions": versions, "figures": figures,
                     "effects": {k: c.as_dict() for k, c in effect.items()}})
    columns = ["torch", "deepspeed", "patch", "allocator", "runs ok", *matrix.FIGURES.values(),
               *[f"effect: {matrix.FIGURES[k]}" for k in matrix.EFFECTS]]
    failed = [c for c in index.cells.values() if c["status"] != "done"]
    table = views.Table(f"Matrix {directory.name} (bytes per parameter above the pre-model baseline; mean of the "
                        "finished runs)", columns, rows,
                        note="columns: " + ", ".join(f"{label} = {k}" for k, label in matrix.FIGURES.items())
                             + "; effect = patched minus baseline of the same versions and allocator, with the "
                               "verdict when it is not 'same'")
    lines = [f"matrix {directory}: {len(all_cells)} cells, {len(all_cells) - len(failed)} done"]
    lines += [f"FAILED {c['id']}: {c.get('error')}" for c in failed]
    emit(fmt, {"matrix": str(directory), "definition": index.definition, "cells": data}, lines, [table],
         alarm=bool(failed))
    return bool(failed)


def _effect(c: Any) -> str:
    if c is None:
        return ""
    return views.bpp(c.delta, signed=True) + ("" if c.verdict == "same" else f" ({c.verdict})")
