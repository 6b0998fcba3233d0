"""Event stream -> tables (pandas). Missing measurements stay missing (NaN), never zero."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ..store import reader

MALLINFO = ("arena", "hblkhd", "uordblks", "fordblks", "keepcost")
SMAPS = ("pss", "uss", "anonymous", "file_backed", "pss_anon", "pss_file")
PARTS = ("forward", "backward", "optimizer")
CUDA = ("allocated", "allocated_peak", "reserved", "reserved_peak")
PINNED = ("held", "held_peak", "in_use", "in_use_peak")


def _probe_columns(e: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"rss": e.get("rss"), "locked": e.get("locked")}  # locked: VmLck, where it was read
    mi = e.get("mallinfo")
    for k in MALLINFO:
        row[f"glibc_{k}"] = mi[k] if mi else None
    sm = e.get("smaps")
    for k in SMAPS:
        row[f"smaps_{k}"] = sm.get(k) if sm else None
    cuda = e.get("cuda")
    for k in CUDA:
        row[f"cuda_{k}"] = cuda.get(k) if cuda else None
    pinned = (cuda or {}).get("pinned_host") or {}  # caching host allocator, parsed by worker.cudaprobe
    for k in PINNED:
        row[f"pinned_{k}"] = pinned.get(k)
    return row


def steps_frame(events: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per finished step: RSS, exact peak, glibc, smaps, CUDA, sub-phase figures."""
    rows = []
    for e in events:
        if e["event"] != "step":
            continue
        row = {"step": e["step"], "time_s": e["time_s"], "probe_s": e.get("probe_s"),
               "peak": e["peak"], "entry_rss": e["entry_rss"],
               "loss": e.get("loss"), **_probe_columns(e)}
        for part in PARTS:
            p = e.get("parts", {}).get(part, {})
            row[f"{part}_rss"] = p.get("rss")
            row[f"{part}_peak"] = p.get("peak")
        rows.append(row)
    columns = ["step", "time_s", "probe_s", "rss", "locked", "peak", "entry_rss", "loss",
               *[f"glibc_{k}" for k in MALLINFO],
               *[f"smaps_{k}" for k in SMAPS], *[f"cuda_{k}" for k in CUDA], *[f"pinned_{k}" for k in PINNED],
               *[f"{p}_{k}" for p in PARTS for k in ("rss", "peak")]]
    frame = pd.DataFrame(rows, columns=columns).astype("Float64").astype({"step": "Int64"})
    marks: dict[int, list[str]] = {}
    for e in events:  # in-run events that ran after the step (checkpoint, eval, reinit), "" for none
        if e["event"] == "inrun":
            marks.setdefault(e["step"], []).append(e["name"])
    frame["events"] = pd.Series([",".join(marks.get(int(s), [])) for s in frame["step"]], dtype="string")
    return frame



def read_steps(path: Path) -> pd.DataFrame:
    """A run's steps.parquet, read through the damaged-file reader; UserError when it is not a table."""
    return reader.read_table(path).to_pandas()
