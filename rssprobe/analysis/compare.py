"""Two sides (runs or run groups) -> what differs between them, and each figure's verdict.

A side is a list of runs of one configuration; every metric then has one sample per run.
Failed runs are kept out of the samples but reported: a comparison that lost runs, or in
which a requested patch never took effect, cannot pass as evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import ValidationError

from .. import verdicts
from ..config import script
from ..config.scenario import Scenario
from ..contract.status import Status
from ..errors import UserError
from ..store.judgement import DAMAGED, MISSING
from ..store.rundir import GroupDir, RunDir, resolve_entry, resolve_runs
from . import answers, effects, metrics, stats
from .metrics import GATED, HEADLINE
from .results import Comparison
from .summary import Summary, summarise


@dataclass
class Side:
    name: str
    runs: list[RunDir]
    summaries: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, ref: str) -> Side:
        """A run (its files must read: else one line, exit 2) or a group (a member that cannot be read is named
        and counted as not finished: the side is then undecided, never good)."""
        name, runs = resolve_runs(ref)
        if isinstance(resolve_entry(ref), GroupDir):
            return cls(name, runs, [summarise(r) for r in runs])
        return cls(name, runs, [Summary(r).as_dict() for r in runs])

    @property
    def readable(self) -> list[dict[str, Any]]:
        """The summaries of runs whose files could be read (the others are missing or damaged)."""
        return [s for s in self.summaries if s["status"] not in (DAMAGED, MISSING)] or self.summaries

    @property
    def ok(self) -> list[dict[str, Any]]:
        return [s for s in self.summaries if s["status"] == Status.OK]

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [s for s in self.summaries if s["status"] != Status.OK]

    def samples(self, metric: str) -> list[float]:
        return [s["metrics"][metric] for s in self.ok if metric in s["metrics"]]

    def scenario(self) -> Scenario | None:
        """The scenario the side ran (its manifest's, size resolved to layers), for naming its figures; None where
        the stored one no longer validates (never another scenario's names: those of what was measured serve)."""
        raw = dict(_scenario(self))
        model = dict(raw.get("model") or {})
        if model.get("layers") is not None:
            model.pop("params", None)
        try:
            return Scenario.model_validate({**raw, "model": model})
        except ValidationError:
            return None

    def measured(self) -> set[str]:
        return {m for s in self.summaries for m in s["metrics"]}

    def never_took_effect(self) -> list[str]:
        return sorted({name for s in self.summaries for name in s["never_took_effect"]})

    def describe(self) -> dict[str, Any]:
        first = self.readable[0]
        effects: dict[str, list[int]] = {}
        for s in self.summaries:
            for i in s["interventions"]:
                effects.setdefault(i["spec"], []).append(i["count"])
        return {
            "name": self.name, "runs": len(self.summaries), "ok": len(self.ok), "scenario": first["scenario"],
            "label": first["label"], "versions": first["versions"], "allocator": first["allocator"],
            "malloc_env": first["malloc_env"], "params": first["params"],
            "patches": effects, "never_took_effect": self.never_took_effect(),
            "failed": [f"{s['run']}: {s['status']} ({s.get('error')})" for s in self.failed],
        }


def _scenario(side: Side) -> dict[str, Any]:
    """The scenario of the side's first run that can be read."""
    first = next((r for r, s in zip(side.runs, side.summaries, strict=True) if s is side.readable[0]), side.runs[0])
    try:
        return first.manifest().scenario or {}
    except UserError:  # no member can be read: the side is undecided anyway
        return {}


def _ranks(side: Side) -> int | None:
    """The ranks of the side's first readable run, as its run recorded them (a launcher's real world)."""
    summary = side.readable[0] if side.readable else side.summaries[0]
    return summary.get("world_size")


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def check_metrics(flag: str, patterns: tuple[str, ...] | list[str], sides: list[Side]) -> None:
    """Each pattern names a figure these stored sides have or can have (metrics.check: close names if not)."""
    measured = {m for side in sides for m in side.measured()}
    scen = sides[0].scenario() if patterns else None
    for pattern in patterns:
        metrics.check(flag, pattern, scen, measured)


def differences(a: Side, b: Side) -> list[tuple[str, Any, Any]]:
    """What differs between the two sides' configurations: (what, A, B)."""
    da, db = a.describe(), b.describe()
    out = []
    ranks_a, ranks_b = _ranks(a), _ranks(b)
    if ranks_a != ranks_b:  # first: a different world changes every partitioned figure (+9 B/param at 1 vs 2)
        out.append(("ranks", ranks_a, ranks_b))
    for key in ("label", "allocator", "malloc_env", "params"):
        if da[key] != db[key]:
            out.append((key, da[key], db[key]))
    for key in sorted(set(da["versions"] or {}) | set(db["versions"] or {})):
        va, vb = (da["versions"] or {}).get(key), (db["versions"] or {}).get(key)
        if va != vb:
            out.append((key, va, vb))
    if da["patches"] != db["patches"]:
        out.append(("patches (fire counts per run)", da["patches"] or "none", db["patches"] or "none"))
    sa, sb = _flat(_scenario(a)), _flat(_scenario(b))
    for key in sorted(set(sa) | set(sb)):
        if sa.get(key) != sb.get(key) and key not in ("patches.patched", "world_size"):
            out.append((f"scenario {key}", sa.get(key), sb.get(key)))
    return out


@dataclass
class Result:
    a: Side
    b: Side
    differences: list[tuple[str, Any, Any]]
    comparisons: dict[str, list[stats.Comparison]]
    threshold: float
    alpha: float
    problems: list[str]
    gated: tuple[str, ...] = GATED
    same_runs: bool = False

    def lead(self) -> effects.Family:
        """The lead's figures assessed together (analysis/effects.py): what the answer, key table and chart show."""
        samples = {m: (self.a.samples(m), self.b.samples(m)) for m in effects.FAMILY}
        gated = {m for m in effects.FAMILY if self.is_gated(m)}
        return effects.assess(samples, gated, self.threshold, self.alpha)

    def is_gated(self, metric: str) -> bool:
        return metrics.is_gated(metric, self.gated)

    def verdict(self) -> str:
        """Over the gated figures, by verdicts.overall: a "~" there cannot pass."""
        checked = [c.verdict for group in self.comparisons.values() for c in group if self.is_gated(c.metric)]
        return verdicts.overall(checked, bool(self.problems))

    def as_dict(self) -> Comparison:
        out = {
            "a": self.a.describe(), "b": self.b.describe(), "threshold_bytes_per_param": self.threshold,
            "alpha": self.alpha, "verdict": self.verdict(), "problems": self.problems, "gated": list(self.gated),
            "same_runs": self.same_runs, "lead": self.lead().as_dict(),
            "differences": [{"what": w, "a": x, "b": y} for w, x, y in self.differences],
            "comparisons": {k: [{**c.as_dict(), "gated": self.is_gated(c.metric)} for c in v]
                            for k, v in self.comparisons.items()},
        }
        return cast(Comparison, {"answer": answers.comparison(out), **out})


def compare(a: Side, b: Side, threshold: float = stats.THRESHOLD, alpha: float = stats.ALPHA,
            force: bool = False, gated: tuple[str, ...] = GATED,
            allow_different_scripts: bool = False) -> Result:
    why = script.different(_scenario(a), _scenario(b))
    if why and not allow_different_scripts:
        raise UserError(f"{a.name} and {b.name} ran different scripts: {why}; comparing them needs "
                        "--allow-different-scripts")
    sa, sb = _scenario(a).get("name"), _scenario(b).get("name")
    # a side with no finished run is undecided whatever it ran
    if sa != sb and not force and not (why and allow_different_scripts) and a.ok and b.ok:
        raise UserError(f"{a.name} is scenario {sa!r} but {b.name} is {sb!r}; comparing different scenarios "
                        "needs --force")
    problems = []
    same = same_runs(a, b)
    if same:
        problems.append(f"{a.name} and {b.name} are the same runs: a comparison of runs with themselves shows nothing")
    for side in (a, b):
        if side.failed:
            problems.append(f"{side.name}: {len(side.failed)} of {len(side.summaries)} runs did not finish")
        if side.never_took_effect():
            problems.append(f"{side.name}: requested patch never took effect: {', '.join(side.never_took_effect())}")
        if not side.ok:
            problems.append(f"{side.name}: no finished run to compare")
    comparisons: dict[str, list[stats.Comparison]] = {}
    if a.ok and b.ok:
        names = sorted({m for s in a.ok + b.ok for m in s["metrics"]})
        for group in metrics.TABLE_GROUPS:
            chosen = [m for m in names if metrics.group(m) == group]
            if group == "phases":
                chosen.sort(key=HEADLINE.index)
            rows = []
            for metric in chosen:
                xa, xb = a.samples(metric), b.samples(metric)
                if xa and xb:
                    rows.append(stats.compare(metric, xa, xb, threshold, alpha))
            if group == "sites":
                rows.sort(key=lambda c: -abs(c.delta))
            comparisons[group] = rows
    result = Result(a, b, differences(a, b), comparisons, threshold, alpha, problems, gated, same)
    if not any(result.is_gated(c.metric) for group in comparisons.values() for c in group) and a.ok and b.ok:
        problems.append(f"none of the gated figures ({', '.join(gated)}) was measured in both sides"
                        + (f" (run with --trim-at-end for {metrics.TRIMMED})" if metrics.TRIMMED in gated else ""))
    return result


def _identity(run: RunDir) -> tuple[str, ...]:
    """A run's identity: its id and start time from its manifest (a copy elsewhere is still the same run), else
    its resolved directory."""
    try:
        m = run.manifest()
        return (run.id, str(m.started), str(m.label))
    except UserError:
        return (str(run.path.resolve()),)


def same_runs(a: Side, b: Side) -> bool:
    """Whether the two sides are the same runs: the same directories, or runs with the same ids and start times."""
    if not a.runs or not b.runs:
        return False
    paths = [{r.path.resolve() for r in side.runs} for side in (a, b)]
    return paths[0] == paths[1] or sorted(map(_identity, a.runs)) == sorted(map(_identity, b.runs))


@dataclass(frozen=True)
class LimitCheck:
    metric: str
    limit: float
    values: list[float]
    verdict: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def check_limits(side: Side, limits: dict[str, float]) -> tuple[str, list[LimitCheck], list[str]]:
    """A ceiling is broken only if every finished repeat is above it; mixed results are undecided."""
    problems = [f"{side.name}: {len(side.failed)} of {len(side.summaries)} runs did not finish"] if side.failed else []
    if side.never_took_effect():
        problems.append(f"{side.name}: requested patch never took effect: {', '.join(side.never_took_effect())}")
    checks = []
    for metric, limit in limits.items():
        values = side.samples(metric)
        if not values:
            checks.append(LimitCheck(metric, limit, [], verdicts.UNDECIDED, "not measured in these runs"))
        elif all(v > limit for v in values):
            checks.append(LimitCheck(metric, limit, values, verdicts.REGRESSION, f"every repeat above {limit}"))
        elif any(v > limit for v in values):
            checks.append(LimitCheck(metric, limit, values, verdicts.UNDECIDED, f"some repeats above {limit}"))
        else:
            checks.append(LimitCheck(metric, limit, values, verdicts.PASS, f"every repeat at or below {limit}"))
    return verdicts.overall([c.verdict for c in checks], bool(problems) or not side.ok), checks, problems
