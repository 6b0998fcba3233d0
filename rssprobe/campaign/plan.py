"""Running a plan (config/plan.py): every unfinished cell, one at a time, resumable and shardable, one bar.

The same campaign as the matrix (engine.py): matrix.json indexes the cells, plan.json keeps the plan it ran,
a cell whose group finished is never run again, an unfinished one is run again whole, and --shard K/N runs
the K-th share of all the plan's cells (optional ones counted, so the share does not depend on --optional).
The bar counts runs over the whole plan and estimates the time left from the mean wall time of the runs
finished so far (in this session or an earlier one), so a resumed plan estimates from its first cell on.
A cell whose versions are this Python's own runs here; others run in an environment built on demand
(rssprobe.run.envs), whose first run compiles DeepSpeed's ops (through ccache where present).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from .. import kinds
from ..analysis import answers, metrics
from ..analysis.results import PlanListing, PlanTable
from ..config import scenario
from ..config.plan import LoadedPlan, PlanCell
from ..config.runoptions import RunOptions
from ..config.scenariospec import ScenarioSpec
from ..contract.exitcodes import EXIT_INTERRUPTED
from ..contract.files import FORMAT_KEY, FORMAT_VERSION
from ..contract.status import Status
from ..log import say
from ..run import envs, host, launch, request
from ..store import layout
from ..store.writer import write_json_atomic
from . import engine
from .engine import Campaign, Shard
from .matrix import Outcome, not_done, patch_specs, rows


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


def _spec(cell: PlanCell, base: ScenarioSpec) -> ScenarioSpec:
    """A cell's scenario: the plan's (or a [[configs]] cell's own), the plan's --set values then the cell's, and
    its ranks."""
    spec = base.with_(sets=cell.sets, world_size=cell.ranks if cell.ranks != 1 else None)
    return dataclasses.replace(spec, ref=cell.scenario) if cell.scenario else spec


def run(loaded: LoadedPlan, out: Path | None, optional: frozenset[str], dry_run: bool, retry_failed: bool,
        fresh: bool, pip: tuple[str, ...], shard_spec: str | None = None) -> Outcome:
    """Run (or list) the plan; exit 0 all done, 1 a cell failed, 130 interrupted."""
    shard = Shard.parse(shard_spec)
    settings = loaded.plan.plan
    cells = loaded.selected(optional)
    base = ScenarioSpec(settings.scenario, tuple(settings.sets), trim_at_end=True)
    scens = {spec: spec.load() for spec in dict.fromkeys(_spec(c, base) for c in cells)}
    for axis in ("torch", "deepspeed"):  # a value that is not a version fails here, not after cells ran
        envs.check_versions(f"{loaded.path}: {axis}",
                            list(dict.fromkeys(v for c in cells if (v := getattr(c, axis)) is not None)))
    for claim in loaded.plan.claims:  # the verdict report reads them: a misspelt figure fails now, not after
        for name in claim.metrics:
            metrics.check(f"{loaded.path}: claim {claim.what!r}:", name.removeprefix("-"),
                          next(iter(scens.values())))
    # every cell must fit this machine, and its torch take the allocator setting, before the first one runs
    request.check_scenarios(scens.values(), out, [c.torch for c in cells])
    specs = patch_specs(next(iter(scens.values())), settings.patches)
    for cell in cells:  # a missing allocator library is one line naming its package, before anything runs
        host.allocator_library(cell.allocator_name)
    request.check_all(_planned(cell, base, scens, specs) for cell in cells)  # every cell's preflight, before any
    directory = out or engine.default_dir(layout.matrix_root(), loaded.path.stem, loaded.definition())
    positions = [loaded.cells.index(c) for c in cells]
    if dry_run:
        return Outcome(str(kinds.PLAN.listing), _listing(loaded, cells, positions, directory, shard))
    c = Campaign.open(directory, kinds.PLAN.name, loaded.definition(), fresh, shard)
    c.set_entries([{"id": cell.id, **asdict(cell), "status": Status.PENDING} for cell in cells], positions,
                  len(loaded.cells))
    c.index["command"] = list(sys.argv)
    c.save()
    write_json_atomic(directory / layout.PLAN_FILE, {FORMAT_KEY: FORMAT_VERSION,
                                                     "plan_file": str(loaded.path), "plan": loaded.plan.model_dump()})
    interrupted = _run_cells(cells, c, base, scens, specs, retry_failed, pip)
    data = table(directory)
    return Outcome(kinds.PLAN.name, data, EXIT_INTERRUPTED if interrupted else 1 if data["failed"] else 0)


def _options(cell: PlanCell, specs: dict[str, list[str]]) -> RunOptions:
    """What a plan cell runs with: its patch set, allocator and glibc knobs, and repeat."""
    return RunOptions(patches=tuple(specs[cell.patch]), allocator=cell.allocator_name, malloc_env=cell.malloc_env,
                      repeat=cell.repeat)


def _planned(cell: PlanCell, base: ScenarioSpec, scens: dict[ScenarioSpec, scenario.Scenario],
             specs: dict[str, list[str]]) -> request.Planned:
    """A cell's request before it runs: here when its versions are this Python's, else in an environment built when
    it starts."""
    key = _spec(cell, base)
    here = cell.torch is None or (cell.torch, cell.deepspeed) == local_versions()
    return request.Planned(request.make(key, _options(cell, specs), scen=scens[key], label=cell.patch), built=here,
                           deepspeed=cell.deepspeed)


def _run_cells(cells: list[PlanCell], c: Campaign, base: ScenarioSpec, scens: dict[ScenarioSpec, scenario.Scenario],
               specs: dict[str, list[str]], retry_failed: bool, pip: tuple[str, ...]) -> bool:
    """Every cell of this shard not yet finished, through the campaign's cell loop; True if interrupted."""
    def start(cell: PlanCell) -> Callable[[Path], tuple[launch.RunRequest, dict[str, Any]]]:
        def made(group_dir: Path) -> tuple[launch.RunRequest, dict[str, Any]]:
            worker, env_name = worker_for(cell, pip)
            key = _spec(cell, base)
            return request.make(key, _options(cell, specs), scen=scens[key], label=cell.patch, out=group_dir,
                                python=worker, env_name=env_name), {"env": env_name, "python": worker}
        return made

    return c.run_cells([engine.Cell(cell.id, cell.repeat, f"{cell.axis} {cell.value} [{cell.patch}]", start(cell))
                        for cell in cells], kinds.PLAN.name, retry_failed)


def _listing(loaded: LoadedPlan, cells: list[PlanCell], positions: list[int], directory: Path,
             shard: Shard | None) -> PlanListing:
    skipped = [f"{c.axis} {c.value}" for c in loaded.cells if c.optional and c not in cells]
    return {"plan": str(loaded.path), "directory": str(directory), "shard": str(shard) if shard else None,
            "not_selected": list(dict.fromkeys(skipped)),
            "cells": [{"id": c.id, **c.__dict__, "finished": engine.finished(directory / c.id, c.repeat),
                       "shard": shard.owner(p, len(loaded.cells)) if shard else None}
                      for c, p in zip(cells, positions, strict=True)]}


def table(directory: Path) -> PlanTable:
    """Headline figures per cell and each patch's effect against the baseline of the same configuration."""
    c = Campaign.read(directory, kinds.PLAN.name)
    data = rows(directory, c.entries(), lambda e: (e["torch"], e["deepspeed"], e["allocator"], e["ranks"],
                                                   e.get("scenario"), tuple(e.get("sets") or ())))
    out = {"directory": str(directory), "definition": c.definition, "shard": c.index.get("shard"), "cells": data,
           "failed": [f"{e['id']}: {e.get('error')}" for e in not_done(data)]}
    return cast(PlanTable, {"answer": answers.campaign(kinds.PLAN.name, out), **out})
