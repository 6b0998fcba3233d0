"""Live progress of a run in the terminal: phase, compile notices, step, RSS."""

from __future__ import annotations

from statistics import fmean
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

PHASE_TEXT = {
    "process_start": "starting worker",
    "after_imports": "torch and DeepSpeed imported",
    "ops_loaded": "ops loaded",
    "pre_model": "baseline taken",
    "loading": "loading the model from its checkpoint",
    "after_model": "model built; deepspeed.initialize",
}


class RunProgress:
    """An on_event callback for launch.run that drives a rich progress bar."""

    def __init__(self, steps: int | None, title: str, ranks: int = 1, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("{task.fields[rss]}"), TimeElapsedColumn(),
                                 console=self.console, transient=False)
        self.titles = {r: title if ranks == 1 else f"{title} rank {r}" for r in range(ranks)}
        self.tasks = {r: self.progress.add_task(f"{t}: starting", total=steps, rss="") for r, t in self.titles.items()}

    def __enter__(self) -> RunProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def output(self, log: str, line: str) -> None:
        """A line a script wrote (its loss lines, its warnings), printed above the bar; a rank's own log's lines
        carry the rank."""
        rank = log.removeprefix("worker.rank").removesuffix(".log")
        self.console.print(f"[rank {rank}] {line}" if rank.isdigit() else line, markup=False, highlight=False,
                           soft_wrap=True)

    def __call__(self, e: dict[str, Any]) -> None:
        kind, rank = e["event"], e.get("rank", 0)
        if rank not in self.tasks:
            return
        self.task, title = self.tasks[rank], self.titles[rank]
        rss = f"RSS {e['rss'] / 2**20:,.0f} MiB" if "rss" in e else None
        fields = {"rss": rss} if rss else {}
        if kind == "phase":
            self.progress.update(self.task, description=f"{title}: {PHASE_TEXT.get(e['name'], e['name'])}",
                                 **fields)
        elif kind == "compiling":
            self.progress.update(self.task, description=f"{title}: compiling DeepSpeed op {e['op']} "
                                 "(once per machine and version, about a minute)")
        elif kind == "script_engine" and e.get("steps_total"):  # a script's own total, where it says one
            self.progress.update(self.task, total=e["steps_total"])
        elif kind == "init":
            self.progress.update(self.task, description=f"{title}: training", **fields)
        elif kind == "step":
            self.progress.update(self.task, completed=e["step"], description=f"{title}: step {e['step']}",
                                 **fields)
        elif kind in ("error", "usage_error"):
            self.progress.update(self.task, description=f"{title}: failed")
        elif kind == "end":
            self.progress.update(self.task, description=f"{title}: {e.get('status')}")


class CampaignProgress:
    """A campaign's bar over all its runs, drawn between its groups (each run draws its own bar), with the
    time left estimated from the mean wall time of the runs finished so far (this session's or earlier)."""

    def __init__(self, total: int, title: str) -> None:
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[left]}"), console=Console(stderr=True))
        self.task = self.progress.add_task(title, total=total, left="")
        self.title = title
        self.total = total

    def show(self, done: int, text: str, seconds: list[float] | None = None) -> None:
        left = f"~{fmean(seconds) * (self.total - done) / 60:.0f} min left (mean run {fmean(seconds):.0f} s; " \
               "a new environment adds its build)" if seconds and done < self.total else ""
        self.progress.update(self.task, completed=done, description=f"{self.title}: {text}", left=left)
        self.progress.start()
        self.progress.stop()
