"""The "Pinned host memory" table: DeepSpeed's pin requests by role and site, what CUDA holds for them
(measured on CUDA; on a CPU run predicted, and said so in every cell's column), and the slack. Renders
Summary.pinned() (rssprobe.analysis.pinned), which computes every figure."""

from __future__ import annotations

from ..analysis.resultparts import PinFix, Pinned
from ..analysis.results import RunSummary
from .table import NA, Table, bpp, mib


def _mib(n: int | None) -> str:
    return f"{mib(n)} MiB"


def pin_memory_line(s: RunSummary) -> str | None:
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
    backend = f"; DS_PIN_MEMORY_BACKEND {view['ds_pin_backend']}" if view.get("ds_pin_backend") else ""
    return f"zero.pin_memory: {chosen}; DeepSpeed used {used}; PYTORCH_CUDA_ALLOC_CONF {conf}{backend}"


def fix_line(s: RunSummary) -> str | None:
    """The fixes that would save pinned memory on CUDA for this run, with their predicted saving (analysis/fixes.py
    computed them; rssprobe/data/fixes.toml declares them); None when none would, or nothing was recorded."""
    view = s.get("pinned")
    if not view or not view.get("fixes"):
        return None
    return fixes_sentence(view["fixes"], view["totals"]["slack_predicted_bytes_per_param"])


def fixes_sentence(rows: list[PinFix], slack_bytes_per_param: float | None,
                   at_least: float = 0.01) -> str | None:
    """One sentence naming the fixes that would save pinned memory on CUDA for this run (predicted), the
    recommended one first: "pinned slack 9.99 B/param: DS_PIN_MEMORY_BACKEND=native ... would save ~9.99 B/param
    at full bandwidth (53-55 GB/s, DeepSpeed PR #8283); ...". None where nothing would be saved."""
    saving = [r for r in rows if not r["reference"] and (r["saving_predicted_bytes_per_param"] or 0) >= at_least]
    if not saving or slack_bytes_per_param is None:
        return None
    saving.sort(key=lambda r: (not r["recommended"], not r["full_bandwidth"], r["not_available"] is not None,
                               -(r["saving_predicted_bytes_per_param"] or 0)))
    first, others = saving[0], saving[1:]
    speed = "at full bandwidth" if first["full_bandwidth"] else "at pageable-copy bandwidth"
    na = f"; {first['not_available']}" if first["not_available"] else ""
    text = (f"pinned slack {slack_bytes_per_param:.2f} B/param (predicted for CUDA): {first['short']} would save "
            f"~{first['saving_predicted_bytes_per_param']:.2f} B/param {speed} ({first['h2d']} host-to-device on an "
            f"H200 per DeepSpeed PR #8283{na})")
    also = [f"{r['short']} ~{r['saving_predicted_bytes_per_param']:.2f}"
            + ("" if r["full_bandwidth"] else f" at {r['h2d']}")
            + (f" ({r['not_available']})" if r["not_available"] else "") for r in others]
    return text + (f"; also {', '.join(also)}" if also else "") + "."


def pinned_table(s: RunSummary) -> Table | None:
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


def _note(view: Pinned, cuda: bool) -> str:
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
    if view.get("via_native"):
        parts.append(f"{view['via_native']} requests pinned by DeepSpeed's native backend (posix_memalign + mlock): "
                     "predicted at their own page-rounded size")
    if tot.get("locked_measured") is not None and (view.get("via_native") or tot["locked_measured"]):
        diff = view.get("locked_minus_native_pages")
        parts.append(f"MEASURED here: mlock holds {tot['locked_measured']:,} B above the baseline (VmLck at the end "
                     f"census, {bpp(tot['locked_measured_bytes_per_param'])} B/param)"
                     + (f", the requests' own pages {diff:+,} B" if diff is not None else ""))
    if cuda:
        parts.append("measured per block = the /proc/self/maps mapping holding the tensor (unverified on a device); "
                     "the total is the allocator's own held bytes at the last step")
    parts.append(view["not_predicted"])
    return "; ".join(parts) + "."
