"""Is the orchestrator that wrote a "running" manifest still alive? (A SIGKILL leaves no last word.)

At start the orchestrator records who it is: its pid, its start time in clock ticks since boot
(/proc/<pid>/stat field 22) and the boot id. A pid alone can be reused by another process
after the orchestrator died; pid + start time + boot id cannot. Reading never writes anything:
a "running" manifest whose orchestrator is gone is shown as incomplete, the directory left as it is.
Standard library only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


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
