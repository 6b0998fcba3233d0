"""Figures of in-run events (checkpoint, eval, reinit) and the growth slope of a long run.

Per event kind: the RSS each occurrence retained (its exit minus entry RSS, read with the same
exact-peak interval as a step), the mean over occurrences with a t interval, and the sites that
ran inside it. The growth slope is fitted to the end-of-step RSS of steps 2..N: step 1 allocates
the optimizer states once, every later step should leave RSS flat. It deliberately includes what
events leave behind (an event after step s shows in step s+1's RSS), because the user's question
is "does it keep growing", whatever makes it grow.
"""

from __future__ import annotations

from typing import Any

from ..config.scenario import EVENTS
from .metrics import short_name
from .stats import Estimate, mean_interval, slope_interval

# what each event calls, for the headline "RSS per <action>"
ACTION = {"checkpoint": "save_checkpoint", "eval": "eval pass", "reinit": "re-initialize"}
GROWTH_FIRST_STEP = 2


def _per_param(e: Estimate, params: int | None) -> dict[str, Any] | None:
    return e.scaled(1 / params).as_dict() if params else None


def _site_rows(occurrences: list[dict[str, Any]], params: int | None) -> list[dict[str, Any]]:
    """Each site that ran inside the event: per occurrence (sum over occurrences / their number)."""
    n = len(occurrences)
    names = sorted({s for e in occurrences for s in e["sites"]})
    rows = []
    for site in names:
        got = [e["sites"][site] for e in occurrences if site in e["sites"]]

        def per(key: str, got: list[dict[str, Any]] = got) -> float:
            return sum(g[key] for g in got) / n
        rows.append({"site": site, "name": short_name(site), "calls": per("calls"),
                     "retained_bytes": per("retained"), "exclusive_bytes": per("retained_excl"),
                     "peak_above_entry_bytes": max(g["peak_above_entry"] for g in got),
                     **{f"{k}_bytes_per_param": (v / params if params else None) for k, v in
                        (("retained", per("retained")), ("exclusive", per("retained_excl")),
                         ("peak_above_entry", max(g["peak_above_entry"] for g in got)))}})
    rows.sort(key=lambda r: -abs(r["retained_bytes"]))
    return rows


def _anon(e: dict[str, Any], key: str = "smaps") -> int | None:
    return (e.get(key) or {}).get("anonymous")


def _anon_retained(occ: list[dict[str, Any]]) -> list[float] | None:
    """Per occurrence, anonymous memory retained (smaps_rollup at entry and exit); None if not read."""
    pairs = [(_anon(e, "entry_smaps"), _anon(e)) for e in occ]
    if any(a is None or b is None for a, b in pairs):
        return None
    return [float(b - a) for a, b in pairs]  # type: ignore[operator]


def events(by_kind: dict[str, list[dict[str, Any]]], params: int | None) -> dict[str, dict[str, Any]]:
    """Event name -> its figures; only the events that occurred."""
    out: dict[str, dict[str, Any]] = {}
    for name in EVENTS:
        occ = [e for e in by_kind.get("inrun", []) if e["name"] == name]
        if not occ:
            continue
        retained = mean_interval([float(e["rss"] - e["entry_rss"]) for e in occ])
        peak = max(e["peak"] - e["entry_rss"] for e in occ)
        anon_values = _anon_retained(occ)
        anon = mean_interval(anon_values) if anon_values else None
        out[name] = {
            "action": ACTION[name], "occurrences": len(occ), "steps": [e["step"] for e in occ],
            "retained_bytes": retained.as_dict(), "retained_bytes_per_param": _per_param(retained, params),
            "anon_retained_bytes_per_param": _per_param(anon, params) if anon else None,
            "peak_above_entry_bytes": peak, "peak_above_entry_bytes_per_param": peak / params if params else None,
            "mean_time_s": sum(e["time_s"] for e in occ) / len(occ),
            "each": [{"step": e["step"], "entry_rss": e["entry_rss"], "rss": e["rss"], "peak": e["peak"]}
                     for e in occ],
            "sites": _site_rows(occ, params),
        }
    return out


def growth(steps: list[dict[str, Any]], params: int | None) -> dict[str, Any] | None:
    """Least-squares slope of end-of-step RSS over steps 2..N (events' leftovers included); None below 3 steps."""
    tail = [e for e in steps if e["step"] >= GROWTH_FIRST_STEP]
    if len(tail) < 2:
        return None
    x = [e["step"] for e in tail]
    fit = slope_interval(x, [e["rss"] for e in tail])
    anon = [_anon(e) for e in tail]
    anon_fit = slope_interval(x, anon) if all(a is not None for a in anon) else None  # type: ignore[arg-type]
    return {"from_step": tail[0]["step"], "to_step": tail[-1]["step"], "bytes_per_step": fit.as_dict(),
            "bytes_per_param_per_step": _per_param(fit, params), "includes_events": True,
            # the same slope of anonymous memory only: file-backed pages evicted and faulted in again
            # under memory pressure from other processes move RSS without the process doing anything
            "anon_bytes_per_param_per_step": _per_param(anon_fit, params) if anon_fit else None}


def metrics(figures: dict[str, dict[str, Any]], slope: dict[str, Any] | None) -> dict[str, float]:
    """Gate-able names: event.<name>.retained / .anon_retained / .peak (B/param per occurrence),
    growth.per_step / .anon_per_step (B/param per step)."""
    out: dict[str, float] = {}
    for name, f in figures.items():
        if f["retained_bytes_per_param"] is not None:
            out[f"event.{name}.retained"] = f["retained_bytes_per_param"]["value"]
            out[f"event.{name}.peak"] = f["peak_above_entry_bytes_per_param"]
        if f["anon_retained_bytes_per_param"] is not None:
            out[f"event.{name}.anon_retained"] = f["anon_retained_bytes_per_param"]["value"]
    if slope and slope["bytes_per_param_per_step"] is not None:
        out["growth.per_step"] = slope["bytes_per_param_per_step"]["value"]
    if slope and slope.get("anon_bytes_per_param_per_step") is not None:
        out["growth.anon_per_step"] = slope["anon_bytes_per_param_per_step"]["value"]
    return out


def step_marks(by_kind: dict[str, list[dict[str, Any]]]) -> dict[int, list[str]]:
    """Step -> the events that ran after it, in order."""
    marks: dict[int, list[str]] = {}
    for e in by_kind.get("inrun", []):
        marks.setdefault(e["step"], []).append(e["name"])
    return marks
