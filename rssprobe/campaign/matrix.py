"""The run matrix: one run group per cell of torch x deepspeed [x transformers x accelerate] x patch x allocator,
resumable and shardable.

Cells run one at a time (memory figures of concurrent runs would disturb each other); a cell whose
environment cannot be built is marked failed while the rest goes on. The campaign engine resumes (a
finished cell is never run again; --fresh starts over) and shards (--shard K/N runs the K-th share of
the cells). Every run ends with malloc_trim(0), and glibc's mmap threshold is fixed unless --malloc-env
says otherwise, so the low-noise figure (RSS after a final trim: metrics.TRIMMED) is in every row.

<matrix root>/<name>/matrix.json indexes the cells; each cell is a run group in <name>/<cell-id>/. The
table (each cell's headline figures, and each patch's effect against the baseline of the same versions
and allocator) is computed from the directory alone, so a merged directory shows the same table.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from .. import kinds
from ..analysis import answers, metrics, stats
from ..analysis.compare import Side
from ..analysis.results import MatrixListing, MatrixTable
from ..config import patchsets, scenario
from ..config.allocators import ALLOCATORS
from ..config.runoptions import RunOptions
from ..config.scenariospec import ScenarioSpec
from ..contract.exitcodes import EXIT_INTERRUPTED
from ..contract.glibc import STEADY_MALLOC_ENV
from ..contract.status import Status
from ..errors import UserError
from ..log import say
from ..run import envs, host, launch, request
from ..store import layout
from ..store.rundir import GroupDir
from . import engine
from .engine import OTHER_SHARD, Campaign, Shard

FIGURES = metrics.MATRIX_FIGURES  # each cell's (a mean over its finished runs)
EFFECTS = metrics.PATCH_EFFECTS  # patched minus baseline of the same configuration
BASELINE = patchsets.BASELINE


@dataclass(frozen=True)
class Cell:
    torch: str | None  # None: the worker Python's own version (no env)
    deepspeed: str | None
    patch: str
    allocator: str
    transformers: str | None = None  # None: no transformers axis (the env's own, if any)
    accelerate: str | None = None

    @property
    def id(self) -> str:
        parts = [f"torch{self.torch}" if self.torch else "", f"ds{self.deepspeed}" if self.deepspeed else "",
                 f"tf{self.transformers}" if self.transformers else "",
                 f"acc{self.accelerate}" if self.accelerate else "", self.patch, self.allocator]
        return layout.slug("-".join(p for p in parts if p))

    @property
    def env_key(self) -> tuple[str | None, ...]:
        """Cells that a patch effect compares: same versions and allocator."""
        return self.torch, self.deepspeed, self.transformers, self.accelerate, self.allocator

    def extras(self, this_accelerate: str | None = None) -> tuple[str, ...]:
        """The library axes' requirements of this cell's environment (transformers brings accelerate)."""
        return envs.library_extras(self.transformers, self.accelerate, this_accelerate)


def cells(torch: list[str], deepspeed: list[str], patches: list[str], allocators: list[str],
          transformers: list[str] | None = None, accelerate: list[str] | None = None) -> list[Cell]:
    """Env tuples outermost, so each environment is built once and its cells run together (in one shard)."""
    product = itertools.product(torch or [None], deepspeed or [None], transformers or [None], accelerate or [None],
                                patches or [BASELINE], allocators or ["glibc"])
    return [Cell(t, d, p, a, tf, acc) for t, d, tf, acc, p, a in product]


# ---- each cell's figures, and a patch's effect against its baseline --------------------------------------

def load_sides(directory: Path, ids: list[str]) -> dict[str, Side]:
    """The run groups that exist among these cells, as comparison sides."""
    return {i: Side.load(str(directory / i)) for i in ids
            if GroupDir.is_group(directory / i) and GroupDir(directory / i).readable()}


def figures(side: Side) -> dict[str, float]:
    """Mean over the finished repeats of each headline figure (B/param)."""
    out = {}
    for metric in dict.fromkeys([*FIGURES, *EFFECTS]):
        mean, _sd = stats.mean_sd(side.samples(metric))
        if mean is not None:
            out[metric] = mean
    return out


def effects(base: Side, side: Side) -> dict[str, stats.Comparison]:
    """metric -> the patched side against the baseline of the same configuration."""
    return {m: stats.compare(m, base.samples(m), side.samples(m)) for m in EFFECTS
            if base.samples(m) and side.samples(m)}


def rows(directory: Path, entries: list[dict[str, Any]], config: Callable[[dict[str, Any]], Any]) -> list[dict]:
    """Each index entry with its versions, figures and effects (against the baseline entry of the same
    `config`), read from the directory alone."""
    loaded = load_sides(directory, [e["id"] for e in entries])
    baselines = {config(e): e["id"] for e in entries if e["patch"] == BASELINE}
    out = []
    for entry in entries:
        side = loaded.get(entry["id"])
        base = baselines.get(config(entry))
        effect = effects(loaded[base], side) if side and entry["patch"] != BASELINE and base in loaded else {}
        out.append({**entry, "versions": (side.describe()["versions"] or {}) if side else {},
                    "figures": figures(side) if side else {}, "effects": {k: c.as_dict() for k, c in effect.items()},
                    "runs_ok": f"{len(side.ok)}/{len(side.summaries)}" if side else None})
    return out


def not_done(cells_data: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cells of this directory that did not finish (another shard's are not this directory's to run)."""
    return [c for c in cells_data if c["status"] not in (Status.DONE, OTHER_SHARD)]


def table(directory: Path) -> MatrixTable:
    """The matrix's table: every cell's state, versions, figures and effects."""
    c = Campaign.read(directory, kinds.MATRIX.name)
    data = rows(directory, c.entries(), lambda e: (e["torch"], e["deepspeed"], e.get("transformers"),
                                                   e.get("accelerate"), e["allocator"]))
    out = {"matrix": str(directory), "definition": c.definition, "shard": c.index.get("shard"), "cells": data,
           "failed": [f"{e['id']}: {e.get('error')}" for e in not_done(data)]}
    return cast(MatrixTable, {"answer": answers.campaign(kinds.MATRIX.name, out), **out})


# ---- running it ---------------------------------------------------------------------------------------------

@dataclass
class MatrixRequest:
    spec: ScenarioSpec
    torch: list[str] = field(default_factory=list)
    deepspeed: list[str] = field(default_factory=list)
    transformers: list[str] = field(default_factory=list)  # releases, or a local clone's PATH[@REV]
    accelerate: list[str] = field(default_factory=list)
    patches: list[str] = field(default_factory=list)
    allocators: list[str] = field(default_factory=list)
    # repeat, the worker's python and glibc knobs of every cell (patches and allocators are the axes above)
    options: RunOptions = field(default_factory=lambda: RunOptions(repeat=3, malloc_env=dict(STEADY_MALLOC_ENV)))
    out: Path | None = None
    dry_run: bool = False
    retry_failed: bool = False
    fresh: bool = False
    pip: tuple[str, ...] = ()
    shard: str | None = None


@dataclass
class Outcome:
    """What a campaign command did: `kind` (matrix, plan, or a *-list of a dry run), its data, its exit code."""

    kind: str
    data: dict[str, Any]
    exit_code: int = 0


def values(options: tuple[str, ...] | list[str]) -> list[str]:
    """Repeatable options whose values may also be comma-separated (not inside 'name:opts')."""
    out: list[str] = []
    for value in options:
        out += [value] if ":" in value else [v.strip() for v in value.split(",") if v.strip()]
    return list(dict.fromkeys(out))


def patch_specs(scen: scenario.Scenario, patches: list[str]) -> dict[str, list[str]]:
    out = {}
    for value in patches:
        if value == BASELINE:
            out[value] = []
        elif value == "patched":
            out[value] = patchsets.resolve(scen, False, True, [])[1]
        else:
            out[value] = patchsets.resolve(scen, False, False, value.split("+"))[1]
    return out


def run(m: MatrixRequest) -> Outcome:
    """Run (or list, with dry_run) the matrix; exit 0 all done, 1 a cell failed, 130 interrupted."""
    shard = Shard.parse(m.shard)
    spec = m.spec.with_(trim_at_end=True)
    scen = spec.load()
    # the version axes parsed strictly, once (run/envs/spec.axis_values): an empty value or one given twice is one
    # line, and a library's clone that is not one, before any environment or run
    axes = {"torch": envs.axis_values("--torch", m.torch), "deepspeed": envs.axis_values("--deepspeed", m.deepspeed),
            "patch": values(m.patches) or [BASELINE], "allocator": values(m.allocators) or ["glibc"]}
    libraries = {name: envs.axis_values(f"--{name}", getattr(m, name)) for name in envs.LIBRARIES}
    if m.options.python and (axes["torch"] or axes["deepspeed"] or any(libraries.values())):
        raise UserError("--python fixes torch and DeepSpeed for every cell; drop --torch/--deepspeed or --python")
    if any(libraries.values()) and not (axes["torch"] or axes["deepspeed"]):  # a library axis needs an env
        axes["torch"] = [host.package_version("torch") or "?"]
    if bool(axes["torch"]) != bool(axes["deepspeed"]):  # an env needs both: the other is this Python's version
        missing = "deepspeed" if axes["torch"] else "torch"
        axes[missing] = [host.package_version(missing) or "?"]
    unknown = [a for a in axes["allocator"] if a not in ALLOCATORS]
    if unknown:
        raise UserError(f"--allocator {unknown[0]}: unknown allocator (known: {', '.join(ALLOCATORS)})")
    specs = patch_specs(scen, axes["patch"])
    worker_python = envs.resolve_python(None, m.options.python)[0] if m.options.python else None
    # once, before any environment or cell, as run does: a model that cannot fit, an allocator setting a torch of
    # the axis does not take (a cell of another torch is asked again when it starts)
    request.check_scenarios([scen], torches=list(axes["torch"]) or [None], python=worker_python)
    definition = {**spec.identity(), "repeat": m.options.runs, "python": worker_python, **axes,
                  **{name: given for name, given in libraries.items() if given},
                  **({"malloc_env": m.options.malloc_env} if m.options.malloc_env else {})}
    directory = m.out or engine.default_dir(layout.matrix_root(), scen.name, definition)
    all_cells = cells(axes["torch"], axes["deepspeed"], axes["patch"], axes["allocator"],
                      libraries["transformers"], libraries["accelerate"])
    # every cell's per-run preflight (the native pin's lock limit included), before any directory or cell
    request.check_all((_planned(m, cell, spec, scen, specs, worker_python) for cell in all_cells), libraries=False)
    if m.dry_run:
        return Outcome(str(kinds.MATRIX.listing), _listing(all_cells, directory, m.options.runs, shard))
    # refused here: no note before the error
    c = Campaign.open(directory, kinds.MATRIX.name, definition, m.fresh, shard)
    if m.options.malloc_env:
        say("glibc fixed for every run: " + " ".join(f"{k}={v}" for k, v in m.options.malloc_env.items())
            + " (--malloc-env overrides)")
    c.set_entries([{"id": cell.id, **asdict(cell), "status": Status.PENDING} for cell in all_cells])
    c.index["command"] = list(sys.argv)
    c.save()
    interrupted = _run_cells(m, all_cells, c, scen, spec, specs, worker_python)
    data = table(directory)
    return Outcome(kinds.MATRIX.name, data, EXIT_INTERRUPTED if interrupted else 1 if data["failed"] else 0)


def _options(m: MatrixRequest, cell: Cell, specs: dict[str, list[str]]) -> RunOptions:
    """What a cell varies: the matrix's options with its patch and allocator."""
    return request.varied(m.options, patches=specs[cell.patch], allocator=cell.allocator)


def _planned(m: MatrixRequest, cell: Cell, spec: ScenarioSpec, scen: scenario.Scenario, specs: dict[str, list[str]],
             python: str | None) -> request.Planned:
    """A cell's request before it runs: in `python` (--python), this Python (no version axis), or an environment
    built when it starts (its DeepSpeed release known)."""
    here = python is not None or (cell.torch is None and cell.deepspeed is None and not cell.extras(None))
    return request.Planned(request.make(spec, _options(m, cell, specs), scen=scen, label=cell.patch, python=python),
                           built=here, deepspeed=cell.deepspeed)


def _run_cells(m: MatrixRequest, all_cells: list[Cell], c: Campaign, scen: scenario.Scenario, spec: ScenarioSpec,
               specs: dict[str, list[str]], python: str | None) -> bool:
    """Every cell of this shard not yet finished, through the campaign's cell loop; True if interrupted."""
    def start(cell: Cell) -> Callable[[Path], tuple[launch.RunRequest, dict[str, Any]]]:
        def made(group_dir: Path) -> tuple[launch.RunRequest, dict[str, Any]]:
            worker, env_name = (python, None) if python else envs.for_versions(
                cell.torch, cell.deepspeed, m.pip, say, cell.extras(host.package_version("accelerate")))
            return request.make(spec, _options(m, cell, specs), scen=scen, label=cell.patch, out=group_dir,
                                python=worker, env_name=env_name), {"env": env_name, "python": worker}
        return made

    return c.run_cells([engine.Cell(cell.id, m.options.runs, f"cell {cell.id}", start(cell)) for cell in all_cells],
                       kinds.MATRIX.name, m.retry_failed)


def _listing(all_cells: list[Cell], directory: Path, repeat: int, shard: Shard | None) -> MatrixListing:
    return {"matrix": str(directory), "repeat": repeat, "shard": str(shard) if shard else None,
            "cells": [{"id": c.id, "torch": c.torch, "deepspeed": c.deepspeed, "transformers": c.transformers,
                       "accelerate": c.accelerate, "patch": c.patch,
                       "allocator": c.allocator, "finished": engine.finished(directory / c.id, repeat),
                       "shard": shard.owner(i, len(all_cells)) if shard else None}
                      for i, c in enumerate(all_cells)]}
