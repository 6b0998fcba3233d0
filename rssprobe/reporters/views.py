"""A run's summary (Summary.as_dict()) and a group's -> header lines and plain tables (reporters/table.py)."""

from __future__ import annotations

from collections.abc import Callable

from ..analysis import metrics
from ..analysis.metrics import short_name
from ..analysis.resultparts import Budget, Site
from ..analysis.results import GroupView, RunSummary
from ..contract.status import Status
from .inrunviews import inrun_tables
from .modelviews import model_lines, tensors_note
from .pinviews import fix_line, pin_memory_line, pinned_table
from .saveviews import saves_table
from .table import NA, Table, bpp, mib

__all__ = ["NA", "Table", "bpp", "group_table", "header_lines", "mib", "run_tables", "zero_line"]


def header_lines(s: RunSummary) -> list[str]:
    v = s.get("versions") or {}
    status = s["status"]
    if status != Status.OK:
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
        *load_lines(s),
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
    problem = (s["pinned"] or {}).get("problem")
    if problem:
        lines.append(f"WARNING: {problem}")
    fixes = fix_line(s)
    if fixes:
        lines.append(fixes)
    if s.get("never_took_effect"):
        lines.append(f"WARNING: requested patch never took effect: {', '.join(s['never_took_effect'])} "
                     "(this run proves nothing about it)")
    return lines


def load_lines(s: RunSummary) -> list[str]:
    """The model's load from its checkpoint, when it was loaded: its peak and what stayed, and what the rank holds."""
    load = s.get("load")
    if not load:
        return []
    f, ck = load["figures"], load.get("checkpoint") or {}
    files = f"{ck['files']} {ck['format']} files, {mib(ck['bytes'])} MiB on disk" if ck else "its checkpoint"
    held = {"whole model": f"the whole model ({bpp(f['whole'])} B/param)",
            "partition": f"its ZeRO-3 partition ({bpp(f['partition'])} B/param of the model)"}.get(
        load["holds"], f"{load['holds']} (whole {bpp(f['whole'])}, partition {bpp(f['partition'])} B/param)")
    return [f"load: {load['how']} of {files}, {load['time_s']:.1f} s, zero.Init "
            f"{'active' if load['zero_init'] else 'not active'}: peak {bpp(f['peak'])} B/param "
            f"({mib(load['peak_bytes'])} MiB) above the baseline; after it {bpp(f['rss'])} B/param (anonymous "
            f"{bpp(f['anon'])}, file-backed {bpp(f['file'])}, shared {bpp(f['shmem'])}); this rank holds {held}"]


def zero_line(s: RunSummary) -> str:
    """'ZeRO stage 3, offload_optimizer cpu, offload_param cpu': what the run's figures are figures of."""
    z = s.get("zero") or {}
    if z.get("stage", NA) is None:
        return "ZeRO stage not known: the script ended before deepspeed.initialize"
    offloads = [f"{k} {z[k]}" for k in ("offload_optimizer", "offload_param") if z.get(k)]
    return ", ".join([f"ZeRO stage {z.get('stage', NA)}", *offloads])


def gathered_table(s: RunSummary) -> Table | None:
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


def phases_table(s: RunSummary) -> Table:
    t = Table("Phases (bytes per parameter above the pre-model baseline)",
              ["phase", "RSS", "peak RSS", "glibc in use", "glibc free-retained"])
    for phase, f in s["phases"].items():
        if f:
            t.rows.append([PHASE_WORDS.get(phase, phase), bpp(f.get("rss")), bpp(f.get("peak")),
                           bpp(f.get("glibc_in_use")), bpp(f.get("glibc_free"))])
    t.note = "steady = mean over steps after the first (peak: max)."
    return t


# two different "end" readings, named apart: the phase table's is the last step's, the budget's the end census
PHASE_WORDS = {"end": "last step"}
CENSUS_WORDS = {"end": "end (after the last step)"}


def budget_table(s: RunSummary) -> Table | None:
    budgets = s.get("budgets") or []
    if not budgets:
        return None
    ats = [CENSUS_WORDS.get(b["at"], b["at"]) for b in budgets]
    t = Table("Live-buffer budget (resident bytes per parameter)", ["role", *ats])
    roles: list[str] = []
    for b in budgets:
        roles += [r for r in b["roles"] if r not in roles]
    for role in roles:
        t.rows.append([role, *[bpp(b["roles"].get(role)) for b in budgets]])
    t.rows.append(["= live tensors", *[bpp(b.get("live_bytes_per_param")) for b in budgets]])
    trained = [r for r in roles if any(r in (b.get("roles_per_trainable_param") or {}) for b in budgets)]
    for role in trained:  # a fine-tune: what the optimizer keeps, per parameter it trains (not in the sum above)
        t.rows.append([f"({role} per trainable parameter)",
                       *[bpp((b.get("roles_per_trainable_param") or {}).get(role)) for b in budgets]])
    parts: list[str] = []
    for b in budgets:
        parts += [p for p in b.get("parts", {}) if p not in parts and p != "live tensors"]
    for part in parts:
        t.rows.append([f"+ {part}", *[bpp((b.get("parts", {}).get(part) or {}).get("bytes_per_param"))
                                      for b in budgets]])
    rows: tuple[tuple[Callable[[Budget], float | None], str], ...] = (
        (lambda b: b.get("not_attributed_bytes_per_param"), "+ not attributed"),
        (lambda b: b.get("rss_above_baseline_bytes_per_param"), "= RSS above baseline")) if parts else (
        (lambda b: b.get("rss_above_baseline_bytes_per_param"), "RSS above baseline"),
        (lambda b: b.get("unexplained_bytes_per_param"), "unexplained (RSS - live)"))
    trainable = (s["model"] or {}).get("trainable_params")
    estimator = "DeepSpeed estimator, a rank's share (absolute)" + (
        ", assuming every parameter trainable" if trainable is not None and trainable < (s["params"] or 0) else "")
    for figure, label in (*rows, (lambda b: b.get("host_pinned_bytes_per_param"), "live tensors pinned (page-locked)"),
                          (lambda b: b.get("malloc_trim_released_bytes_per_param"), "malloc_trim(0) at end released"),
                          (lambda b: b.get("estimator_bytes_per_param"), estimator)):
        values = [figure(b) for b in budgets]
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


def _quiet(r: Site) -> bool:
    figures = (r["retained_bytes_per_param"], r["exclusive_bytes_per_param"], r["peak_bytes_per_param"],
               r["glibc_in_use_bytes_per_param"], r["glibc_free_bytes_per_param"])
    return all(abs(f or 0) < 0.005 for f in figures)


def sites_table(s: RunSummary, all_rows: bool = False) -> Table:
    t = Table("Code sites (bytes per parameter; steady = mean per step)",
              ["site", "phase", "calls", "retained", "exclusive", "peak above entry", "glibc in use", "glibc free"])
    rows = s["sites"] if all_rows else [r for r in s["sites"] if not _quiet(r)]
    for r in rows:
        t.rows.append([r["name"], r["phase"], f"{r['calls']:g}", bpp(r["retained_bytes_per_param"], True),
                       bpp(r["exclusive_bytes_per_param"], True), bpp(r["peak_bytes_per_param"]), _in_use(r),
                       bpp(r["glibc_free_bytes_per_param"], True)])
    notes = []
    if any(abs(r.get("glibc_mmapped_bytes_per_param") or 0) >= 0.005 for r in rows):
        notes.append("glibc in use: heap chunks, then (in brackets) mmapped chunks, which glibc maps whole for a "
                     "large block (mallinfo2's hblkhd) and which are resident only where written: compare "
                     "'retained' (RSS). E.g. setup_buckets maps DeepSpeed's IPG bucket of reduce_bucket_size "
                     "elements at every call; only the part gradients fill is ever touched")
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


def _in_use(r: Site) -> str:
    """A site's glibc in-use change: heap, and mmapped chunks apart (mapped whole, not necessarily resident)."""
    total, mapped = r["glibc_in_use_bytes_per_param"], r.get("glibc_mmapped_bytes_per_param")
    if total is None or mapped is None or abs(mapped) < 0.005:
        return bpp(total, True)
    return f"{bpp(total - mapped, True)} [{bpp(mapped, True)} mapped]"


def interventions_table(s: RunSummary) -> Table | None:
    if not s.get("interventions"):
        return None
    t = Table("Interventions (how often each actually took effect)", ["intervention", "took effect", "count", "detail"])
    for i in s["interventions"]:
        detail = {k: v for k, v in i["effects"].items() if k not in ("log", i["counter"])}
        t.rows.append([i["spec"], "yes" if i["took_effect"] else "NO", f"{i['count']} ({i['counter']})",
                       ", ".join(f"{k}={v}" for k, v in detail.items())])
    return t


# the registry's figures for the table of ranks (Metric.shown), then its roles; ZeRO-3's own when a rank has them
RANK_FIGURES = (*metrics.shown(metrics.PER_RANK), *(f"role.{r}" for r in metrics.RANK_ROLES))
STAGE3_RANK_FIGURES = tuple(f"role.{r}" for r in metrics.STAGE3_RANK_ROLES)


# Ranks a terminal or markdown table lists one by one (CSV and JSON list every rank): 65,536 rows help no one,
# and rendering them took minutes
SHOWN_RANKS = 32


def ranks_table(s: RunSummary, every: bool = False) -> Table | None:
    """Per rank, per parameter of the whole model (and of the rank's partition), with max and mean (over every
    rank); beyond SHOWN_RANKS ranks, unless `every`, the first ones and a row counting the others."""
    ranks = s.get("ranks")
    if not ranks:
        return None
    figures = [*RANK_FIGURES, *[f for f in STAGE3_RANK_FIGURES if any(f in r["metrics"] for r in ranks)]]
    t = Table(f"Per rank ({s['world_size']} ranks; bytes per parameter of the whole model, "
              "[per parameter of the rank's partition] for the roles ZeRO partitions)",
              ["rank", "status", "steps", *figures])
    listed = ranks if every or len(ranks) <= SHOWN_RANKS else ranks[:SHOWN_RANKS]
    for r in listed:
        per_part = r["metrics_per_partition_param"] or {}
        t.rows.append([str(r["rank"]), r["status"] or NA, str(r["steps_done"]),
                       *[bpp(r["metrics"].get(f)) + (f" [{bpp(per_part[f])}]" if f in per_part else "")
                         for f in figures]])
    if len(listed) < len(ranks):
        statuses = sorted({str(r["status"]) for r in ranks[len(listed):]})
        t.rows.append([f"({len(ranks) - len(listed):,} more ranks: {', '.join(statuses)}; --format csv or json "
                       "lists every one)", "", "", *["" for _f in figures]])
    for name, fn in (("max", max), ("mean", lambda v: sum(v) / len(v))):
        row = [name, "", ""]
        for f in figures:
            values = [r["metrics"][f] for r in ranks if f in r["metrics"]]
            row.append(bpp(fn(values)) if values else NA)
        t.rows.append(row)
    return t


def node_table(s: RunSummary) -> Table | None:
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
    if node.get("model_peak_rss_bytes") is not None:  # while the ranks built or loaded the model, all at once
        t.rows.append(["model build/load peak (sampled)", mib(node["model_peak_rss_bytes"]), NA,
                       bpp(node["model_peak_bytes_per_param"]), NA])
    t.note = (f"peak: the largest sum of the ranks' RSS the orchestrator saw, sampled every "
              f"{node['peak_interval_s']} s ({node['peak_samples']} samples; a shorter transient can be missed). "
              "PSS shares shared pages among the ranks (libtorch's code, shared buffers); the RSS sum counts "
              "them once per rank.")
    return t


def native_table(s: RunSummary, top: int = 5) -> Table | None:
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


def group_table(data: GroupView) -> Table:
    """Headline figures and the parts of RSS across the repeats of a group (analysis.summary.across):
    mean, sd, min, max (finished runs only)."""
    summaries = data["runs"]
    ok = sum(s["status"] == Status.OK for s in summaries)
    t = Table(f"Across repeats (bytes per parameter; {ok} of {len(summaries)} runs finished)",
              ["figure", "mean", "sd", "min", "max"])
    for r in data["across"]:
        t.rows.append([r["figure"], bpp(r["mean"]), bpp(r["sd"]), bpp(r["min"]), bpp(r["max"])])
    return t


def run_table_parts(s: RunSummary, all_sites: bool = False) -> tuple[list[Table], list[Table]]:
    """A run's tables, most important first: (the key ones: who owns its RSS, by phase, by code site, its pinned
    memory; the detail behind --all: ZeRO-3's gathered weights, in-run events, interventions, memray)."""
    key = [ranks_table(s, all_sites), node_table(s), budget_table(s), phases_table(s), saves_table(s),
           sites_table(s, all_sites), pinned_table(s)]
    detail = [gathered_table(s), *inrun_tables(s), interventions_table(s), native_table(s)]
    return [t for t in key if t is not None and t.rows], [t for t in detail if t is not None and t.rows]


def run_tables(s: RunSummary, all_sites: bool = False) -> list[Table]:
    """Every table of a run; `all_sites` (CSV, JSON) also lists every site and every rank."""
    key, detail = run_table_parts(s, all_sites)
    return [*key, *detail]
