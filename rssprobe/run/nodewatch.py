"""The node's view of a run: its rank processes' RSS summed, sampled by the orchestrator.

Host OOM happens per node, so a multi-rank run needs the node's peak, not only each rank's
own. Every rank measures its own exact peak (VmHWM); the node's peak is the largest sum of
the ranks' RSS at one moment, which no rank can see. The orchestrator samples it with psutil
(one /proc/<pid>/statm read per rank) as often as it polls the event streams, so its cost is
a few microseconds per rank per poll, far below 1% of a core; a transient shorter than the
interval can be missed, which is why the interval is recorded beside the peak.

The node's model peak is the same sum over the time the ranks build or load their model (from the first rank's
baseline, pre_model, to the last rank's after_model, or its load event when it loads a checkpoint): where a
checkpoint load runs out of host RAM, every rank holding its copy at once (FAI-RL #68). Ranks overlap in time,
so it is measured, not added; it is sampled more often (MODEL_INTERVAL_S), as a load can take a second, and
still misses transients shorter than that (it never exceeds the ranks' exact load peaks summed).
"""

from __future__ import annotations

import time
from typing import Any

import psutil

MODEL_INTERVAL_S = 0.02


class NodePeak:
    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.procs: dict[int, psutil.Process] = {}
        self.peak = 0
        self.samples = 0
        self._last = 0.0
        self.building: set[int] = set()  # ranks between their baseline and their model (built or loaded)
        self.model_peak = 0
        self.model_samples = 0

    def watch(self, event: dict[str, Any]) -> None:
        """Start following a rank when its hello event names its pid; follow the model phase by its phases."""
        pid = event.get("pid") if event.get("event") == "hello" else None
        if isinstance(pid, int) and pid not in self.procs:
            try:
                self.procs[pid] = psutil.Process(pid)
            except psutil.Error:
                pass
        kind, name, rank = event.get("event"), event.get("name"), event.get("rank", 0)
        if (kind == "phase" and name in ("pre_model", "loading")) or \
                (kind == "load" and rank in self.building) or (kind == "phase" and name == "after_model"):
            if kind == "phase" and name in ("pre_model", "loading"):
                self.building.add(rank)
            else:  # a rank that loaded its model is done at its load event; one that built it, at after_model
                self.building.discard(rank)
            self._last = 0.0  # a sample now: the phase's first and last moments count

    def sample(self) -> None:
        now = time.monotonic()
        interval = MODEL_INTERVAL_S if self.building else self.interval_s
        if now - self._last < interval or not self.procs:
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
        if self.building:
            self.model_peak = max(self.model_peak, total)
            self.model_samples += 1

    def as_dict(self) -> dict[str, Any]:
        return {"peak_rss_bytes": self.peak if self.samples else None, "samples": self.samples,
                "interval_s": self.interval_s,
                "model_peak_rss_bytes": self.model_peak if self.model_samples else None,
                "model_samples": self.model_samples, "model_interval_s": MODEL_INTERVAL_S}
