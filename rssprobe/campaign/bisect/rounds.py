"""Rounds of run groups per configuration tried, each judged against the reference.

A bisect directory is a campaign (campaign/engine.py): definition.json (what makes two invocations
the same bisect), one directory per configuration with run groups round-1, round-2, ..., and
bisect.json, the result (store/layout.py). A round whose group finished is reused, so rerunning the
same command resumes where it stopped; a different command into the same directory is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import kinds, verdicts
from ...analysis import answers, metrics, stats
from ...analysis.compare import Side, compare
from ...analysis.summary import summarise
from ...config import scenario
from ...config.runoptions import RunOptions
from ...config.scenariospec import ScenarioSpec
from ...errors import UserError
from ...log import say
from ...run import group as groups
from ...run import launch, request
from ...store import layout
from ...store.rundir import GroupDir
from ...store.writer import write_json_atomic
from ..engine import Campaign, Cell
from ..matrix import Outcome

DEFAULT_METRIC = metrics.TRIMMED


def run_group(req: launch.RunRequest, repeat: int) -> Path:
    """One round of runs (a seam: tests replace it with synthetic groups)."""
    group, _statuses = groups.run_group(req, repeat)
    return group.path


def bpp(value: float | None) -> str:
    """A figure in a result's sentence (B/param, two decimals)."""
    return "n/a" if value is None else f"{value:.2f}"


@dataclass
class Runner:
    """Rounds of run groups per configuration tried, and the log of every comparison."""

    root: Path
    scen: scenario.Scenario
    spec: ScenarioSpec
    repeat: int
    metric: str
    threshold: float
    alpha: float
    malloc_env: dict[str, str] = field(default_factory=dict)
    direction: verdicts.Direction | None = "up"  # None: taken from the first decisive probe (the bad endpoint)
    groups: dict[str, list[Path]] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    campaign: Campaign | None = None

    def open(self, definition: dict[str, Any], fresh: bool) -> None:
        """Check the metric, then claim the directory: reuse it for the same bisect, refuse another."""
        metrics.check("--metric", self.metric, self.scen)
        definition = {**definition, **self.spec.identity(), "repeat": self.repeat,
                      "malloc_env": self.malloc_env}
        resumed = (self.root / layout.BISECT_DEFINITION).is_file() and not fresh
        self.campaign = Campaign.open(self.root, kinds.BISECT.name, definition, fresh)
        self.campaign.save()
        if resumed:
            say(f"resuming in {self.root} (finished rounds are reused; --fresh starts over)")
        if self.malloc_env:
            say("glibc fixed for every run: " + " ".join(f"{k}={v}" for k, v in self.malloc_env.items())
                + " (--malloc-env overrides)")

    def round(self, key: str, label: str, python: tuple[str, str | None], patches: list[str]) -> None:
        """The next round of this configuration: reused when it finished, else run (again, whole)."""
        assert self.campaign is not None, "open() first"
        rounds = self.groups.setdefault(key, [])
        rel = f"{key}/{layout.bisect_round(len(rounds) + 1)}"

        def start(out: Path) -> tuple[launch.RunRequest, dict[str, Any]]:
            return self.request(label, patches, python[0], out, python[1]), {}

        self.campaign.add_entry(rel)
        self.campaign.run_cells([Cell(rel, self.repeat, f"{label}, round {len(rounds) + 1}", start)], kinds.BISECT.name,
                                run_group=lambda req, n, _text: GroupDir(run_group(req, n)).statuses())
        if not GroupDir.is_group(self.root / rel):  # the round could not start: the search cannot go on
            raise UserError(str(self.campaign.entry(rel).get("error") or f"{rel}: no runs"))
        rounds.append(self.root / rel)

    def request(self, label: str, patches: list[str], python: str, out: Path | None = None,
                env_name: str | None = None) -> launch.RunRequest:
        """One round's request: the bisect's scenario, repeat and glibc knobs with this configuration's patches,
        in `python` (an environment's: `env_name`)."""
        options = RunOptions(patches=tuple(patches), malloc_env=dict(self.malloc_env), repeat=self.repeat)
        return request.make(self.spec, options, scen=self.scen, label=label, out=out, python=python,
                            env_name=env_name)

    def side(self, key: str) -> Side:
        runs = [r for g in self.groups[key] for r in GroupDir(g).runs()]
        return Side(key, runs, [summarise(r) for r in runs])

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
            self.log.append({**row, "verdict": verdicts.UNDECIDED, "answer": "undecided", "reason": "no finished run"})
            say(f"probe {len(self.log)}: {what} (round {row['round']}): undecided, no finished run")
            return "undecided"
        c = stats.compare(self.metric, xa, xb, self.threshold, self.alpha)
        reason = c.reason
        if self.direction is None and c.verdict in verdicts.MOVED:
            self.direction = "up" if c.verdict == verdicts.REGRESSION else "down"
            say(f"the bad direction is {'an increase' if self.direction == 'up' else 'a decrease'} ({what})")
        answer = verdicts.answer(c.verdict, self.direction or "up")
        if c.verdict in verdicts.MOVED and answer == "same":
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
        return stats.mean_sd(self.side(key).samples(self.metric))[0]

    def report(self, lines: list[str], reference: str, before: str | None, after: str | None,
               data: dict[str, Any]) -> Outcome:
        """The result (with the full comparison of the two sides of the change), written to bisect.json."""
        if before and after:
            data["comparison"] = compare(self.side(before), self.side(after), self.threshold, self.alpha,
                                         force=True, gated=(self.metric,)).as_dict()
        data = {**data, "metric": self.metric, "direction": self.direction, "malloc_env": self.malloc_env,
                "warnings": self.warnings, "lines": lines, "reference": reference, "threshold": self.threshold,
                "alpha": self.alpha, "root": str(self.root)}
        data = {"answer": answers.bisect(data), **data}
        write_json_atomic(self.root / layout.BISECT_RESULT, data)
        return Outcome(kinds.BISECT.name, data)
