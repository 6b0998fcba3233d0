"""Two sides (runs or run groups) -> what differs between them, and each figure's verdict.

A side is a list of runs of one configuration; every metric then has one sample per run.
Failed runs are kept out of the samples but reported: a comparison that lost runs, or in
which a requested patch never took effect, cannot pass as evidence.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from .. import verdicts
from ..errors import UserError
from ..storage import RunDir, resolve_runs
from . import stats
from .summary import Summary

# The figures diff shows and gate checks, by prefix of the metric names in Summary.metrics().
HEADLINE = ("init.rss", "init.peak", "first_step.rss", "first_step.peak", "steady.rss", "steady.peak", "peak",
            "steady.glibc_in_use", "steady.glibc_free", "budget.live", "budget.rss_above_baseline",
            "budget.unexplained", "budget.glibc_free_retained", "budget.not_attributed",
            "budget.rss_after_trim_above_baseline")
GROUPS = (("phases", HEADLINE), ("roles", ("role.", "zero3.")), ("pinned", ("pinned.",)), ("parts", ("part.",)),
          ("node", ("node.",)),
          ("sites", ("site.",)))
# What decides a verdict by default: the low-noise figures. Raw RSS of identical runs differs
# by up to +-4 B/param (glibc retention); RSS after a final malloc_trim agrees within ~1 MiB
# and the live-tensor census exactly (see FACTS), so those gate, the rest inform.
GATED = ("budget.live", "budget.rss_after_trim_above_baseline", "role.*", "zero3.*")


@dataclass
class Side:
    name: str
    runs: list[RunDir]
    summaries: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, ref: str) -> Side:
        name, runs = resolve_runs(ref)
        return cls(name, runs, [Summary(r).as_dict() for r in runs])

    @property
    def ok(self) -> list[dict[str, Any]]:
        return [s for s in self.summaries if s["status"] == "ok"]

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [s for s in self.summaries if s["status"] != "ok"]

    def samples(self, metric: str) -> list[float]:
        return [s["metrics"][metric] for s in self.ok if metric in s["metrics"]]

    def never_took_effect(self) -> list[str]:
        return sorted({name for s in self.summaries for name in s["never_took_effect"]})

    def describe(self) -> dict[str, Any]:
        first = self.summaries[0]
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
    return side.runs[0].manifest().get("scenario", {})


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def differences(a: Side, b: Side) -> list[tuple[str, Any, Any]]:
    """What differs between the two sides' configurations: (what, A, B)."""
    da, db = a.describe(), b.describe()
    out = []
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
        if sa.get(key) != sb.get(key) and key != "patches.patched":
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

    def is_gated(self, metric: str) -> bool:
        return any(fnmatch.fnmatchcase(metric, pattern) for pattern in self.gated)

    def verdict(self) -> str:
        """Over the gated figures, by verdicts.overall: a "~" there cannot pass."""
        checked = [c.verdict for group in self.comparisons.values() for c in group if self.is_gated(c.metric)]
        return verdicts.overall(checked, bool(self.problems))

    def as_dict(self) -> dict[str, Any]:
        return {
            "a": self.a.describe(), "b": self.b.describe(), "threshold_bytes_per_param": self.threshold,
            "alpha": self.alpha, "verdict": self.verdict(), "problems": self.problems, "gated": list(self.gated),
            "differences": [{"what": w, "a": x, "b": y} for w, x, y in self.differences],
            "comparisons": {k: [{**c.as_dict(), "gated": self.is_gated(c.metric)} for c in v]
                            for k, v in self.comparisons.items()},
        }


def compare(a: Side, b: Side, threshold: float = stats.THRESHOLD, alpha: float = stats.ALPHA,
            force: bool = False, gated: tuple[str, ...] = GATED) -> Result:
    sa, sb = _scenario(a).get("name"), _scenario(b).get("name")
    if sa != sb and not force:
        raise UserError(f"{a.name} is scenario {sa!r} but {b.name} is {sb!r}; comparing different scenarios "
                        "needs --force")
    problems = []
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
        for group, prefixes in GROUPS:
            chosen = [m for m in names if m in prefixes] if group == "phases" else \
                     [m for m in names if m.startswith(prefixes)]
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
    result = Result(a, b, differences(a, b), comparisons, threshold, alpha, problems, gated)
    if not any(result.is_gated(c.metric) for group in comparisons.values() for c in group) and a.ok and b.ok:
        problems.append(f"none of the gated figures ({', '.join(gated)}) was measured in both sides"
                        + (" (run with --trim-at-end for budget.rss_after_trim_above_baseline)"
                           if "budget.rss_after_trim_above_baseline" in gated else ""))
    return result
