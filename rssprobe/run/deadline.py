"""A run's time-out, counted on the run's own work: the time DeepSpeed spends compiling its ops is not counted.

The first run on a new machine (or a new torch/DeepSpeed pair) JIT-compiles DeepSpeed's C++ ops: minutes on a
busy machine, once. Counting that against `timeout_s` killed first runs with nothing said. A build is seen two
ways: the worker announces the ops it is about to compile (the `compiling` event, before its baseline), and any
build in progress holds torch's build lock (`<op>/lock` in the run's TORCH_EXTENSIONS_DIR: rssprobe/run/opcache.py),
which also catches an op a script's DeepSpeed config builds inside deepspeed.initialize. While either says a
build runs, the clock stops; a build has its own bound (BUILD_LIMIT_S). When the time runs out, the reason says
where the run was (its last phase or step) and what was not counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BUILD_LIMIT_S = 3600.0  # one build's bound: a compile is minutes, a build stuck for an hour is stuck
LOCK_POLL_S = 1.0  # how often the build locks are looked for (a glob of a small directory)


class Deadline:
    """timeout_s of the run's own time; `expired()` is the reason when it ran out, else None."""

    def __init__(self, timeout_s: float, ops_dir: Path | None, build_limit_s: float = BUILD_LIMIT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_s, self.ops_dir, self.build_limit_s, self.clock = timeout_s, ops_dir, build_limit_s, clock
        self.started = clock()
        self.announced: set[int] = set()  # ranks that said they compile and have not loaded their ops yet
        self.locks: list[str] = []  # ops whose build lock was there at the last look
        self.build_started: float | None = None
        self.built_s = 0.0  # build time already ended, not counted
        self.where = "starting"
        self._looked = float("-inf")

    def watch(self, event: dict[str, Any]) -> None:
        kind, rank = event.get("event"), event.get("rank", 0)
        if kind == "compiling":
            self.announced.add(rank)
        elif kind == "phase":
            self.where = f"phase {event.get('name')}"
            if event.get("name") == "ops_loaded":
                self.announced.discard(rank)
        elif kind == "step":
            self.where = f"step {event.get('step')}"
        elif kind == "init":
            self.where = "after deepspeed.initialize"
        self._account()

    def building(self) -> bool:
        return bool(self.announced or self.locks)

    def _look_for_locks(self) -> None:
        now = self.clock()
        if self.ops_dir is None or now - self._looked < LOCK_POLL_S:
            return
        self._looked = now
        try:
            self.locks = sorted(p.parent.name for p in self.ops_dir.glob("*/lock"))
        except OSError:
            self.locks = []

    def _account(self) -> None:
        """Start or end the uncounted build interval as the build state changes."""
        now = self.clock()
        if self.building() and self.build_started is None:
            self.build_started = now
        elif not self.building() and self.build_started is not None:
            self.built_s += now - self.build_started
            self.build_started = None

    def not_counted_s(self) -> float:
        open_build = self.clock() - self.build_started if self.build_started is not None else 0.0
        return self.built_s + open_build

    def counted_s(self) -> float:
        return self.clock() - self.started - self.not_counted_s()

    def expired(self) -> str | None:
        self._look_for_locks()
        self._account()
        if self.build_started is not None and self.clock() - self.build_started > self.build_limit_s:
            ops = ", ".join(self.locks) or "DeepSpeed's ops"
            return (f"compiling {ops} ran past {self.build_limit_s:.0f} s (a build's own bound; the run's "
                    "timeout_s does not count builds): look for a stuck compiler")
        if self.counted_s() <= self.timeout_s:
            return None
        skipped = self.not_counted_s()
        builds = f", not counting {skipped:.0f} s of DeepSpeed op builds" if skipped >= 1 else ""
        return (f"the worker ran past the scenario's timeout_s ({self.timeout_s:g} s{builds}) during {self.where} "
                "and was killed (--set timeout_s=N gives it longer)")


class LogTail:
    """New complete lines of the run's logs (the worker's, and each rank's), as the processes write them."""

    def __init__(self, paths: Callable[[], list[Path]], on_line: Callable[[str, str], None]) -> None:
        self.paths, self.on_line = paths, on_line
        self.offsets: dict[Path, int] = {}
        self.buffers: dict[Path, bytes] = {}

    def poll(self, final: bool = False) -> None:
        for path in self.paths():
            try:
                with open(path, "rb") as f:
                    f.seek(self.offsets.get(path, 0))
                    data = f.read(1 << 20)
            except OSError:
                continue
            self.offsets[path] = self.offsets.get(path, 0) + len(data)
            *lines, rest = (self.buffers.get(path, b"") + data).split(b"\n")
            self.buffers[path] = rest
            if final and rest:
                lines.append(rest)
                self.buffers[path] = b""
            for line in lines:
                self.on_line(path.name, line.decode("utf-8", errors="replace").rstrip("\r"))
