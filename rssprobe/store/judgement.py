"""Does a run's data back its manifest? The one judgement of a run's status, from its files.

* a run whose manifest says ok but whose events do not back it (no `end` event with status ok, fewer
  step events than the manifest's or the scenario's step count, a rank's events missing, a line that is
  not an event), or whose per-step table cannot be read or does not hold its step events (a truncated or
  garbage steps.parquet of any rank), is "incomplete", with the reason: never shown as ok, never counted
  as finished, never compared (verdict undecided, exit 125);
* a "running" run whose orchestrator is gone is "incomplete" too. At start the orchestrator records who
  it is (identity()): its pid, its start time in clock ticks since boot (/proc/<pid>/stat field 22) and
  the boot id; a pid alone can be reused after the orchestrator died, pid + start time + boot id cannot.
  A SIGKILL leaves no last word, so reading decides, and never writes anything.

Every consumer (show, diff, gate, the campaigns' resuming) takes a run's status from judged().
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..contract.files import events_file
from ..contract.manifest import Manifest
from ..contract.status import Status

INCOMPLETE = "incomplete"
MISSING = "missing"  # a group's member that is not there (deleted, or never run)
DAMAGED = "damaged"  # a run whose manifest or events cannot be read
CLAIMS_ALL = (Status.OK,)  # statuses that claim the data is all there
ENDED = (Status.OK, Status.FAILED, Status.TIMEOUT)  # statuses after which a run needs no rerun
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
SHOWN_GAPS = 3  # ranks a status's reason names (a 65,536-rank run's reason stays a line)


@dataclass
class Events:
    """A rank's events that can be read, and the lines that were left out (line number, why)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    exists: bool = True


# (rank, its events) -> why the rank's per-step table does not hold those steps; None when it does (or is absent)
TableCheck = Callable[[int, Events], "str | None"]


def rank_incomplete(name: str, read: Events, steps_expected: int | None) -> str | None:
    """Why one rank's events do not back a finished run; None when they do."""
    if not read.exists:
        return f"{name} is missing"
    if read.bad_lines:
        line, why = read.bad_lines[0]
        more = f" (and {len(read.bad_lines) - 1} more)" if len(read.bad_lines) > 1 else ""
        return f"{name} line {line} is not an event: {why}{more}"
    steps = sum(1 for e in read.events if e["event"] == "step")
    if steps_expected is not None and steps < steps_expected:
        return f"{name} has {steps} of {steps_expected} step events"
    if not any(e["event"] == "end" and e["status"] == Status.OK for e in read.events):
        return f"{name} has no end event with status ok (truncated?)"
    return None


def table_problem(name: str, steps: list[int] | None, read: Events) -> str | None:
    """Why a rank's per-step table (its step numbers, None: unreadable) does not hold its step events."""
    if steps is None:
        return None
    events = [e["step"] for e in read.events if e["event"] == "step"]
    if steps != events:
        return f"{name} holds {len(steps)} steps where the events have {len(events)}"
    return None


def incomplete(manifest: Manifest, read: Callable[[int], Events],
               table: TableCheck | None = None) -> dict[int, str]:
    """rank -> why its files do not back the manifest's ok; empty when they do (or it claims no ok).

    `read(rank)` gives a rank's Events (so the caller's cache is used); `table(rank, events)` why its per-step
    table does not hold them."""
    if manifest.status not in CLAIMS_ALL:
        return {}
    expected = _most(manifest.scenario.get("steps"), manifest.steps_done)
    out = {}
    for rank in range(manifest.world_size):
        want = _most(expected, ((manifest.ranks or {}).get(str(rank)) or {}).get("steps_done"))
        events = read(rank)
        why = rank_incomplete(events_file(rank), events, want) or (table(rank, events) if table else None)
        if why:
            out[rank] = why
    return out


def judged(manifest: Manifest, read: Callable[[int], Events],
           table: TableCheck | None = None) -> tuple[str, str | None, dict[int, str]]:
    """(status, error, rank -> gap): the manifest's status where the files back it, else "incomplete" with why."""
    gaps = incomplete(manifest, read, table)
    if gaps:
        named = list(gaps.values())[:SHOWN_GAPS]  # one line whatever the ranks: the first few, then a count
        more = f" (and {len(gaps) - SHOWN_GAPS:,} more ranks)" if len(gaps) > SHOWN_GAPS else ""
        return INCOMPLETE, "; ".join(named) + more, gaps
    if manifest.status == Status.RUNNING:
        why = gone(manifest.orchestrator)
        if why:
            return INCOMPLETE, why, {}
    return manifest.status, manifest.error, {}


def _most(*counts: Any) -> int | None:
    values = [c for c in counts if isinstance(c, int) and not isinstance(c, bool)]
    return max(values) if values else None


# ---- is the orchestrator that wrote a "running" manifest still alive? ---------------------------------------

def _start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks after boot); None when no such process runs (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: fields resume after its last ')'
    fields = stat[stat.rindex(b")") + 2:].split()
    return None if fields[0] == b"Z" else int(fields[19])


def _boot_id() -> str | None:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return None


def identity(pid: int | None = None) -> dict[str, Any]:
    """Who this process (or `pid`) is, for the manifest."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "start_ticks": _start_ticks(pid), "boot_id": _boot_id()}


def gone(recorded: Any) -> str | None:
    """Why the recorded orchestrator is certainly not running any more; None if it may be (or it is
    not known: a run from before this was recorded, or another machine's /proc)."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get("pid"), int):
        return None
    boot = _boot_id()
    if recorded.get("boot_id") and boot and recorded["boot_id"] != boot:
        return "orchestrator gone: the machine rebooted since the run started"
    if recorded.get("boot_id") and boot is None:
        return None  # this /proc cannot tell
    ticks = _start_ticks(recorded["pid"])
    if ticks is None or (recorded.get("start_ticks") is not None and ticks != recorded["start_ticks"]):
        return f"orchestrator gone: killed? (pid {recorded['pid']} no longer runs it)"
    return None
