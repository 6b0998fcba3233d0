"""The node's view of a run: its rank processes' RSS summed, sampled by the orchestrator.

Host OOM happens per node, so a multi-rank run needs the node's peak, not only each rank's
own. Every rank measures its own exact peak (VmHWM); the node's peak is the largest sum of
the ranks' RSS at one moment, which no rank can see. The orchestrator samples it with psutil
(one /proc/<pid>/statm read per rank) as often as it polls the event streams, so its cost is
a few microseconds per rank per poll, far below 1% of a core; a transient shorter than the
interval can be missed, which is why the interval is recorded beside the peak.
"""

from __future__ import annotations

import time
from typing import Any

import psutil


class NodePeak:
    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.procs: dict[int, psutil.Process] = {}
        self.peak = 0
        self.samples = 0
        self._last = 0.0

    def watch(self, event: dict[str, Any]) -> None:
        """Start following a rank when its hello event names its pid."""
        pid = event.get("pid") if event.get("event") == "hello" else None
        if isinstance(pid, int) and pid not in self.procs:
            try:
                self.procs[pid] = psutil.Process(pid)
            except psutil.Error:
                pass

    def sample(self) -> None:
        now = time.monotonic()
        if now - self._last < self.interval_s or not self.procs:
            return
        self._last = now
        total = 0
        for pid, proc in list(self.procs.items()):
            try:
                total += proc.memory_info().rss
            except psutil.Error:  # a rank that has ended holds nothing any more
                del self.procs[pid]
        self.peak = max(self.peak, total)
        self.samples += 1

    def as_dict(self) -> dict[str, Any]:
        return {"peak_rss_bytes": self.peak if self.samples else None, "samples": self.samples,
                "interval_s": self.interval_s}
