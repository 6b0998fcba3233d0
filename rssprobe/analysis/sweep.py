"""A size sweep's finished runs as fit points, every figure fitted as fixed + slope x params, and two sweeps
compared part by part (the slope and the fixed part each decide apart).

A scale directory (written by campaign/scale.py, its index read by store/campaign.py) holds one run group
per model size; runs that did not end ok are kept out of the fit and named. A shard of a sweep (`--shard`)
holds some sizes only: the others are named as another shard's until `rssprobe merge` joins them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from .. import verdicts
from ..contract.status import Status
from ..errors import UserError
from ..store import campaign
from ..store.layout import SCALE_INDEX
from ..store.rundir import GroupDir, RunDir
from . import answers, metrics, stats
from . import fit as fitting
from .metrics import GATED
from .results import ScaleSweep, SweepComparison
from .summary import Summary

NO_FIT = "fewer than 2 sizes have a finished run: nothing to fit"


@dataclass(frozen=True)
class ScaleDir:
    path: Path

    @staticmethod
    def is_scale(ref: str | Path) -> bool:
        return (Path(ref) / SCALE_INDEX).is_file()

    @property
    def id(self) -> str:
        return self.path.name

    def info(self) -> dict[str, Any]:
        return campaign.read_index(self.path, "scale")

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
    other_shards: list[str] = field(default_factory=list)  # sizes another shard runs (a shard's directory)

    @classmethod
    def load(cls, ref: str | Path) -> Sweep:
        scale = ScaleDir(Path(ref))
        sweep = cls(scale, scale.info())
        repeat = sweep.info.get("repeat", 1)
        for entry in sweep.info["groups"]:
            params, group = entry["params"], scale.path / entry["dir"]
            try:
                runs = GroupDir(group).present() if GroupDir.is_group(group) else []  # a missing one: counted below
            except UserError as e:  # a damaged group.json: named, the other sizes still fitted
                sweep.problems.append(f"{group.name}: unreadable ({e}); kept out of the fit")
                sweep.sizes.append({"params": params, "group": str(group), "runs": 0, "ok": 0})
                continue
            ok = 0
            for run in runs:
                try:
                    summary = Summary(run)
                except UserError as e:  # a damaged run is left out, not the whole sweep
                    sweep.problems.append(f"{group.name}/{run.id}: unreadable ({e}); kept out of the fit")
                    continue
                status = summary.status
                if status == Status.OK and summary.params:
                    sweep.points.append((summary.params, summary.metrics()))
                    ok += 1
                else:
                    sweep.problems.append(f"{group.name}/{run.id}: {status} ({summary.error}); kept out of the fit")
                sweep.never_took_effect += [n for n in summary.never_took_effect() if n not in sweep.never_took_effect]
            here = sweep.info.get("shard")
            if not runs and here and entry.get("shard") not in (None, int(here.split("/")[0])):
                sweep.other_shards.append(f"{group.name} (shard {entry['shard']}/{here.split('/')[1]})")
            # the sweep's repeat as its index says, or the group's own when larger: a size with fewer runs than
            # either is not finished (never PASS on 2 runs of a sweep declared at 3)
            elif len(runs) < (expected := max(GroupDir(group).repeat(), repeat) if runs else repeat):
                sweep.problems.append(f"{group.name}: {expected - len(runs)} of {expected} runs missing "
                                      "(not run, interrupted or deleted)")
            sweep.sizes.append({"params": params, "group": str(group), "runs": len(runs), "ok": ok})
        if sweep.never_took_effect:
            sweep.problems.append(f"requested patch never took effect: {', '.join(sweep.never_took_effect)}")
        if len({p for p, _m in sweep.points}) < 2:
            sweep.problems.append(NO_FIT)
        return sweep

    def fits(self) -> list[fitting.Fit]:
        return fitting.fit_all(self.points)

    def series(self, figure: str) -> list[tuple[int, float]]:
        """(params, bytes above the baseline) of each finished run that has the figure."""
        return [(p, figures[figure] * p) for p, figures in self.points if figure in figures]

    def runs(self) -> list[RunDir]:
        """Every run of every size, finished or not."""
        return [r for _p, g in self.scale.groups() if GroupDir.is_group(g) for r in GroupDir(g).runs()]

    def as_dict(self) -> ScaleSweep:
        out = {"scale": str(self.scale.path), **self.info, "sizes_run": self.sizes, "problems": self.problems,
               "other_shards": self.other_shards, "runs_in_fit": len(self.points),
               "fit": [fit_row(f) for f in self.fits()]}
        return cast(ScaleSweep, {"answer": answers.sweep(out), **out})


def table(ref: str | Path) -> ScaleSweep:
    """What `show DIR` prints of a size sweep (its kind's table: rssprobe/kinds.py)."""
    return Sweep.load(ref).as_dict()


def fit_row(f: fitting.Fit) -> dict[str, Any]:
    return {"figure": f.figure, "slope_bytes_per_param": f.slope_bytes_per_param,
            "slope_interval_bytes_per_param": f.slope_interval, "fixed_bytes": f.fixed_bytes,
            "fixed_interval_bytes": f.fixed_interval, "worst_residual_bytes": f.worst_residual_bytes,
            "runs": f.n, "sizes": f.sizes, "dof": f.dof, "level": fitting.LEVEL}


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
        return metrics.is_gated(figure, self.gated)

    def verdict(self) -> str:
        """The gate's verdict over the slope and fixed parts of the figures that decide (verdicts.overall)."""
        return verdicts.overall([d.verdict for pair in self.deltas if self.is_gated(pair[0].figure) for d in pair],
                                bool(self.problems))

    def as_dict(self) -> SweepComparison:
        out = {"a": self.a.as_dict(), "b": self.b.as_dict(), "verdict": self.verdict(), "problems": self.problems,
               "gated": list(self.gated), "slope_threshold_bytes_per_param": self.slope_threshold,
               "fixed_threshold_bytes": self.fixed_threshold, "level": fitting.LEVEL,
               "comparisons": [{"figure": s.figure, "gated": self.is_gated(s.figure), "slope": s.as_dict(),
                                "fixed": f.as_dict()} for s, f in self.deltas]}
        return cast(SweepComparison, {"answer": answers.sweep_comparison(out), **out})


def compare(a_ref: str, b_ref: str, gated: tuple[str, ...] = GATED, slope_threshold: float = stats.THRESHOLD,
            fixed_threshold: float = fitting.FIXED_THRESHOLD, force: bool = False) -> Comparison:
    for ref in (a_ref, b_ref):
        if not ScaleDir.is_scale(ref):
            raise UserError(f"{ref}: not a scale directory (no {SCALE_INDEX}); a scale sweep compares only with "
                            "another")
    a, b = Sweep.load(a_ref), Sweep.load(b_ref)
    if tuple(gated) != GATED:  # a misspelt --metric is refused with the close names, as everywhere
        measured = {m for side in (a, b) for _p, figures in side.points for m in figures}
        for pattern in gated:
            metrics.check("--metric", pattern, None, measured)  # the figures these sweeps have
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
