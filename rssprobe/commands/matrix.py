"""rssprobe matrix: one run group per cell of torch x deepspeed x patch x allocator, resumable.

Cells run one at a time (memory figures of concurrent runs would disturb each other);
environments are built on demand, and a cell whose environment cannot be built is marked
failed while the rest goes on. Every run ends with malloc_trim(0), so the low-noise
figure budget.rss_after_trim_above_baseline is in every row.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .. import envs, host, launcher, matrix, patchset, scenario, storage
from ..analysis.compare import Side
from ..errors import UserError
from ..reporters import views
from .argv import run_argv
from .env import pip_flags, say
from .run import execute_group
from .show import FORMATS, emit


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


def _values(options: tuple[str, ...]) -> list[str]:
    """Repeatable options whose values may also be comma-separated (not inside 'name:opts')."""
    out: list[str] = []
    for value in options:
        out += [value] if ":" in value else matrix.split(value)
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


@click.command("matrix")
@click.argument("scenario_ref", metavar="SCENARIO")
@click.option("--torch", "torch_versions", multiple=True, metavar="V[,V...]",
              help="torch versions (default: the worker Python's own).")
@click.option("--deepspeed", "ds_versions", multiple=True, metavar="V[,V...]",
              help="DeepSpeed versions, or source paths PATH[@REV] (default: the worker Python's own).")
@click.option("--patch", "patches", multiple=True, metavar="P[,P...]",
              help="baseline, patched, an intervention or set, or a+b (default: baseline).")
@click.option("--allocator", "allocators", multiple=True, metavar="A[,A...]", help="glibc, jemalloc, tcmalloc.")
@click.option("--repeat", default=3, show_default=True, type=click.IntRange(1), help="Runs per cell.")
@click.option("--steps", type=int, help="Shortcut for --set steps=N.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a scenario field.")
@click.option("--out", type=click.Path(path_type=Path), help="Matrix directory (default reports/matrix/<name>).")
@click.option("--dry-run", is_flag=True, help="List the cells and what is already done; run nothing.")
@click.option("--retry-failed", is_flag=True, help="Run again the cells in which a run failed.")
@click.option("--python", metavar="PATH", help="One worker Python for every cell (instead of --torch/--deepspeed).")
@pip_flags
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="terminal")
def command(scenario_ref: str, torch_versions: tuple[str, ...], ds_versions: tuple[str, ...],
            patches: tuple[str, ...], allocators: tuple[str, ...], repeat: int, steps: int | None,
            overrides: tuple[str, ...], out: Path | None, dry_run: bool, retry_failed: bool, python: str | None,
            find_links: tuple[str, ...], index_url: str | None, fmt: str) -> None:
    """Run SCENARIO over the cartesian product of versions, patches and allocators; one table at the end."""
    sets = [*overrides, *([f"steps={steps}"] if steps is not None else []), "probes.trim_at_end=true"]
    scen = scenario.load(scenario_ref, sets)
    axes = {"torch": _values(torch_versions), "deepspeed": _values(ds_versions),
            "patch": _values(patches) or [matrix.BASELINE], "allocator": _values(allocators) or ["glibc"]}
    if python and (axes["torch"] or axes["deepspeed"]):
        raise UserError("--python fixes torch and DeepSpeed for every cell; drop --torch/--deepspeed or --python")
    if bool(axes["torch"]) != bool(axes["deepspeed"]):  # an env needs both: the other is this Python's version
        missing = "deepspeed" if axes["torch"] else "torch"
        axes[missing] = [host.package_version(missing) or "?"]
    unknown = [a for a in axes["allocator"] if a not in host.ALLOCATORS]
    if unknown:
        raise UserError(f"--allocator {unknown[0]}: unknown allocator (known: {', '.join(host.ALLOCATORS)})")
    specs = _patch_specs(scen, axes["patch"])
    worker_python = envs.resolve_python(None, python)[0] if python else None
    definition = {"scenario": scenario_ref, "sets": sets, "repeat": repeat, "python": worker_python, **axes}
    directory = out or matrix.matrix_root() / matrix.default_name(scen.name, definition)
    cells = matrix.cells(axes["torch"], axes["deepspeed"], axes["patch"], axes["allocator"])
    if dry_run:
        _list(cells, directory, repeat, fmt)
        return
    index = matrix.Index.open(directory, definition, cells)
    index.command = list(sys.argv)
    index.save()
    interrupted = _run_cells(cells, index, directory, scen, scenario_ref, sets, specs, repeat, worker_python,
                             envs.pip_options(find_links, index_url), retry_failed)
    failed = _report(cells, index, directory, fmt)
    sys.exit(130 if interrupted else 1 if failed else 0)


def _run_cells(cells: list[matrix.Cell], index: matrix.Index, directory: Path, scen: scenario.Scenario, ref: str,
               sets: list[str], specs: dict[str, list[str]], repeat: int, python: str | None,
               pip: tuple[str, ...], retry_failed: bool) -> bool:
    """Run every cell not yet finished; True if interrupted (Ctrl-C)."""
    overall = Overall(len(cells), f"matrix {directory.name}")
    skipped = 0
    for done, cell in enumerate(cells):
        group_dir = directory / cell.id
        if matrix.finished(group_dir, repeat):
            statuses = [r.manifest()["status"] for r in storage.GroupDir(group_dir).runs()]
            if not (retry_failed and set(statuses) != {"ok"}):
                skipped += 1
                index.update(cell.id, status="done" if set(statuses) == {"ok"} else "failed", statuses=statuses)
                continue
        overall.show(done, f"cell {cell.id}")
        if group_dir.exists():
            shutil.rmtree(group_dir)  # an unfinished group proves nothing: run it whole again
        try:
            worker, env_name = (python, None) if python else envs.for_versions(cell.torch, cell.deepspeed, pip, say)
            argv = run_argv(ref, sets, specs[cell.patch], repeat, group_dir, env_name, worker, cell.allocator)
            req = launcher.RunRequest(scenario=scen, scenario_ref=ref, label=cell.patch, patches=specs[cell.patch],
                                      allocator=cell.allocator, out=group_dir, python=worker, command=argv)
            index.update(cell.id, status="running", env=env_name, python=worker, group=str(group_dir), error=None)
            _group, statuses = execute_group(req, repeat, show=False)
        except UserError as e:
            say(f"cell {cell.id} failed: {e}")
            index.update(cell.id, status="failed", error=str(e))
            continue
        status = "interrupted" if "interrupted" in statuses else "done" if set(statuses) == {"ok"} else "failed"
        index.update(cell.id, status=status, statuses=statuses,
                     error=None if status == "done" else f"runs ended {', '.join(statuses)}")
        if status == "interrupted":
            return True
    overall.show(len(cells), "finished" + (f" ({skipped} finished cells skipped)" if skipped else ""))
    return False


def _list(cells: list[matrix.Cell], directory: Path, repeat: int, fmt: str) -> None:
    rows = [[c.id, c.torch or "(worker's)", c.deepspeed or "(worker's)", c.patch, c.allocator,
             "finished" if matrix.finished(directory / c.id, repeat) else "to run"] for c in cells]
    table = views.Table(f"{len(cells)} cells x {repeat} runs in {directory}",
                        ["cell", "torch", "deepspeed", "patch", "allocator", "state"], rows)
    data = [{"id": c.id, "torch": c.torch, "deepspeed": c.deepspeed, "patch": c.patch, "allocator": c.allocator,
             "finished": r[-1] == "finished"} for c, r in zip(cells, rows, strict=True)]
    emit(fmt, {"matrix": str(directory), "cells": data}, [], [table], alarm=False)


def _report(cells: list[matrix.Cell], index: matrix.Index, directory: Path, fmt: str) -> bool:
    """The one table: headline figures per cell and each patch's effect; True if a cell failed."""
    sides: dict[str, Side] = {}
    for cell in cells:
        group = directory / cell.id
        if (group / storage.GROUP).is_file() and storage.GroupDir(group).runs():
            sides[cell.id] = Side.load(str(group))
    effects = matrix.effects(sides, cells)
    rows, data = [], []
    for cell in cells:
        state = index.cells[cell.id]
        side = sides.get(cell.id)
        versions = (side.describe()["versions"] or {}) if side else {}
        figures = matrix.figures(side) if side else {}
        runs = f"{len(side.ok)}/{len(side.summaries)}" if side else state["status"]
        effect = effects.get(cell.id, {})
        rows.append([versions.get("torch") or cell.torch or "?", versions.get("deepspeed") or cell.deepspeed or "?",
                     cell.patch, cell.allocator, runs, *[views.bpp(figures.get(m)) for m in matrix.FIGURES],
                     *[_effect(effect.get(m)) for m in matrix.EFFECTS]])
        data.append({**state, "versions": versions, "figures": figures,
                     "effects": {m: c.as_dict() for m, c in effect.items()}})
    columns = ["torch", "deepspeed", "patch", "allocator", "runs ok", *matrix.FIGURES.values(),
               *[f"effect: {matrix.FIGURES[m]}" for m in matrix.EFFECTS]]
    failed = [c for c in index.cells.values() if c["status"] != "done"]
    table = views.Table(f"Matrix {directory.name} (bytes per parameter above the pre-model baseline; mean of the "
                        "finished runs)", columns, rows,
                        note="columns: " + ", ".join(f"{label} = {m}" for m, label in matrix.FIGURES.items())
                             + "; effect = patched minus baseline of the same versions and allocator, with the "
                               "verdict when it is not 'same'")
    lines = [f"matrix {directory}: {len(cells)} cells, {len(cells) - len(failed)} done"]
    lines += [f"FAILED {c['id']}: {c.get('error')}" for c in failed]
    emit(fmt, {"matrix": str(directory), "definition": index.definition, "cells": data}, lines, [table],
         alarm=bool(failed))
    return bool(failed)


def _effect(c: Any) -> str:
    if c is None:
        return ""
    return views.bpp(c.delta, signed=True) + ("" if c.verdict == "same" else f" ({c.verdict})")
