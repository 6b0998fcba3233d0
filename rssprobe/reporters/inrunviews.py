"""Tables of in-run events (RSS retained per checkpoint / eval / reinit, their sites, each occurrence)
and of the growth slope, from a summary dict (rssprobe.analysis.inrun)."""

from __future__ import annotations

import math
from typing import Any

from ..analysis.resultparts import Interval
from ..analysis.results import RunSummary
from .table import NA, Table, bpp, mib


def _ci(e: Interval | None, fmt: Any) -> str:
    if e is None:
        return NA
    low, high = e["low"], e["high"]
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return f"{fmt(e['value'])} [n/a ({e['n']} points)]"
    return f"{fmt(e['value'])} [{fmt(e['low'])}, {fmt(e['high'])}]"


def _signed_bpp(v: float) -> str:
    return bpp(v, True)


def _signed_mib(v: float) -> str:
    return f"{v / 2**20:+.1f}"


def events_table(s: RunSummary) -> Table | None:
    figures = s.get("events") or {}
    if not figures:
        return None
    t = Table("In-run events: RSS retained per event (mean over occurrences, 95% t interval)",
              ["RSS per", "occurrences", "after steps", "B/param", "MiB", "anonymous B/param",
               "peak above entry B/param"])
    for f in figures.values():
        t.rows.append([f["action"], str(f["occurrences"]), ",".join(map(str, f["steps"])),
                       _ci(f["retained_bytes_per_param"], _signed_bpp), _ci(f["retained_bytes"], _signed_mib),
                       _ci(f.get("anon_retained_bytes_per_param"), _signed_bpp),
                       bpp(f["peak_above_entry_bytes_per_param"])])
    t.note = ("retained = RSS after the event minus RSS before it; anonymous = the same of anonymous memory "
              "(smaps_rollup), blind to file-backed pages the kernel evicts or faults in; an event runs after "
              "its step, so what it leaves behind also shows in the next step's RSS and in the growth slope.")
    return t


def event_sites_table(s: RunSummary) -> Table | None:
    figures = s.get("events") or {}
    t = Table("Code sites inside in-run events (bytes per parameter, per occurrence)",
              ["event", "site", "calls", "retained", "exclusive", "peak above entry"])
    for f in figures.values():
        for r in f["sites"]:
            t.rows.append([f["action"], r["name"], f"{r['calls']:g}", bpp(r["retained_bytes_per_param"], True),
                           bpp(r["exclusive_bytes_per_param"], True), bpp(r["peak_above_entry_bytes_per_param"])])
    return t if t.rows else None


def occurrences_table(s: RunSummary) -> Table | None:
    figures = s.get("events") or {}
    rows = sorted((o["step"], list(figures).index(name), f["action"], o)
                  for name, f in figures.items() for o in f["each"])
    if not rows:
        return None
    t = Table("Steps with in-run events (MiB)", ["after step", "event", "RSS before", "RSS after", "retained",
                                                 "peak above entry"])
    for step, _order, action, o in rows:
        t.rows.append([str(step), action, mib(o["entry_rss"]), mib(o["rss"]), _signed_mib(o["rss"] - o["entry_rss"]),
                       mib(o["peak"] - o["entry_rss"])])
    return t


def growth_table(s: RunSummary) -> Table | None:
    g = s.get("growth")
    if not g:
        return None
    t = Table(f"Growth: RSS slope over steps {g['from_step']}..{g['to_step']} (least squares, 95% t interval)",
              ["figure", "per step"])
    t.rows.append(["B/param", _ci(g["bytes_per_param_per_step"], _signed_bpp)])
    t.rows.append(["MiB", _ci(g["bytes_per_step"], _signed_mib)])
    t.rows.append(["anonymous B/param", _ci(g.get("anon_bytes_per_param_per_step"), _signed_bpp)])
    t.note = ("end-of-step RSS from step 2 on (step 1 allocates the optimizer states once); includes what in-run "
              "events leave behind. Metrics growth.per_step, growth.anon_per_step.")
    return t


def inrun_tables(s: RunSummary) -> list[Table | None]:
    return [events_table(s), event_sites_table(s), occurrences_table(s), growth_table(s)]
