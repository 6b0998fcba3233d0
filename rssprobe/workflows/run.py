"""`rssprobe run`: one run, or a group of N fresh runs (--repeat), and what they measured."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config.scenariospec import ScenarioSpec
from ..run import launch, multinode
from ..run.group import Start, build_request, exit_code, run_group, run_one
from ..store.rundir import GroupDir, RunDir, note_latest
from .inspect import View, entry

__all__ = ["Start", "Started", "collect", "prepare", "start"]


@dataclass
class Started:
    """What ran: its directory, each run's status, and its summary as `show` gives it."""

    found: RunDir | GroupDir
    statuses: list[str]
    view: View

    @property
    def exit_code(self) -> int:
        """The worst run's: 0 ok, 130 interrupted, 1 otherwise."""
        return max(exit_code(status) for status in self.statuses)


def start(s: Start) -> Started:
    """One run, or a group with repeat > 1."""
    req = build_request(s)
    if s.options.runs == 1:
        result = run_one(req)
        note_latest(result.run.path)  # `show latest` finds it wherever --out put it
        return Started(result.run, [result.status], entry(result.run))
    group, statuses = run_group(req, s.options.runs)
    note_latest(group.path)
    return Started(group, statuses, entry(group))


def prepare(spec: ScenarioSpec, out: Path, patched: bool, patches: list[str]) -> str:
    """`rssprobe prepare`: a run directory for ranks launched elsewhere (several nodes); how to start them."""
    return multinode.prepare(spec, out, patched, patches)


def collect(run_dir: Path) -> Started:
    """`rssprobe collect`: conclude a run whose ranks were launched elsewhere; what it measured."""
    result = launch.collect(run_dir)
    return Started(result.run, [result.status], entry(result.run))
