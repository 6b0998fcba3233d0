"""A run's summary (Summary.as_dict()) and a group's -> header lines and plain tables (reporters/table.py)."""

from __future__ import annotations

from typing import Any

from ..analysis.metrics import short_name
from .inrunviews import inrun_tables
from .modelviews import model_lines, tensors_note
from .pinviews import fix_line, pin_memory_line, pinned_table
from .table import NA, Table, bpp, mib

__all__ = ["NA", "Table", "bpp", "group_table", "header_lines", "mib", "run_tables", "zero_line"]


def header_lines(s: dict[str, Any]) -> list[str]:
    v = s.get("versions") or {}
    status = s["status"]
    if status != "ok":
        status = f"{status.upper()}: {s.get('error') or ''}".rstrip(": ")
    elif s.get("exit_after_end"):  # e.g. DeepSpeed 0.15.4's rank 0 aborts at exit after its last step
        status = f"ok ({s['exit_after_end']})"
    if not s.get("label") and not s.get("scenario"):  # a member that cannot be read: its status and why only
        return [f"run {s['run']}  status {status}"]
    glibc = s.get("glibc_malloc") or {}
    ranks = f"  rank {s['rank']} of {s['world_size']} (show --rank N for another)" if s.get("world_size", 1) > 1 else ""
    lines = [
        f"run {s['run']}  [{s['label']}]  scenario {s['scenario']}  status {status}{ranks}",
        f"params {s['params'] or NA:,}  steps {s['steps_done']}/{s['steps_requested']}  "
        f"baseline RSS {mib(s.get('baseline_rss_bytes'))} MiB (pre-model; every figure is above it, per parameter)"
        if s.get("params") else f"steps {s['steps_done']}/{s['steps_requested']}",
        *model_lines(s),
        zero_line(s),
        f"torch {v.get('torch', NA)}  deepspeed {v.get('deepspeed', NA)}  python {v.get('python', NA)}  "
        f"glibc {v.get('glibc', NA)}  accelerator {s.get('accelerator') or NA}",
        f"allocator {s.get('allocator')}"
        + (f" {s['malloc_env']}" if s.get("malloc_env") else "")
        + ("" if glibc.get("available", True) else f"  (mallinfo2 not available: {glibc.get('reason')})"),
        f"CUDA: {s.get('cuda')}",
    ]
    pin_line = pin_memory_line(s)
    if pin_line:
        lines.append(pin_line)
    fixes = fix_line(s)
    if fixes:
        lines.append(fixes)
    if s.get("never_took_effect"):
        lines.append(f"WARNING: requested patch never took effect: {', '.join(s['never_took_effect'])} "
                     "(this run proves nothing about it)")
    return lines


def zero_line(s: dict[str, Any]) -> str:
    """'ZeRO stage 3, offload_optimizer cpu, offload_param cpu': what the run's figures are figures of."""
    z = s.get("zero") or {}
    offloads = [f"{k} {z[k]}" for k in ("offload_optimizer", "offload_param") if z.get(k)]
    return ", ".join([f"ZeRO stage {z.get('stage', NA)}", *offloads])


def gathered_table(s: dict[str, Any]) -> Table | None:
    """ZeRO-3: how many parameters were gathered and not released, after backward and after the step."""
    points = s.get("zero3_gathered")
    if not points:
        return None
    t = Table("ZeRO-3 gathered parameters (not released; DeepSpeed's ds_status, a count: deterministic)",
              ["point", "tensors", "of tensors", "params", "fraction of model", "persistent params"])
    for point, c in points.items():
        t.rows.append([point.replace(".", ", ").replace("_", " "), str(c["tensors"]), str(c["of_tensors"]),
                       f"{c['params']:,}", NA if c["fraction"] is None else f"{c['fraction']:.4f}",
                       f"{c['persistent_params']:,}"])
    t.note = ("persistent = below stage3_param_persistence_threshold: kept gathered by design. At one rank on the "
              "CPU accelerator a gathered parameter is a view of its own partition (no extra bytes).")
    return t


def phases_table(s: dict[str, Any]) -> Table:
    t = Table("Phases (bytes per parameter above the pre-model baseline)",
              ["phase", "RSS", "peak RSS", "glibc in use", "glibc free-retained"])
    for phase, f in s["phases"].items():
        if f:
            t.rows.append([phase, bpp(f.get("rss")), bpp(f.get("peak")), bpp(f.get("glibc_in_use")),
                           bpp(f.get("glibc_free"))])
    t.note = "steady = mean over steps after the first (peak: max)."
    return t


def budget_table(s: dict[str, Any]) -> Table | None:
    budgets = s.get("budgets") or []
    if not budgets:
        return None
    ats = [b["at"] for b in budgets]
    t = Table("Live-buffer budget (resident bytes per parameter)", ["role", *ats])
    roles: list[str] = []
    for b in budgets:
        roles += [r for r in b["roles"] if r not in roles]
    for role in roles:
        t.rows.append([role, *[bpp(b["roles"].get(role)) for b in budgets]])
    t.rows.append(["= live tensors", *[bpp(b.get("live_bytes_per_param")) for b in budgets]])
    parts: list[str] = []
    for b in budgets:
        parts += [p for p in b.get("parts", {}) if p not in parts and p != "live tensors"]
    for part in parts:
        t.rows.append([f"+ {part}", *[bpp((b.get("parts", {}).get(part) or {}).get("bytes_per_param"))
                                      for b in budgets]])
    rows = (("not_attributed", "+ not attributed"), ("rss_above_baseline", "= RSS above baseline")) if parts else \
        (("rss_above_baseline", "RSS above baseline"), ("unexplained", "unexplained (RSS - live)"))
    for key, label in (*rows, ("host_pinned", "live tensors pinned (page-locked)"),
                       ("malloc_trim_released", "malloc_trim(0) at end released"),
                       ("estimator", "DeepSpeed estimator, a rank's share (absolute)")):
        values = [b.get(f"{key}_bytes_per_param") for b in budgets]
        if any(v is not None for v in values):
            t.rows.append([label, *[bpp(v) for v in values]])
    device_roles = [r for b in budgets for r in (b.get("device") or {}).get("roles", {})]
    for role in dict.fromkeys(device_roles):  # device tensors: beside RSS, never in it
        t.rows.append([f"device (not RSS): {role}", *[bpp(((b.get("device") or {}).get("roles") or {}).get(role))
                                                     for b in budgets]])
    t.note = ("Roles from DeepSpeed's own attributes; resident pages read from /proc/self/pagemap. "
              + ("Other parts name the rest of RSS by memory mapping (/proc/self/smaps; glibc heaps walked "
                 "chunk by chunk, free = resident pages of free chunks); 'not attributed' is what the RSS "
                 "counter says beyond their sum." if parts else "No memory-map partition in this run."))
    notes = sorted({n for b in budgets for n in b.get("memmap_notes", [])})
    if notes:
        t.note += " Not told apart: " + "; ".join(notes) + "."
    imported = budgets[-1].get("imported_since_baseline")
    if imported and imported.get("total"):
        packages = ", ".join(f"{name} {n:,}" for name, n in imported.items() if name != "total")
        t.note += (f" Imported after the baseline (by {budgets[-1]['at']}): {imported['total']:,} modules "
                   f"({packages}); their code objects and data are a fixed cost in python objects and glibc "
                   "in use, not a per-parameter one (rssprobe scale tells the two apart).")
    return t


def _quiet(r: dict[str, Any]) -> bool:
    keys = ("retained", "exclusive", "peak", "glibc_in_use", "glibc_free")
    return all(abs(r[f"{k}_bytes_per_param"] or 0) < 0.005 for k in keys)


def sites_table(s: dict[str, Any], all_rows: bool = False) -> Table:
    t = Table("Code sites (bytes per parameter; steady = mean per step)",
              ["site", "phase", "calls", "retained", "exclusive", "peak above entry", "glibc in use", "glibc free"])
    rows = s["sites"] if all_rows else [r for r in s["sites"] if not _quiet(r)]
    for r in rows:
        t.rows.append([r["name"], r["phase"], f"{r['calls']:g}", bpp(r["retained_bytes_per_param"], True),
                       bpp(r["exclusive_bytes_per_param"], True), bpp(r["peak_bytes_per_param"]),
                       bpp(r["glibc_in_use_bytes_per_param"], True), bpp(r["glibc_free_bytes_per_param"], True)])
    notes = []
    if len(rows) < len(s["sites"]):
        hidden = len(s["sites"]) - len(rows)
        notes.append(f"{hidden} rows with every figure below 0.005 hidden (--all-sites shows them)")
    absent = [k for k, v in (s.get("site_status") or {}).items() if v == "absent"]
    if absent:
        notes.append("absent in this version: " + ", ".join(absent))
    if s.get("sites_steady") == "light":
        first_only = ", ".join(short_name(p) for p in s.get("sites_first_step_only") or [])
        notes.append("steady rows read RSS and the peak only, glibc n/a"
                     + (f"; measured on the first step only, being called once per parameter tensor"
                        f"{tensors_note(s)}: {first_only} "
                        "(later steps: inside reduce_ipg_grads and the step's backward)" if first_only else "")
                     + " (probes.steady_sites = \"light\", to keep the probes cheap; \"full\" reads everything)")
    t.note = "; ".join(notes)
    return t


def interventions_table(s: dict[str, Any]) -> Table | None:
    if not s.get("interventions"):
        return None
    t = Table("Interventions (how often each actually took effect)", ["intervention", "took effect", "count", "detail"])
    for i in s["interventions"]:
        detail = {k: v for k, v in i["effects"].items() if k not in ("log", i["counter"])}
        t.rows.append([i["spec"], "yes" if i["took_effect"] else "NO", f"{i['count']} ({i['counter']})",
                       ", ".join(f"{k}={v}" for k, v in detail.items())])
    return t


RANK_FIGURES = ("init.rss", "steady.rss", "peak", "budget.live", "role.fp32_master", "role.fp32_grad",
                "role.adam_exp_avg", "role.adam_exp_avg_sq", "role.bit16_params")
# ZeRO-3's own roles, shown when a rank has them
STAGE3_RANK_FIGURES = ("role.bit16_partitions", "role.grad_partitions", "role.gathered_params")


def ranks_table(s: dict[str, Any]) -> Table | None:
    """Per rank, per parameter of the whole model (and of the rank's partition), with max and mean."""
    ranks = s.get("ranks")
    if not ranks:
        return None
    figures = [*RANK_FIGURES, *[f for f in STAGE3_RANK_FIGURES if any(f in r["metrics"] for r in ranks)]]
    t = Table(f"Per rank ({s['world_size']} ranks; bytes per parameter of the whole model, "
              "[per parameter of the rank's partition] for the roles ZeRO partitions)",
              ["rank", "status", "steps", *figures])
    for r in ranks:
        per_part = r["metrics_per_partition_param"] or {}
        t.rows.append([str(r["rank"]), r["status"] or NA, str(r["steps_done"]),
                       *[bpp(r["metrics"].get(f)) + (f" [{bpp(per_part[f])}]" if f in per_part else "")
                         for f in figures]])
    for name, fn in (("max", max), ("mean", lambda v: sum(v) / len(v))):
        row = [name, "", ""]
        for f in figures:
            values = [r["metrics"][f] for r in ranks if f in r["metrics"]]
            row.append(bpp(fn(values)) if values else NA)
        t.rows.append(row)
    return t


def node_table(s: dict[str, Any]) -> Table | None:
    """A multi-rank run's node: RSS and PSS summed over the ranks, and the sampled peak of the sum."""
    node = s.get("node")
    if not node:
        return None
    t = Table(f"The node ({node['ranks']} ranks summed; absolute, MiB and bytes per parameter of the model)",
              ["point", "RSS MiB", "PSS MiB", "RSS B/param", "PSS B/param"])
    for point, f in node["points"].items():
        t.rows.append([point, mib(f["rss_bytes"]), mib(f["pss_bytes"]), bpp(f["rss_bytes_per_param"]),
                       bpp(f["pss_bytes_per_param"])])
    t.rows.append(["peak (sampled)", mib(node["peak_rss_bytes"]), NA, bpp(node["peak_bytes_per_param"]), NA])
    t.note = (f"peak: the largest sum of the ranks' RSS the orchestrator saw, sampled every "
              f"{node['peak_interval_s']} s ({node['peak_samples']} samples; a shorter transient can be missed). "
              "PSS shares shared pages among the ranks (libtorch's code, shared buffers); the RSS sum counts "
              "them once per rank.")
    return t


def native_table(s: dict[str, Any], top: int = 5) -> Table | None:
    native = s.get("native")
    if not native:
        return None
    t = Table("Native allocations by site (memray; bytes per parameter)", ["phase", "kind", "where", "B/param",
                                                                           "allocations"])
    for phase, kinds in native.items():
        for kind, rows in kinds.items():
            for row in rows[:top]:
                t.rows.append([phase, kind, row["where"], bpp(row["bytes_per_param"]), f"{row['allocations']:,}"])
    t.note = ("leaked = allocated in the phase and still alive at its end; high_watermark = alive at the phase's "
              "peak. steady is ONE capture over all steps after the first (cumulative, not a mean per step as "
              "in the site table). memray's own buffers inflate this run's RSS figures: compare runs made "
              "without --memray.")
    return t


def group_table(data: dict[str, Any]) -> Table:
    """Headline figures and the parts of RSS across the repeats of a group (analysis.summary.across):
    mean, sd, min, max (finished runs only)."""
    summaries = data["runs"]
    ok = sum(s["status"] == "ok" for s in summaries)
    t = Table(f"Across repeats (bytes per parameter; {ok} of {len(summaries)} runs finished)",
              ["figure", "mean", "sd", "min", "max"])
    for r in data["across"]:
        t.rows.append([r["figure"], bpp(r["mean"]), bpp(r["sd"]), bpp(r["min"]), bpp(r["max"])])
    return t


def run_tables(s: dict[str, Any], all_sites: bool = False) -> list[Table]:
    tables = [ranks_table(s), node_table(s), phases_table(s), budget_table(s), gathered_table(s), pinned_table(s),
              sites_table(s, all_sites), *inrun_tables(s), interventions_table(s), native_table(s)]
    return [t for t in tables if t is not None and t.rows]
