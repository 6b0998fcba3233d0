"""Running a plan (matrix/plan.py): every unfinished cell, one at a time, resumable, with one bar.

The same resuming as the matrix (workflow.py): matrix.json indexes the cells, a cell whose
group finished is never run again, an unfinished one is run again whole. The bar counts runs
over the whole plan and estimates the time left from the mean wall time of the runs finished
so far (in this session or an earlier one), so a resumed plan estimates from its first cell on.
A cell whose versions are this Python's own runs here; others run in an environment built on
demand (rssprobe.envs), whose first run compiles DeepSpeed's ops (through ccache where present).
"""

from __future__ import annotations

import shutil
import sys
import time
from datetime import datetime
from pathlib import Path
from statistics import fmean

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .. import envs, groups, host, launcher, scenario, storage
from ..analysis import stats
from ..analysis.compare import Side
from ..errors import UserError
from ..log import say
from ..reporters import views
from ..reporters.output import emit
from . import cells as matrix
from .plan import LoadedPlan, PlanCell
from .workflow import _effect, _patch_specs


def local_versions() -> tuple[str | None, str | None]:
    """This interpreter's torch and DeepSpeed versions without local labels (2.13.0+cpu -> 2.13.0)."""
    def bare(v: str | None) -> str | None:
        return v.split("+", 1)[0] if v else None
    return bare(host.package_version("torch")), bare(host.package_version("deepspeed"))


def worker_for(cell: PlanCell, pip: tuple[str, ...]) -> tuple[str, str | None]:
    """(python, env name): this interpreter when the cell's versions are its own, else an environment."""
    if cell.torch is None or (cell.torch, cell.deepspeed) == local_versions():
        return sys.executable, None
    return envs.for_versions(cell.torch, cell.deepspeed, pip, say)


def run_seconds(group_dir: Path) -> list[float]:
    """Wall time of each ended run of a group, from its manifest's start and end."""
    out = []
    if not (group_dir / storage.GROUP).is_file():
        return out
    for run in storage.GroupDir(group_dir).runs():
        try:
            m = run.manifest()
            out.append((datetime.fromisoformat(m["ended"]) - datetime.fromisoformat(m["started"])).total_seconds())
        except (KeyError, TypeError, ValueError, UserError):
            continue
    return out


class PlanProgress:
    """One bar over every run of the plan, with an estimate of the time left."""

    def __init__(self, total: int, title: str) -> None:
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[left]}"), console=Console(stderr=True))
        self.task = self.progress.add_task(title, total=total, left="")
        self.title = title
        self.total = total

    def show(self, done: int, seconds: list[float], text: str) -> None:
        left = f"~{fmean(seconds) * (self.total - done) / 60:.0f} min left (mean run {fmean(seconds):.0f} s; " \
               "a new environment adds its build)" if seconds and done < self.total else ""
        self.progress.update(self.task, completed=done, description=f"{self.title}: {text}", left=left)
        self.progress.start()
        self.progress.stop()


def run(loaded: LoadedPlan, out: Path | None, optional: frozenset[str], dry_run: bool, retry_failed: bool, fresh: bool,
        pip: tuple[str, ...], fmt: str) -> int:
    """Run (or list) the plan; 0 all done, 1 a cell failed, 130 interrupted."""
    settings = loaded.plan.plan
    cells = loaded.selected(optional)
    sets = [*settings.sets, groups.TRIM_AT_END]
    scens = {ranks: scenario.load(settings.scenario, _sets(sets, ranks)) for ranks in {c.ranks for c in cells}}
    specs = _patch_specs(next(iter(scens.values())), settings.patches)
    for cell in cells:  # a missing allocator library is one line naming its package, before anything runs
        host.allocator_library(cell.allocator_name)
    directory = out or loaded.default_dir()
    if dry_run:
        _list(loaded, cells, directory, fmt)
        return 0
    if fresh and directory.exists():
        shutil.rmtree(directory)
    index = matrix.Index.open(directory, loaded.definition(), cells)  # type: ignore[arg-type]
    index.command = list(sys.argv)
    index.save()
    storage.write_json_atomic(directory / "plan.json", {"plan_file": str(loaded.path),
                                                        "plan": loaded.plan.model_dump()})
    interrupted = _run_cells(cells, index, directory, settings.scenario, sets, scens, specs, retry_failed, pip)
    failed = _report(cells, index, directory, fmt)
    return 130 if interrupted else 1 if failed else 0


def _sets(sets: list[str], ranks: int) -> list[str]:
    return [*sets, f"world_size={ranks}"] if ranks != 1 else sets


def _run_cells(cells: list[PlanCell], index: matrix.Index, directory: Path, ref: str, sets: list[str],
               scens: dict[int, scenario.Scenario], specs: dict[str, list[str]], retry_failed: bool,
               pip: tuple[str, ...]) -> bool:
    total = sum(c.repeat for c in cells)
    bar = PlanProgress(total, f"plan {directory.name}")
    seconds: list[float] = []
    done = 0
    for cell in cells:
        group_dir = directory / cell.id
        if groups.finished(group_dir, cell.repeat):
            statuses = [r.manifest()["status"] for r in storage.GroupDir(group_dir).runs()]
            if not (retry_failed and set(statuses) != {"ok"}):
                index.update(cell.id, status="done" if set(statuses) == {"ok"} else "failed", statuses=statuses)
                seconds += run_seconds(group_dir)
                done += cell.repeat
                continue
        bar.show(done, seconds, f"{cell.axis} {cell.value} [{cell.patch}]")
        if group_dir.exists():
            shutil.rmtree(group_dir)  # an unfinished group proves nothing: run it whole again
        started = time.monotonic()
        try:
            worker, env_name = worker_for(cell, pip)
            cell_sets = _sets(sets, cell.ranks)
            argv = groups.rerun_argv(ref, cell_sets, specs[cell.patch], cell.repeat, group_dir, env_name, worker,
                                     cell.allocator_name, cell.malloc_env)
            req = launcher.RunRequest(scenario=scens[cell.ranks], scenario_ref=ref, label=cell.patch,
                                      patches=specs[cell.patch], allocator=cell.allocator_name,
                                      malloc_env=cell.malloc_env, out=group_dir, python=worker, command=argv)
            index.update(cell.id, status="running", env=env_name, python=worker, group=str(group_dir), error=None)
            _group, statuses = groups.run_group(req, cell.repeat, show=False,
                                                title=f"{cell.axis} {cell.value} [{cell.patch}]")
        except UserError as e:
            say(f"cell {cell.id} failed: {e}")
            index.update(cell.id, status="failed", error=str(e), wall_s=time.monotonic() - started)
            done += cell.repeat
            continue
        seconds += run_seconds(group_dir)
        done += cell.repeat
        status = "interrupted" if "interrupted" in statuses else "done" if set(statuses) == {"ok"} else "failed"
        index.update(cell.id, status=status, statuses=statuses, wall_s=time.monotonic() - started,
                     error=None if status == "done" else f"runs ended {', '.join(statuses)}")
        if status == "interrupted":
            return True
    bar.show(total, seconds, "finished")
    return False


def _list(loaded: LoadedPlan, cells: list[PlanCell], directory: Path, fmt: str) -> None:
    rows = [[c.axis, c.value, c.torch or "(worker's)", c.deepspeed or "(worker's)", c.allocator, str(c.ranks),
             c.patch, str(c.repeat), "finished" if groups.finished(directory / c.id, c.repeat) else "to run"]
            for c in cells]
    skipped = [f"{c.axis} {c.value}" for c in loaded.cells if c.optional and c not in cells]
    table = views.Table(f"{len(cells)} cells, {sum(c.repeat for c in cells)} runs in {directory}",
                        ["axis", "value", "torch", "deepspeed", "allocator", "ranks", "patch", "runs", "state"], rows,
                        note=("optional, not selected (--optional runs them): " + ", ".join(dict.fromkeys(skipped)))
                        if skipped else None)
    emit(fmt, {"plan": str(loaded.path), "directory": str(directory),
               "cells": [{"id": c.id, **c.__dict__} for c in cells]}, [], [table], alarm=False)


def _report(cells: list[PlanCell], index: matrix.Index, directory: Path, fmt: str) -> bool:
    """Headline figures per cell and each patch's effect against the baseline of the same configuration."""
    sides = {c.id: Side.load(str(directory / c.id)) for c in cells
             if (directory / c.id / storage.GROUP).is_file() and storage.GroupDir(directory / c.id).runs()}
    baselines = {c.config: c.id for c in cells if c.patch == matrix.BASELINE}
    rows, data = [], []
    for cell in cells:
        side = sides.get(cell.id)
        figures = matrix.figures(side) if side else {}
        effect = {}
        base = baselines.get(cell.config)
        if side and cell.patch != matrix.BASELINE and base in sides:
            effect = {m: stats.compare(m, sides[base].samples(m), side.samples(m))
                      for m in matrix.EFFECTS if sides[base].samples(m) and side.samples(m)}
        rows.append([cell.axis, cell.value, cell.patch, f"{len(side.ok)}/{len(side.summaries)}" if side
                     else index.cells[cell.id]["status"], *[views.bpp(figures.get(k)) for k in matrix.FIGURES],
                     *[_effect(effect.get(k)) for k in matrix.EFFECTS]])
        data.append({**index.cells[cell.id], "figures": figures,
                     "effects": {k: c.as_dict() for k, c in effect.items()}})
    failed = [c for c in index.cells.values() if c["status"] != "done"]
    table = views.Table(f"Plan {directory.name} (bytes per parameter above the pre-model baseline; mean of the "
                        "finished runs)", ["axis", "value", "patch", "runs ok", *matrix.FIGURES.values(),
                                           *[f"effect: {matrix.FIGURES[k]}" for k in matrix.EFFECTS]], rows)
    lines = [f"plan {directory}: {len(cells)} cells, {len(cells) - len(failed)} done"]
    lines += [f"FAILED {c['id']}: {c.get('error')}" for c in failed]
    emit(fmt, {"directory": str(directory), "definition": index.definition, "cells": data}, lines, [table],
         alarm=bool(failed))
    return bool(failed)

