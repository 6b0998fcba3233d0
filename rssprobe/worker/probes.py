"""Cheap per-interval memory probes: RSS, exact peak, glibc counters, CUDA allocators.

The peak of nested intervals (a step, a site inside it, a site inside that) comes from a
single kernel counter, VmHWM. Resetting it for an inner interval would lose the outer
interval's peak so far, so before every reset the current VmHWM is folded into the
enclosing interval's running peak; each interval's peak is then exact.
"""

from __future__ import annotations

from typing import Any

from . import glibc, procfs
from .cudaprobe import cuda_stats  # the worker's CUDA reader (parsed by documented key sets)

__all__ = ["Interval", "PeakTracker", "cuda_stats", "snapshot"]


class Interval:
    __slots__ = ("fast", "peak", "rss0", "rss1")

    def __init__(self, rss0: int, fast: bool) -> None:
        self.rss0 = rss0
        self.peak = rss0
        self.rss1 = rss0  # RSS when the interval closed
        self.fast = fast  # its peak is read with getrusage, not from /proc/self/status


class PeakTracker:
    """Stack of open intervals sharing the process-wide VmHWM counter.

    The hot path (every instrumented call) reads RSS from statm and the peak from getrusage's ru_maxrss
    (procfs.rusage_max_rss: ~4 us in training, where a /proc/self/status read took ~31 us). ru_maxrss may
    be max(the peak inherited at exec, VmHWM); the inherited part is the forking parent's RSS, fixed
    after exec, so it can only hide an interval's peak while RSS is below it. `inherited_at_most` bounds
    it from above (ru_maxrss right after a reset), and an interval entered below that bound reads
    VmHWM from status instead: each interval's peak stays exact.
    """

    def __init__(self) -> None:
        self._stack: list[Interval] = []
        self.reset_works = procfs.reset_hwm()
        # without a working reset VmHWM is the peak since start either way: keep the status read
        self.inherited_at_most = procfs.rusage_max_rss() if self.reset_works else float("inf")

    def enter(self) -> Interval:
        rss = procfs.rss_bytes()
        fast = rss >= self.inherited_at_most
        # the enclosing interval's peak so far, before the reset below loses it
        hwm = procfs.rusage_max_rss() if fast else procfs.rss_and_hwm()[1]
        if self._stack:
            top = self._stack[-1]
            top.peak = max(top.peak, hwm)
        procfs.reset_hwm()
        if not fast and self.reset_works:  # a tighter bound, perhaps: ru_maxrss now = max(inherited, RSS)
            self.inherited_at_most = min(self.inherited_at_most, procfs.rusage_max_rss())
        interval = Interval(rss, fast)
        self._stack.append(interval)
        return interval

    def exit(self, interval: Interval) -> int:
        """Close the innermost interval; returns its exact peak RSS in bytes (its end RSS: interval.rss1)."""
        popped = self._stack.pop()
        assert popped is interval, "intervals must close innermost first"
        if interval.fast:
            interval.rss1, hwm = procfs.rss_bytes(), procfs.rusage_max_rss()
        else:
            interval.rss1, hwm = procfs.rss_and_hwm()
        interval.peak = max(interval.peak, hwm, interval.rss1)
        if self._stack:
            parent = self._stack[-1]
            parent.peak = max(parent.peak, interval.peak)
        return interval.peak


def snapshot(with_smaps: bool = False, with_locked: bool = False) -> dict[str, Any]:
    """One point-in-time reading. mallinfo is None (not zeros) when glibc malloc is not in use. `with_locked`: also
    VmLck (bytes mlock holds: DeepSpeed's native pinned backend), a /proc/self/status read (~30-80 us here, where
    statm takes ~2-20): the worker asks for it at phases, census points and, only in a run that locks memory, per
    step; left out where the kernel does not say. Never called at code sites (their reads are PeakTracker's)."""
    out: dict[str, Any] = {"rss": procfs.rss_bytes(), "mallinfo": glibc.mallinfo2()}
    if with_locked:
        locked = procfs.locked_bytes()
        if locked is not None:
            out["locked"] = locked
    if with_smaps:
        out["smaps"] = procfs.smaps_rollup()
    return out
