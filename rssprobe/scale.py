"""Size sweeps: one run group per model size, and every figure fitted as fixed + slope x params.

A scale directory holds
  scale.json          what the sweep is (scenario, sizes, options, command) and its groups
  params-<N>/         one run group (GroupDir, `rssprobe show` works on it) per model size,
                      N the parameter count the model actually has
Re-running the same command reuses every group whose runs all ended (ok, failed, timeout);
an unfinished group (interrupted) is run again whole. Runs that did not end ok are kept out
of the fit and named.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import groups, launcher, layout, preflight, scenario, storage, verdicts
from .analysis import fit as fitting
from .analysis import stats
from .analysis.compare import GATED
from .analysis.summary import Summary
from .errors import UserError
from .log import say

INDEX = layout.SCALE_INDEX


def parse_sizes(text: str) -> list[float]:
    """'4e6,16e6,64e6' -> sizes; anything else is one line (UserError) before any training starts."""
    sizes = []
    for item in text.split(","):
        try:
            value = float(item.strip())
        except ValueError:
            raise UserError(f"--params {text}: {item.strip()!r} is not a number") from None
        if not math.isfinite(value) or value <= 0:
            raise UserError(f"--params {text}: {item.strip()} is not a parameter count > 0")
        sizes.append(value)
    if len(set(sizes)) < 2:
        raise UserError(f"--params {text}: a sweep needs at least 2 distinct sizes")
    return sizes


def size_scenarios(ref: str, sets: list[str], sizes: list[float]) -> list[scenario.Scenario]:
    """One scenario per size (--set model.params=N), sorted; two sizes that build one model are refused."""
    scens = [scenario.load(ref, [*sets, f"model.params={size!r}"]) for size in sizes]
    for scen in scens:  # the largest size must fit before the smallest one runs
        preflight.check_memory(scen)
    by_params: dict[int, float] = {}
    for size, scen in zip(sizes, scens, strict=True):
        n = scen.model.n_params
        if n in by_params:
            raise UserError(f"--params {by_params[n]:g} and {size:g} both build the same model ({scen.model.n_layers} "
                            f"layers of width {scen.model.width}, {n:,} params); choose sizes further apart")
        by_params[n] = size
    return sorted(scens, key=lambda s: s.model.n_params)


def default_dir(scenario_name: str, label: str, definition: dict[str, Any]) -> Path:
    digest = hashlib.sha1(json.dumps(definition, sort_keys=True).encode()).hexdigest()[:8]
    return layout.scale_root() / layout.slug(f"{scenario_name}-{label}-{digest}")


@dataclass(frozen=True)
class ScaleDir:
    path: Path

    @staticmethod
    def is_scale(ref: str | Path) -> bool:
        return (Path(ref) / INDEX).is_file()

    @property
    def id(self) -> str:
        return self.path.name

    def info(self) -> dict[str, Any]:
        path = self.path / INDEX
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"{self.path}: not a scale directory (no {INDEX})") from None
        except UnicodeDecodeError:
            raise UserError(f"{path}: damaged (not UTF-8 text)") from None
        except json.JSONDecodeError as e:
            raise UserError(f"{path}: damaged (not JSON: {e})") from None
        members = data.get("groups") if isinstance(data, dict) else None
        if not isinstance(members, list) or not all(isinstance(g, dict) and isinstance(g.get("params"), int)
                                                    and isinstance(g.get("dir"), str) for g in members):
            raise UserError(f"{path}: damaged (no list of groups with params and dir)")
        for g in members:
            if Path(g["dir"]).is_absolute() or ".." in Path(g["dir"]).parts:
                raise UserError(f"{path}: damaged (group dir {g['dir']!r} is outside the scale directory)")
        repeat = data.get("repeat", 1)
        if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
            raise UserError(f"{path}: damaged (repeat {repeat!r} is not a count of runs)")
        return data

    def groups(self) -> list[tuple[int, Path]]:
        return [(g["params"], self.path / g["dir"]) for g in self.info()["groups"]]


@dataclass
class Sweep:
    """The finished runs of a scale directory as fit points, what was left out, and the fits."""

    scale: ScaleDir
    info: dict[str, Any]
    points: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    sizes: list[dict[str, Any]] = field(default_factory=list)  # per group: params, runs, ok
    problems: list[str] = field(default_factory=list)
    never_took_effect: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, ref: str | Path) -> Sweep:
        scale = ScaleDir(Path(ref))
        sweep = cls(scale, scale.info())
        repeat = sweep.info.get("repeat", 1)
        for params, group in scale.groups():
            runs = storage.GroupDir(group).runs() if (group / storage.GROUP).is_file() else []
            ok = 0
            for run in runs:
                try:
                    summary = Summary(run)
                except UserError as e:  # a damaged run is left out, not the whole sweep
                    sweep.problems.append(f"{group.name}/{run.id}: unreadable ({e}); kept out of the fit")
                    continue
                status = summary.status
                if status == "ok" and summary.params:
                    sweep.points.append((summary.params, summary.metrics()))
                    ok += 1
                else:
                    sweep.problems.append(f"{group.name}/{run.id}: {status} ({summary.error}); "
                                          "kept out of the fit")
                sweep.never_took_effect += [n for n in summary.never_took_effect() if n not in sweep.never_took_effect]
            if len(runs) < repeat:
                sweep.problems.append(f"{group.name}: {repeat - len(runs)} of {repeat} runs missing "
                                      "(not run or interrupted)")
            sweep.sizes.append({"params": params, "group": str(group), "runs": len(runs), "ok": ok})
        if sweep.never_took_effect:
            sweep.problems.append(f"requested patch never took effect: {', '.join(sweep.never_took_effect)}")
        if len({p for p, _m in sweep.points}) < 2:
            sweep.problems.append("fewer than 2 sizes have a finished run: nothing to fit")
        return sweep

    def fits(self) -> list[fitting.Fit]:
        return fitting.fit_all(self.points)

    def series(self, figure: str) -> list[tuple[int, float]]:
        """(params, bytes above the baseline) of each finished run that has the figure."""
        return [(p, metrics[figure] * p) for p, metrics in self.points if figure in metrics]

    def runs(self) -> list[storage.RunDir]:
        """Every run of every size, finished or not."""
        return [r for _p, g in self.scale.groups() if (g / storage.GROUP).is_file() for r in storage.GroupDir(g).runs()]

    def as_dict(self) -> dict[str, Any]:
        return {"scale": str(self.scale.path), **self.info, "sizes_run": self.sizes, "problems": self.problems,
                "runs_in_fit": len(self.points), "fit": [fit_row(f) for f in self.fits()]}


def fit_row(f: fitting.Fit) -> dict[str, Any]:
    return {"figure": f.figure, "slope_bytes_per_param": f.slope_bytes_per_param,
            "slope_interval_bytes_per_param": f.slope_interval, "fixed_bytes": f.fixed_bytes,
            "fixed_interval_bytes": f.fixed_interval, "worst_residual_bytes": f.worst_residual_bytes,
            "runs": f.n, "sizes": f.sizes, "dof": f.dof, "level": fitting.LEVEL}


# ---- running a sweep -------------------------------------------------------------------

RunGroup = Callable[..., tuple[storage.GroupDir, list[str]]]  # groups.run_group(req, repeat, show, title)
Say = Callable[[str], None]


def definition(req: launcher.RunRequest, sizes: list[float], repeat: int, sets: list[str]) -> dict[str, Any]:
    """What makes two scale commands the same sweep (a patch file by its content, not only its name)."""
    files = [f"{p}:{hashlib.sha1(p.read_bytes()).hexdigest()[:12] if p.is_file() else 'missing'}"
             for p in req.patch_files]
    return {"scenario": req.scenario_ref, "sizes": sorted(sizes), "repeat": repeat, "sets": sets, "label": req.label,
            "patches": req.patches, "patch_files": files, "allocator": req.allocator, "malloc_env": req.malloc_env,
            "python": req.python}


def open_dir(directory: Path, definition: dict[str, Any], fresh: bool) -> None:
    """Refuse a directory made by another sweep (or by something else); --fresh empties a scale directory."""
    if directory.exists() and any(directory.iterdir()):
        if not ScaleDir.is_scale(directory):
            raise UserError(f"{directory}: exists, is not empty and is not a scale directory; give another --out")
        if fresh:
            shutil.rmtree(directory)
        elif ScaleDir(directory).info().get("definition") != definition:
            raise UserError(f"{directory}: made by a different scale command; give another --out or --fresh")
    directory.mkdir(parents=True, exist_ok=True)


def run(directory: Path, definition: dict[str, Any], base: launcher.RunRequest, scens: list[scenario.Scenario],
        repeat: int, run_group: RunGroup, fresh: bool = False, say: Say = print) -> bool:
    """Run every size not yet finished into directory; True if interrupted (Ctrl-C)."""
    open_dir(directory, definition, fresh)
    sizes = [{"params": s.model.n_params, "dir": layout.scale_group(s.model.n_params)} for s in scens]
    info = {"scenario": base.scenario_ref, "scenario_name": base.scenario.name, "label": base.label,
            "sizes": definition["sizes"], "params": [g["params"] for g in sizes], "repeat": repeat,
            "options": {k: v for k, v in definition.items() if k not in ("scenario", "sizes", "repeat")},
            "definition": definition, "command": base.command, "groups": sizes,
            "created": (ScaleDir(directory).info().get("created") if ScaleDir.is_scale(directory) else None)
            or storage.now_iso()}
    storage.write_json_atomic(directory / INDEX, info)
    total = len(scens) * repeat
    for k, scen in enumerate(scens):
        group = directory / layout.scale_group(scen.model.n_params)
        where = f"size {k + 1}/{len(scens)} ({scen.model.n_params / 1e6:.1f} M params)"
        if groups.finished(group, repeat):
            say(f"sweep {directory.name}: {where} already finished, reused")
            continue
        if group.exists():
            shutil.rmtree(group)  # an unfinished group: run it whole again
        first, last = k * repeat + 1, (k + 1) * repeat
        say(f"sweep {directory.name}: {where}, " + (f"run {first}" if first == last else f"runs {first}-{last}")
            + f" of {total}")
        req = dataclasses.replace(base, scenario=scen, out=group)
        _group, statuses = run_group(req, repeat, show=False, title=f"{scen.name} {base.label}, {where}")
        if "interrupted" in statuses:
            return True
    return False


def sweep(sizes: list[float], s: groups.Start, out: Path | None, fresh: bool, fmt: str) -> int:
    """`rssprobe scale`: run (or resume) the sweep, show its fit; exit 130 interrupted, 1 runs lost, else 0."""
    from .reporters.output import show_scale

    scens = size_scenarios(s.scenario_ref, s.sets, sizes)
    req = groups.build_request(s)
    what = definition(req, sizes, s.repeat, s.sets)
    directory = out or default_dir(req.scenario.name, req.label, what)
    interrupted = run(directory, what, req, scens, s.repeat, groups.run_group, fresh, say)
    problems = show_scale(str(directory), fmt)["problems"]
    say(f"scale directory: {directory}")
    return 130 if interrupted else 1 if problems else 0


# ---- comparing two sweeps -----------------------------------------------------------------

@dataclass
class Comparison:
    a: Sweep
    b: Sweep
    deltas: list[tuple[fitting.Delta, fitting.Delta]]  # (slope, fixed) per figure measured in both
    gated: tuple[str, ...]
    problems: list[str]
    slope_threshold: float
    fixed_threshold: float

    def is_gated(self, figure: str) -> bool:
        return any(fnmatch.fnmatchcase(figure, p) for p in self.gated)

    def verdict(self) -> str:
        """The gate's verdict over the slope and fixed parts of the figures that decide (verdicts.overall)."""
        return verdicts.overall([d.verdict for pair in self.deltas if self.is_gated(pair[0].figure) for d in pair],
                                bool(self.problems))

    def as_dict(self) -> dict[str, Any]:
        return {"a": self.a.as_dict(), "b": self.b.as_dict(), "verdict": self.verdict(), "problems": self.problems,
                "gated": list(self.gated), "slope_threshold_bytes_per_param": self.slope_threshold,
                "fixed_threshold_bytes": self.fixed_threshold, "level": fitting.LEVEL,
                "comparisons": [{"figure": s.figure, "gated": self.is_gated(s.figure), "slope": s.as_dict(),
                                 "fixed": f.as_dict()} for s, f in self.deltas]}


def compare(a_ref: str, b_ref: str, gated: tuple[str, ...] = GATED, slope_threshold: float = stats.THRESHOLD,
            fixed_threshold: float = fitting.FIXED_THRESHOLD, force: bool = False) -> Comparison:
    for ref in (a_ref, b_ref):
        if not ScaleDir.is_scale(ref):
            raise UserError(f"{ref}: not a scale directory (no {INDEX}); a scale sweep compares only with another")
    a, b = Sweep.load(a_ref), Sweep.load(b_ref)
    if a.info.get("scenario_name") != b.info.get("scenario_name") and not force:
        raise UserError(f"{a_ref} is scenario {a.info.get('scenario_name')!r} but {b_ref} is "
                        f"{b.info.get('scenario_name')!r}; comparing different scenarios needs --force")
    problems = [f"{side.scale.id}: {p}" for side in (a, b) for p in side.problems]
    fits_b = {f.figure: f for f in b.fits()}
    deltas = [fitting.compare(fa, fits_b[fa.figure], slope_threshold, fixed_threshold)
              for fa in a.fits() if fa.figure in fits_b]
    result = Comparison(a, b, deltas, gated, problems, slope_threshold, fixed_threshold)
    if deltas and not any(result.is_gated(s.figure) for s, _f in deltas):
        problems.append(f"none of the gated figures ({', '.join(gated)}) was fitted in both sweeps")
    return result
