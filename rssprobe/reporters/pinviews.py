"""The "Pinned host memory" table: DeepSpeed's pin requests by role and site, what CUDA holds for them
(measured on CUDA; on a CPU run predicted, and said so in every cell's column), and the slack. Renders
Summary.pinned() (rssprobe.analysis.pinned), which computes every figure."""

from __future__ import annotations

from typing import Any

from .table import NA, Table, bpp, mib


def _mib(n: int | None) -> str:
    return f"{mib(n)} MiB"


def pin_memory_line(s: dict[str, Any]) -> str | None:
    """Which pin_memory the run used: the scenario's, or DeepSpeed's own default; and what DeepSpeed made of it."""
    view = s.get("pinned")
    if not view:
        return None
    told = view["pin_memory"]["scenario"]
    effective = view["pin_memory"]["effective"] or {}
    chosen = ("unset: DeepSpeed's own default" if told is None else "the script's DeepSpeed config"
              if told == "script" else f"{str(told).lower()} (the scenario's)")
    used = ", ".join(f"{k}.pin_memory {str(v).lower()}" for k, v in effective.items() if v is not None) \
        or "(not recorded)"
    conf = view["alloc_conf"] or "unset"
    return f"zero.pin_memory: {chosen}; DeepSpeed used {used}; PYTORCH_CUDA_ALLOC_CONF {conf}"


def pinned_table(s: dict[str, Any]) -> Table | None:
    view = s.get("pinned")
    if not view or not (view["recorded"] or view["totals"]["held_measured"] is not None):
        return None
    cuda = view["on_cuda"]
    if view.get("problem"):  # the rule is not known: the requests only
        t = Table("Pinned host memory (bytes per parameter requested; nothing predicted)",
                  ["role", "DeepSpeed code that asked", "requests", "requested"],
                  [[r["role"], r["where"], str(r["requests"]), bpp(r["requested_bytes_per_param"])]
                   for r in view["rows"]])
        t.note = f"NOT PREDICTED: {view['problem']}."
        return t
    columns = ["role", "DeepSpeed code that asked", "requests", "requested", "held, predicted for CUDA",
               *(["held on CUDA (measured, unverified per block)"] if cuda else []), "slack, predicted"]
    how = "measured on CUDA beside" if cuda else "a CPU run: every held figure is"
    t = Table(f"Pinned host memory (bytes per parameter; {how} predicted by torch {view['torch']}'s caching host "
              "allocator rule)", columns)
    for r in view["rows"]:
        t.rows.append([r["role"], r["where"], str(r["requests"]), bpp(r["requested_bytes_per_param"]),
                       bpp(r["held_predicted_bytes_per_param"]),
                       *([bpp(r["held_measured_bytes_per_param"])] if cuda else []),
                       bpp(r["slack_predicted_bytes_per_param"], True)])
    tot = view["totals"]
    if view["recorded"]:
        t.rows.append(["= alive at the end", "", str(tot["alive"]),
                       bpp(tot["requested_live_bytes_per_param"]), bpp(tot["held_predicted_bytes_per_param"]),
                       *([bpp(tot["held_measured_bytes_per_param"])] if cuda else []),
                       bpp(tot["slack_predicted_bytes_per_param"], True)])
    elif cuda:
        t.rows.append(["= the allocator's held bytes (no requests recorded in this run)", "", NA, NA, NA,
                       bpp(tot["held_measured_bytes_per_param"]), NA])
    t.note = _note(view, cuda)
    return t


def _note(view: dict[str, Any], cuda: bool) -> str:
    rule, tot = view["rule"], view["totals"]
    knobs = [f"round threshold {_mib(rule['round_threshold'])}" if rule["round_threshold"] is not None else None,
             f"max cached {_mib(rule['max_cached'])}" if rule["max_cached"] is not None else None,
             "cudaHostRegister'ed blocks (still rounded; anonymous memory)" if rule["host_register"] else None,
             f"reserve segment {_mib(rule['reserve_segment'])} pinned once" if rule["reserve_segment"] else None]
    parts = [("PREDICTED, not measured (no CUDA in this run): " if not cuda else "")
             + "every request rounded up to a power of two and never split"
             + (" unless above the knobs: " + ", ".join(k for k in knobs if k) if any(knobs) else ""),
             "'held' per row is what was newly pinned for the row's requests (a request served by a cached block adds "
             "nothing); 'alive at the end' is the page-locked total then"]
    if tot["freed"]:
        parts.append(f"{tot['freed']} requests freed during the run (their blocks stay cached)")
    if view["undersized_reuse"]:
        u = view["undersized_reuse"][0]
        parts.append(f"WARNING: this torch would hand a cached block of {u['block']:,} B to a request of "
                     f"{u['request']:,} B ({view['undersized_reuses']} times; a round threshold below the cache "
                     "threshold, fixed in torch 2.14)")
    if view["via_register"]:
        parts.append("pin.register: predicted at the requests' own page-rounded size"
                     + ("" if cuda else " (on the CPU accelerator it did not apply: see Interventions)"))
    if cuda:
        parts.append("measured per block = the /proc/self/maps mapping holding the tensor (unverified on a device); "
                     "the total is the allocator's own held bytes at the last step")
    parts.append(view["not_predicted"])
    return "; ".join(parts) + "."
