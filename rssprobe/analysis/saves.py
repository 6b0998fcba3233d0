"""The save phase's figures (worker/saves.py `save` events), per save kind, in bytes per parameter of the whole model.

Per kind, on one rank: the exact peak above the RSS right before the save (`peak`: what the save needs on top of
training), the same peak above the run's pre-model baseline (`peak_rss`: what the rank holds at the save's top),
the RSS it leaves behind (`retained`), and the consolidated 16-bit state dict it built on this rank
(`state_dict`: storage bytes, exact; 0 on a rank whose consolidating call returned nothing). For a scenario's own
saves, `collected`: the part of `retained` Python's garbage collector freed right after the save (a state dict a
reference cycle kept alive: DeepSpeed's ZeRO-3 consolidation does, see worker/saves.py). `final` is the
saves after the last step (a job's final save, where field jobs died). The node's figure sums every rank's.
"""

from __future__ import annotations

from typing import Any

FIGURES = ("peak", "peak_rss", "retained", "state_dict", "collected")
FINAL = "final"  # the saves after the last step, whatever their kind


def _final(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The saves no optimizer step came after (in the rank's event order)."""
    out: list[dict[str, Any]] = []
    for e in events:
        if e["event"] == "step":
            out = []
        elif e["event"] == "save":
            out.append(e)
    return out


def _state_dict(occ: list[dict[str, Any]]) -> int | None:
    """The largest consolidated state dict built by one save of these; None when none consolidated (0 where a
    consolidating call ran and returned nothing on this rank, as ZeRO-3's does on ranks other than 0)."""
    built = [p.get("state_dict_bytes") for e in occ for p in e["parts"].values() if "state_dict_bytes" in p]
    if not built:
        return None
    return max(b or 0 for b in built)


def _figures(occ: list[dict[str, Any]], baseline: float | None, params: int) -> dict[str, Any]:
    peak = max(e["peak"] - e["entry_rss"] for e in occ)
    held = _state_dict(occ)
    return {
        "occurrences": len(occ), "steps": [e["step"] for e in occ],
        "time_s": sum(e["time_s"] for e in occ) / len(occ),
        "peak_bytes": peak, "peak": peak / params,
        "peak_rss": None if baseline is None else max(e["peak"] - baseline for e in occ) / params,
        "retained": sum(e["rss"] - e["entry_rss"] for e in occ) / len(occ) / params,
        "state_dict_bytes": held, "state_dict": None if held is None else held / params,
        "collected": _collected(occ, params),
        "parts": _parts(occ, params),
    }


def _collected(occ: list[dict[str, Any]], params: int) -> float | None:
    """RSS the garbage collector freed right after these saves, mean per save; None when none was collected."""
    got = [e["collected"]["rss"] for e in occ if e.get("collected")]
    return sum(got) / len(got) / params if got else None


def _parts(occ: list[dict[str, Any]], params: int) -> list[dict[str, Any]]:
    """The save entry points nested in these saves: calls, peak above the save's entry RSS, retained."""
    rows: dict[str, dict[str, Any]] = {}
    for e in occ:
        for name, p in e["parts"].items():
            row = rows.setdefault(name, {"part": name, "calls": 0, "peak": 0.0, "retained": 0.0})
            row["calls"] += p["calls"]
            row["peak"] = max(row["peak"], (p["peak"] - e["entry_rss"]) / params)
            row["retained"] += p["retained"] / params / len(occ)
    return list(rows.values())


def summarize(events: list[dict[str, Any]], baseline: float | None, params: int | None) -> dict[str, Any] | None:
    """Save kind (and "final") -> its figures on this rank; None when the run saved nothing."""
    saves = [e for e in events if e["event"] == "save"]
    if not saves or not params:
        return None
    kinds: dict[str, list[dict[str, Any]]] = {}
    for e in saves:
        kinds.setdefault(e["save"], []).append(e)
    out = {kind: _figures(occ, baseline, params) for kind, occ in kinds.items()}
    final = _final(events)
    if final:
        out[FINAL] = {**_figures(final, baseline, params), "kinds": sorted({e["save"] for e in final})}
    return out


def metrics(figures: dict[str, Any] | None) -> dict[str, float]:
    """save.<kind>.<figure> (B/param of the whole model), for the registry."""
    out: dict[str, float] = {}
    for kind, f in (figures or {}).items():
        for name in FIGURES:
            if f[name] is not None:
                out[f"save.{kind}.{name}"] = f[name]
    return out


def node(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """node.save.<kind>.<peak|peak_rss|state_dict>: every rank's figure summed (a rank without it: no sum). The
    ranks' peaks need not coincide, so a summed peak bounds the node's rise from above."""
    if not per_rank:
        return {}
    names = {m for m in per_rank[0] if m.startswith("save.") and m.rsplit(".", 1)[1] in ("peak", "peak_rss",
                                                                                        "state_dict")}
    return {f"node.{m}": sum(r[m] for r in per_rank) for m in sorted(names) if all(m in r for r in per_rank)}
