"""Rounds of run groups per configuration tried, each judged against the reference.

A bisect directory holds definition.json (what makes two invocations the same bisect),
one directory per configuration with run groups round-1, round-2, ..., and bisect.json
(rssprobe.layout). A round whose group finished is reused, so rerunning the same command
resumes where it stopped; a different command into the same directory is refused.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

from .. import groups, launcher, layout, scenario, storage, verdicts
from ..analysis import metrics, stats
from ..analysis.compare import Side, compare
from ..analysis.summary import Summary
from ..errors import UserError
from ..log import say
from ..reporters import diffviews, views
from ..reporters.output import emit

DEFAULT_METRIC = "budget.rss_after_trim_above_baseline"


def run_group(req: launcher.RunRequest, repeat: int) -> Path:
    """One round of runs (a seam: tests replace it with synthetic groups)."""
    group, _statuses = groups.run_group(req, repeat, show=False)
    return group.path


@dataclass
class Runner:
    """Rounds of run groups per configuration tried, and the log of every comparison."""

    root: Path
    scen: scenario.Scenario
    ref: str
    sets: list[str]
    repeat: int
    metric: str
    threshold: float
    alpha: float
    malloc_env: dict[str, str] = field(default_factory=dict)
    direction: verdicts.Direction | None = "up"  # None: taken from the first decisive probe (the bad endpoint)
    groups: dict[str, list[Path]] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def open(self, definition: dict[str, Any], fresh: bool) -> None:
        """Check the metric, then claim the directory: reuse it for the same bisect, refuse another."""
        metrics.check("--metric", self.metric, self.scen)
        if fresh and self.root.exists():
            shutil.rmtree(self.root)
        path = self.root / layout.BISECT_DEFINITION
        definition = {**definition, "scenario": self.ref, "sets": self.sets, "repeat": self.repeat,
                      "malloc_env": self.malloc_env}
        if path.is_file():
            if json.loads(path.read_text()) != json.loads(json.dumps(definition)):
                raise UserError(f"{self.root}: made by a different bisect command; give another --out, or --fresh")
            say(f"resuming in {self.root} (finished rounds are reused; --fresh starts over)")
        self.root.mkdir(parents=True, exist_ok=True)
        storage.write_json_atomic(path, definition)
        if self.malloc_env:
            say("glibc fixed for every run: " + " ".join(f"{k}={v}" for k, v in self.malloc_env.items())
                + " (--malloc-env overrides)")

    def round(self, key: str, label: str, python: tuple[str, str | None], patches: list[str]) -> None:
        rounds = self.groups.setdefault(key, [])
        out = self.root / key / layout.bisect_round(len(rounds) + 1)
        if groups.finished(out, self.repeat):
            rounds.append(out)
            return
        if out.exists():
            shutil.rmtree(out)  # an unfinished round proves nothing: run it whole again
        argv = groups.rerun_argv(self.ref, self.sets, patches, self.repeat, out, python[1], python[0],
                                 malloc_env=self.malloc_env)
        req = launcher.RunRequest(scenario=self.scen, scenario_ref=self.ref, label=label, patches=patches,
                                  malloc_env=self.malloc_env, python=python[0], out=out, command=argv)
        rounds.append(run_group(req, self.repeat))

    def side(self, key: str) -> Side:
        runs = [r for g in self.groups[key] for r in storage.GroupDir(g).runs()]
        return Side(key, runs, [Summary(r).as_dict() for r in runs])

    def reference(self, key: str) -> Side:
        """The reference side; refuses a figure it lacks, warns about one its own repeats disagree on."""
        side = self.side(key)
        values = side.samples(self.metric)
        if not values:
            known = sorted({m for s in side.ok for m in s["metrics"] if not m.startswith("site.")})
            why = "no run finished" if not side.ok else f"known figures: {', '.join(known)}"
            raise UserError(f"--metric {self.metric}: not measured in the reference runs ({why})")
        spread = max(values) - min(values)
        if spread > self.threshold:
            self.warn(f"{self.metric} differs by {spread:.2f} B/param between identical runs of the reference, "
                      f"more than the threshold {self.threshold}: a probe can stop at noise; prefer an exact figure "
                      f"({', '.join(metrics.EXACT)}) or more --repeat")
        return side

    def warn(self, text: str) -> None:
        self.warnings.append(text)
        say(f"WARNING: {text}")

    def judge(self, ref_key: str, key: str, what: str) -> verdicts.Answer:
        """The bisect answer of this probe's verdict; a move the other way is reported, not followed."""
        a, b = self.side(ref_key), self.side(key)
        xa, xb = a.samples(self.metric), b.samples(self.metric)
        row = {"key": key, "what": what, "round": len(self.groups[key]), "runs": f"{len(b.ok)}/{len(b.summaries)}"}
        if not xb:
            self.log.append({**row, "verdict": "undecided", "answer": "undecided", "reason": "no finished run"})
            say(f"probe {len(self.log)}: {what} (round {row['round']}): undecided, no finished run")
            return "undecided"
        c = stats.compare(self.metric, xa, xb, self.threshold, self.alpha)
        reason = c.reason
        if self.direction is None and c.verdict in ("regression", "improvement"):
            self.direction = "up" if c.verdict == "regression" else "down"
            say(f"the bad direction is {'an increase' if self.direction == 'up' else 'a decrease'} ({what})")
        answer = verdicts.answer(c.verdict, self.direction or "up")
        if c.verdict in ("regression", "improvement") and answer == "same":
            reason += "; the other way from the change sought: reported, not followed"
        self.log.append({**row, "a": c.mean_a, "b": c.mean_b, "delta": c.delta, "verdict": c.verdict,
                         "answer": answer, "reason": reason})
        say(f"probe {len(self.log)}: {what} (round {row['round']}): {c.verdict}, {reason}")
        return answer

    def note(self, key: str, what: str, reason: str) -> None:
        self.log.append({"key": key, "what": what, "round": 0, "runs": "0/0", "verdict": "skip", "answer": "skip",
                         "reason": reason})
        say(f"probe {len(self.log)}: {what}: skipped, {reason}")

    def mean(self, key: str) -> float | None:
        values = self.side(key).samples(self.metric)
        return fmean(values) if values else None

    def table(self, reference: str) -> views.Table:
        rows = [[i + 1, r["what"], r["round"], r["runs"], views.bpp(r.get("a")), views.bpp(r.get("b")),
                 views.bpp(r.get("delta"), True), verdicts.mark(r["verdict"]) if r["verdict"] in verdicts.TABLE
                 else r["verdict"], r["answer"]] for i, r in enumerate(self.log)]
        sought = {"up": "an increase", "down": "a decrease", None: "either way"}[self.direction]
        return views.Table(f"Probes ({self.metric}, bytes per parameter; A = {reference})",
                           ["probe", "tried", "round", "runs ok", "A", "B", "B - A", "verdict", "answer"], rows,
                           note=f"a change counts at >= {self.threshold} B/param and p <= {self.alpha}, and only "
                                f"{sought}; undecided probes get another round of repeats")

    def report(self, lines: list[str], probes: views.Table, before: str | None, after: str | None,
               data: dict[str, Any], fmt: str) -> None:
        """Print the result (and the full comparison of the two sides of the change); write bisect.json."""
        tables = [probes]
        if before and after:
            result = compare(self.side(before), self.side(after), self.threshold, self.alpha, force=True,
                             gated=(self.metric,)).as_dict()
            tables += diffviews.tables(result)
            data["comparison"] = result
        data = {**data, "metric": self.metric, "direction": self.direction, "malloc_env": self.malloc_env,
                "warnings": self.warnings}
        self.root.mkdir(parents=True, exist_ok=True)
        storage.write_json_atomic(self.root / layout.BISECT_RESULT, data)
        emit(fmt, data, [*lines, *[f"WARNING: {w}" for w in self.warnings], f"runs under {self.root}"], tables,
             alarm=data.get("status") != "unchanged")
