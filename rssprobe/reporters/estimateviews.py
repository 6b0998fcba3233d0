"""An estimate (workflows/estimate.py's dict) -> header lines and tables; nothing computed here but units."""

from __future__ import annotations

from typing import Any

from .output import emit
from .pinviews import fixes_sentence
from .table import NA, Table

UNITS = (("GiB", 2**30), ("MiB", 2**20))

ROWS = (  # (key of the rank/node views, label, where its number comes from)
    ("steady_rss", "steady RSS", "calibration + shapes"),
    ("peak_rss", "peak RSS (step or initialize)", "calibration + shapes"),
    ("initialize_peak", "peak during deepspeed.initialize", "calibration + shapes"),
    ("initialize_model_copy", "  the whole model, before partitioning", "calibration"),
    ("initialize_state", "  buffers after initialize + its transients", "calibration + shapes"),
    ("step_peak", "peak of a training step", "calibration + shapes"),
    ("pinned_slack", "pinned-block slack (CUDA)", "torch's rule"),
    ("fixed", "fixed cost per process, above the baseline", "calibration"),
)


class Unit:
    """GiB for a node of 10 GiB or more, else MiB: every figure of one estimate in one unit."""

    def __init__(self, largest: float) -> None:
        self.name, self.size = UNITS[0] if largest >= 10 * UNITS[0][1] else UNITS[1]

    def __call__(self, value: float | None) -> str:
        return NA if value is None else f"{value / self.size:,.2f}"

    def interval(self, view: dict[str, Any], key: str) -> str:
        low, high = view.get(f"{key}_bytes_low"), view.get(f"{key}_bytes_high")
        if low is None or high is None:
            return "no interval"
        return "exact" if low == high else f"[{self(low)}, {self(high)}]"


def tables(data: dict[str, Any]) -> list[Table]:
    rank, node, t = data["rank"], data["node"], data["target"]
    u = Unit(node["peak_rss_bytes"])
    gib = u
    main = Table(f"Host RAM ({u.name}): one rank, and the node of {t['ranks_per_node']} ranks",
                 ["figure", "rank", "rank 95%", "node", "node 95%", "from"])
    for key, label, source in ROWS:
        if key == "pinned_slack" and t["accelerator"] != "cuda":
            continue
        main.rows.append([label, gib(rank[f"{key}_bytes"]), u.interval(rank, key), gib(node[f"{key}_bytes"]),
                          u.interval(node, key), source])
    main.rows.append(["live ZeRO buffers (below)", gib(rank["live_bytes"]), "exact", gib(node["live_bytes"]), "exact",
                      "shapes"])
    main.rows.append(["pre-model baseline (imports, process group, ops)", gib(rank["baseline_bytes"]), "", "", "",
                      "calibration"])
    main.note = ("RSS is each process's resident bytes as ps shows them, baseline included; the node is its ranks "
                 "summed (they step in lockstep); intervals are 95% t prediction intervals of the fitted terms")
    params = t["params"]
    roles = Table("Live ZeRO buffers of one rank by role (host memory)",
                  ["role", u.name, "B/param of the model", f"node {u.name}"])
    for role, nbytes in rank["roles"].items():
        roles.rows.append([role, gib(nbytes), f"{nbytes / params:.2f}", gib(node["roles"][role])])
    roles.note = (f"each rank's partition of {params:,} params over {t['world_size']} ranks "
                  f"({rank['partition_params']:,} elements), as DeepSpeed pads it")
    ds = data["deepspeed_estimate_bytes"]
    versus = Table(f"Against DeepSpeed's own estimate ({u.name})", ["estimate", "node", "per rank"])
    versus.rows.append([f"DeepSpeed {data['deepspeed_estimator']}", gib(ds),
                        gib(data["deepspeed_estimate_rank_bytes"])])
    versus.rows.append(["rssprobe: steady RSS", gib(node["steady_rss_bytes"]), gib(rank["steady_rss_bytes"])])
    versus.rows.append(["rssprobe: peak RSS", gib(node["peak_rss_bytes"]), gib(rank["peak_rss_bytes"])])
    return [main, roles, versus]


def header_lines(data: dict[str, Any]) -> list[str]:
    t, v = data["target"], data["versions"]
    pins = t["pin_memory"]
    lines = [f"estimate: {t['scenario']}, {t['params']:,} params ({t['layers']} layers, {t['tensors']} tensors, "
             f"{t['param_groups']} param group(s)), ZeRO-{t['stage']}"
             + (" with parameters offloaded" if t["offload_param"] else "") + f", {t['precision']}, "
             f"{t['ranks_per_node']} ranks per node x {t['nodes']} node(s), {t['accelerator']}",
             f"for torch {v['estimate_for']['torch']}, DeepSpeed {v['estimate_for']['deepspeed']}; calibration: "
             f"torch {v['calibration'].get('torch')}, DeepSpeed {v['calibration'].get('deepspeed')}",
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
    lines += [f"NOTE: {n}" for n in data["notes"]]
    lines += [f"WARNING: {c}" for c in data["checks"]]
    lines += [f"WARNING: calibration run left out: {p}" for p in data["calibration"]["left_out"]]
    return lines


def show(data: dict[str, Any], fmt: str) -> None:
    emit(fmt, data, header_lines(data), tables(data), bool(data["checks"]))
