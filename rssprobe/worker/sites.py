"""Code-site instrumentation: wrap functions named by dotted path and measure each call.

Per call: RSS retained (exit - entry), exact peak above entry RSS (VmHWM reset at entry),
glibc in-use and free-retained deltas. Nested instrumented calls give inclusive figures;
exclusive = inclusive minus the instrumented children, so the parts add up to the whole.
Figures accumulate in a window that the worker drains at phase boundaries (after init,
after every step), which keeps per-call cost to a few /proc reads and no I/O.
From step 2 on, probes are light unless the scenario asks for full ones (probes.steady_sites): no
glibc read (mallinfo2 walks every free chunk: ~40 us a read in training, two a call) and no probe
at all at the sites called once per parameter tensor; init, step 1 and in-run events are full.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import glibc
from .probes import PeakTracker


class SiteError(Exception):
    """A user-given site that cannot be resolved (a typo, not a version difference)."""


@dataclass
class SiteTotals:
    calls: int = 0
    retained: int = 0
    retained_excl: int = 0
    peak_above_entry: int = 0  # the exact peak of a call above the RSS at its entry (step events' "peak" is absolute)
    inuse: int | None = 0
    free: int | None = 0
    mmapped: int | None = 0  # of inuse, the change in glibc's mmapped chunks (mapped, not necessarily resident)
    child_calls: int = 0  # calls of directly nested sites: exclusive = retained minus theirs (RSS reads behind it)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class _Frame:
    child_retained: int = 0
    child_calls: int = 0


def _import_prefix(parts: list[str]) -> tuple[Any, int]:
    """Import the longest importable module prefix of a dotted path."""
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            return importlib.import_module(name), i
        except ModuleNotFoundError as e:
            if e.name is not None and not name.startswith(e.name):
                raise
    raise SiteError(f"no module in {'.'.join(parts)!r} can be imported")


def resolve(path: str) -> tuple[Any, str, Any] | None:
    """(owner, attribute name, raw attribute) for a dotted path; None if absent in this version.

    SiteError when even the top-level package cannot be imported.
    """
    parts = path.split(".")
    owner, i = _import_prefix(parts)
    if i == len(parts):
        raise SiteError(f"{path!r} is a module, not a function")
    for name in parts[i:-1]:
        owner = getattr(owner, name, None)
        if owner is None:
            return None
    attr = parts[-1]
    raw = inspect.getattr_static(owner, attr, None)
    if raw is None:
        return None
    return owner, attr, raw


def replace_function(owner: Any, attr: str, raw: Any, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Put wrap(function) in place of a resolved attribute, keeping staticmethod/classmethod."""
    if isinstance(raw, (staticmethod, classmethod)):
        setattr(owner, attr, type(raw)(wrap(raw.__func__)))
    elif callable(raw):
        setattr(owner, attr, wrap(raw))
    else:
        raise SiteError(f"{getattr(owner, '__name__', owner)}.{attr} is not a function")


def close_names(path: str) -> list[str]:
    """Names near a missing site, for the error message."""
    parts = path.split(".")
    try:
        owner, i = _import_prefix(parts[:-1])
    except SiteError:
        return []
    for name in parts[i:-1]:
        owner = getattr(owner, name, None)
        if owner is None:
            return []
    prefix = ".".join(parts[:-1])
    return [f"{prefix}.{n}" for n in difflib.get_close_matches(parts[-1], dir(owner), n=5)]


@dataclass
class SiteRecorder:
    tracker: PeakTracker
    window: dict[str, SiteTotals] = field(default_factory=dict)
    installed: dict[str, str] = field(default_factory=dict)
    trace: frozenset[str] = frozenset()
    overhead_s: float = 0.0  # time spent in the probes themselves since the last drain
    enabled: bool = True  # False: calls pass straight through (make bench's probes-off steps)
    # light probes (the worker sets it from step 2 on under probes.steady_sites = "light"): sites installed with
    # every_step=False pass through, the others read no glibc counters
    light: bool = False
    calls: list[dict[str, Any]] = field(default_factory=list)
    _frames: list[_Frame] = field(default_factory=list)
    _active: set[str] = field(default_factory=set)
    _thread: int = field(default_factory=threading.get_ident)

    def install(self, path: str, required: bool, every_step: bool = True) -> str:
        """Wrap the site; returns 'ok' or 'absent'. Raises SiteError for a missing required site.
        every_step=False: while probes are light (from step 2 on, by default) its calls pass straight through
        (a site called once per parameter tensor, whose probes would cost more than the rest together)."""
        found = resolve(path)
        if found is None:
            if required:
                near = close_names(path)
                hint = f"; close names: {', '.join(near)}" if near else ""
                raise SiteError(f"site {path!r} does not exist in the installed packages{hint}")
            self.installed[path] = "absent"
            return "absent"
        replace_function(*found, functools.partial(self._wrap, path, every_step))
        self.installed[path] = "ok"
        return "ok"

    def _wrap(self, site: str, every_step: bool, fn: Callable[..., Any]) -> Callable[..., Any]:
        tracker, frames, active = self.tracker, self._frames, self._active
        mallinfo, clock, get_ident = glibc.in_use_and_free, time.perf_counter, threading.get_ident

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            # Recursion into the same site and calls from other threads are not measured:
            # both would double count against one process-wide RSS.
            light = self.light
            if not self.enabled or (light and not every_step) or site in active or get_ident() != self._thread:
                return fn(*args, **kwargs)
            t0 = clock()
            active.add(site)
            mi0 = None if light else mallinfo()
            interval = tracker.enter()
            frame = _Frame()
            frames.append(frame)
            t1 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                t2 = clock()
                frames.pop()
                peak = tracker.exit(interval)
                mi1 = None if light else mallinfo()
                active.discard(site)
                self._record(site, interval.rss0, interval.rss1, peak, mi0, mi1, frame)
                # the probes' own time, reported per step: their overhead measured directly
                self.overhead_s += (t1 - t0) + (clock() - t2)

        wrapper.__rssprobe_site__ = site  # type: ignore[attr-defined]
        return wrapper

    def _record(self, site: str, rss0: int, rss1: int, peak: int, mi0: tuple[int, int, int] | None,
                mi1: tuple[int, int, int] | None, frame: _Frame) -> None:
        totals = self.window.get(site)
        if totals is None:
            totals = self.window[site] = SiteTotals()
            if mi0 is None:
                totals.inuse = totals.free = totals.mmapped = None
        retained = rss1 - rss0
        totals.calls += 1
        totals.retained += retained
        totals.retained_excl += retained - frame.child_retained
        totals.child_calls += frame.child_calls
        totals.peak_above_entry = max(totals.peak_above_entry, peak - rss0)
        inuse = free = None  # not read (light steady probes, or not glibc's malloc): never a 0 as if measured
        if mi0 is not None and mi1 is not None:
            inuse = mi1[0] - mi0[0]
            free = mi1[1] - mi0[1]
            totals.inuse += inuse  # type: ignore[operator]
            totals.free += free  # type: ignore[operator]
            totals.mmapped += mi1[2] - mi0[2]  # type: ignore[operator]
        if self._frames:
            self._frames[-1].child_retained += retained
            self._frames[-1].child_calls += 1
        if site in self.trace:
            self.calls.append({"site": site, "retained": retained, "peak_above_entry": peak - rss0, "inuse": inuse,
                               "free": free, "fordblks_after": None if mi1 is None else mi1[1]})

    def drain(self) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]], float]:
        """Totals since the last drain keyed by site, the per-call log of traced sites, probe time (s)."""
        out = {site: t.as_dict() for site, t in self.window.items()}
        calls, overhead = self.calls, self.overhead_s
        self.window, self.calls, self.overhead_s = {}, [], 0.0
        return out, calls, overhead
