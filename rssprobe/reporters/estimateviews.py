"""An estimate (workflows/estimate's dict) -> the answer, then the evidence, most important first, and the
provision line last; nothing computed here but units."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..analysis.results import Estimate
from .pinviews import fixes_sentence
from .table import NA, Table
from .view import View

UNITS = (("GiB", 2**30), ("MiB", 2**20))

ROWS = (  # (key of the rank/node views, label, where its number comes from)
    ("steady_rss", "steady RSS", "calibration + shapes"),
    ("peak_rss", "peak RSS (step, initialize, the load or a save)", "calibration + shapes"),
    ("initialize_peak", "peak during deepspeed.initialize", "calibration + shapes"),
    ("initialize_model_copy", "  the whole model, before partitioning", "calibration"),
    ("initialize_state", "  buffers after initialize + its transients", "calibration + shapes"),
    ("step_peak", "peak of a training step", "calibration + shapes"),
    ("checkpoint_save", "peak of a checkpoint save (DeepSpeed save_checkpoint)", "calibration + shapes"),
    ("model_save", "peak of the final save (as the assumptions say)", "calibration + shapes"),
    ("model_save_state_dict", "  the consolidated 16-bit state dicts", "shapes"),
    ("checkpoint_load", "peak of the checkpoint load (from_pretrained)", "calibration"),
    ("pinned_slack", "pinned-block slack (CUDA)", "torch's rule"),
    ("fixed", "fixed cost per process, above the baseline", "calibration"),
)


class Unit:
    """GiB for a node of 10 GiB or more, else MiB: every figure of one estimate in one unit."""

    def __init__(self, largest: float) -> None:
        self.name, self.size = UNITS[0] if largest >= 10 * UNITS[0][1] else UNITS[1]

    def __call__(self, value: float | None) -> str:
        return NA if value is None else f"{value / self.size:,.2f}"

    def interval(self, view: Mapping[str, Any], key: str) -> str:
        """A ROW's interval in `view` (a rank's or the node's figures, read by the ROW's key)."""
        low, high = view.get(f"{key}_bytes_low"), view.get(f"{key}_bytes_high")
        if low is None or high is None:
            return "wider than the figure: calibrate nearer" if key in view.get("wide", []) else "no interval"
        return "exact" if low == high else f"[{self(low)}, {self(high)}]"


def phase_table(data: Estimate, u: Unit) -> Table:
    ram = data["node_ram"]
    t = Table(f"Does it fit: the node, phase by phase ({u.name})" + (
        f", against {u(ram['bytes'])} {u.name} ({ram['from']})" if ram["bytes"] is not None else ""),
        ["phase", "node estimate", "upper 95%", "fits", "from"])
    for r in data["phases"]:
        if not r["measured"]:
            t.rows.append([r["phase"], NA, NA, r["why"], ""])
            continue
        t.rows.append([r["phase"], u(r["bytes"]), u(r["upper_bytes"]) if r["interval"] else "no interval",
                       r["verdict"] or "no RAM given (--node-ram)", r.get("from", "")])
    lock = data.get("lock")
    if lock:
        t.note = (f"pinned memory per rank {u(lock['pinned_rank_bytes'])} {u.name} against the lock limit "
                  f"(ulimit -l) {u(lock['limit_bytes'])} {u.name}: "
                  + ("fits" if lock["fits"] else "does not fit where it is locked (DS_PIN_MEMORY_BACKEND=native "
                                                 "mlocks it): raise ulimit -l (memlock)"))
    return t


def changes_table(data: Estimate, u: Unit) -> Table | None:
    """The changes, where a phase does not fit or may not (always in --format json)."""
    short = any(r["measured"] and r["verdict"] not in (None, "fits") for r in data["phases"])
    if not data["changes"] or not short:
        return None
    t = Table(f"Changes that lower the node's peak, cheapest first ({u.name}, predicted)",
              ["change", "saves (upper 95%)", "peak then (upper 95%)", "fits", "how"])
    for c in data["changes"]:
        t.rows.append([c["change"], u(c["saving_bytes"]), u(c["peak_upper_bytes"]),
                       NA if c["fits"] is None else "yes" if c["fits"] else "no",
                       f"{c['how']}: {c['command']}" if c.get("command") else c["how"]])
    t.note = "each the same estimate for the changed run; a change of ZeRO stage keeps the calibration's fitted terms"
    return t


def tables(data: Estimate) -> list[Table]:
    rank, node, t = data["rank"], data["node"], data["target"]
    u = Unit(node["peak_rss_bytes"])
    out = [phase_table(data, u)]
    fixes = changes_table(data, u)
    if fixes:
        out.append(fixes)
    main = Table(f"Host RAM ({u.name}): one rank, and the node of {t['ranks_per_node']} ranks",
                 ["figure", "rank", "rank 95%", "node", "node 95%", "from"])
    by_key: tuple[Mapping[str, Any], Mapping[str, Any]] = (rank, node)  # the ROWS read by their key
    for key, label, source in ROWS:
        if f"{key}_bytes" not in rank or (key == "pinned_slack" and t["accelerator"] != "cuda"):
            continue
        main.rows.append([label, u(by_key[0][f"{key}_bytes"]), u.interval(rank, key), u(by_key[1][f"{key}_bytes"]),
                          u.interval(node, key), source])
    main.rows.append(["live ZeRO buffers (below)", u(rank["live_bytes"]), "exact", u(node["live_bytes"]), "exact",
                      "shapes"])
    main.rows.append(["pre-model baseline (imports, process group, ops)", u(rank["baseline_bytes"]), "", "", "",
                      "calibration"])
    cal = data["calibration"]
    main.note = (f"RSS is each process's resident bytes as ps shows them, baseline included; the node is its ranks "
                 f"summed (they step in lockstep); steady is the mean of steps 2..{data['steps']}; intervals are 95% t "
                 f"prediction intervals from the spread of the calibration's {cal['runs']} runs ({cal['repeats']} a "
                 "size), never below the live buffers plus the baseline")
    out.append(main)
    f = data["deepspeed_formula"]
    versus = Table(f"Against DeepSpeed's own estimator ({u.name}, per node)", ["estimate", "node", "formula"])
    for row in data.get("deepspeed_formula_rows") or [{**f, "deepspeed_bytes": data["deepspeed_estimate_bytes"]}]:
        label = f"DeepSpeed {data['deepspeed_estimator']}" + (
            f", zero_init={int(row['zero_init'])}" if len(data.get("deepspeed_formula_rows") or []) > 1 else "") + (
            " (the target's)" if row.get("matches_target") and len(data.get("deepspeed_formula_rows") or []) > 1
            else "")
        versus.rows.append([label, u(row["deepspeed_bytes"]), f"{row['formula']} ({row['where']})"])
    versus.rows.append(["rssprobe: steady RSS", u(node["steady_rss_bytes"]), ""])
    versus.rows.append(["rssprobe: peak RSS", u(node["peak_rss_bytes"]), ""])
    versus.note = f["reconciled"]
    out.append(versus)
    params = t["params"]
    roles = Table("Live ZeRO buffers of one rank by role (host memory)",
                  ["role", u.name, "B/param of the model", f"node {u.name}"])
    for role, nbytes in rank["roles"].items():
        roles.rows.append([role, u(nbytes), f"{nbytes / params:.2f}", u(node["roles"][role])])
    roles.note = (f"each rank's partition of {params:,} params over {t['world_size']} ranks "
                  f"({rank['partition_params']:,} elements), as DeepSpeed pads it")
    out.append(roles)
    return out


def header_lines(data: Estimate) -> list[str]:
    t, v, cal = data["target"], data["versions"], data["calibration"]
    pins = t["pin_memory"]
    lines = [f"estimate: {t['scenario']}, {t['params']:,} params ({t['layers']} layers, {t['tensors']} tensors, "
              f"{t['param_groups']} param group(s)), ZeRO-{t['stage']}"
              + (" with parameters offloaded" if t["offload_param"] else "") + f", {t['precision']}, "
              f"{t['ranks_per_node']} ranks per node x {t['nodes']} node(s), {t['accelerator']}, "
              f"{t['steps']} steps; model from {t['model_from']}",
              f"for torch {v['estimate_for']['torch']}, DeepSpeed {v['estimate_for']['deepspeed']}; calibration: "
              f"torch {v['calibration'].get('torch')}, DeepSpeed {v['calibration'].get('deepspeed')}, "
              f"{cal['runs']} runs ({cal['repeats']} a size, {cal['steps']} steps, {cal['ranks']} rank(s))"
              + (f", {cal['provenance']['gpu']}" if cal["provenance"].get("gpu") else "")
              + (f", {cal['provenance']['date']}" if cal["provenance"].get("date") else ""),
              f"pin_memory: optimizer {pins['offload_optimizer']}, parameters {pins['offload_param']}; pinned via "
              f"{t['pinned_via']}" + (f"; alloc conf {t['torch_alloc_conf']}" if t["torch_alloc_conf"] else "")]
    if data.get("fixes"):  # the pinned-slack fixes and their predicted saving (analysis/fixes.py)
        rank = data["rank"]
        slack = (rank["pinned_held_bytes"] - rank["pinned_requested_bytes"]) / t["params"]
        line = fixes_sentence(data["fixes"], slack)
        lines += [line] if line else []
    for word, terms in (("measured", data["measured_terms"]), ("predicted", data["predicted_terms"])):
        by_source: dict[str, list[str]] = {}
        for term, source in terms.items():
            by_source.setdefault(source, []).append(term.replace("_", " "))
        lines += [f"{word}: {', '.join(names)}: {source}" for source, names in by_source.items()]
    lines += [f"assumed: {a}" for a in data.get("assumptions", [])]
    lines += [f"NOTE: {n}" for n in data["notes"]]
    lines += [f"WARNING: {c}" for c in data["checks"]]
    lines += [f"WARNING: calibration run left out: {p}" for p in data["calibration"]["left_out"]]
    return lines


def show(data: Estimate, fmt: str) -> View:
    return View(data, header_lines(data), tables(data), bool(data["checks"]), answer=data["answer"],
                closing=data["provision"]["line"])
