"""The tables of reports/estimate.md from evidence.sh's output: each row's estimate against its measured runs.

    python reports/estimate/tables.py $OUT              # $OUT of evidence.sh (estimates/*.json, runs/<row>/run-*)
    python reports/estimate/tables.py projections $OUT  # $OUT of projections.sh (GiB per node)

For every row and figure (steady RSS, peak, initialize peak; each rank and, with several ranks, the node): the
measured mean over the repeats, their spread (max - min: glibc's retention noise between identical runs), the
estimate with its 95% interval, the error, and which known-answer case the row is: within 3%, or, where the
noise is wider than 3%, whether the measured runs lie inside the interval and the interval is no wider than the
noise. DeepSpeed's own estimate (model states only) beside it, with its error against the measured steady RSS.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from statistics import fmean

from rssprobe.analysis.summary import Summary
from rssprobe.errors import UserError
from rssprobe.store.rundir import GroupDir, RunDir

MIB = 2**20
WITHIN = 0.03


def measured(run: RunDir) -> tuple[list[dict[str, float]], dict[str, float] | None]:
    """Each rank's steady RSS, peak and initialize peak (bytes), and the node's (sums; its sampled peak)."""
    s0 = Summary(run)
    ranks = []
    for rank in range(s0.manifest.get("world_size", 1)):
        s = s0 if rank == 0 else Summary(run, rank)
        init = s.by_kind["init"][0]["peak"]
        step_peak = max(e["peak"] for e in s.steps)
        ranks.append({"steady_rss": fmean(e["rss"] for e in s.steps[1:]), "peak_rss": max(step_peak, init),
                      "initialize_peak": init})
    node = None
    if len(ranks) > 1:
        node = {k: sum(r[k] for r in ranks) for k in ranks[0]}
        node["peak_rss"] = s0.node()["peak_rss_bytes"]  # the orchestrator's sampled peak of the ranks' sum
    return ranks, node


def _finished(run: RunDir) -> bool:
    """A run of the row that finished ok (one still running, or not started, has no manifest yet: left out)."""
    try:
        return Summary(run).status == "ok"
    except UserError:
        return False


def case(values: list[float], est: dict[str, float | None], key: str) -> tuple[str, float, float]:
    mean = fmean(values)
    value, low, high = est[f"{key}_bytes"], est[f"{key}_bytes_low"], est[f"{key}_bytes_high"]
    err = value / mean - 1
    noise = (max(values) - min(values)) / mean
    if abs(err) <= WITHIN:
        word = "within 3%"
    elif noise > WITHIN and low is not None and high is not None:
        inside = all(low <= v <= high for v in values)
        narrow = (high - low) / mean <= noise
        word = f"noise {100 * noise:.1f}%: " + ("inside" if inside else "OUTSIDE") + ", interval " + \
            ("<= noise" if narrow else "WIDER than noise")
    else:
        word = "MISSED"
    return word, err, noise


def rows(out: Path) -> list[str]:
    lines = ["| row | ranks | figure | measured MiB (n; spread) | estimate MiB [95%] | error | case | "
             "DeepSpeed's estimate MiB | its error |", "|---|---:|---|---:|---:|---:|---|---:|---:|"]
    for path in sorted((out / "estimates").glob("*.json")):
        name, group = path.stem, out / "runs" / path.stem
        if not path.stat().st_size or not GroupDir.is_group(group):
            continue  # not written yet (the estimate is still calibrating) or not measured yet
        est = json.loads(path.read_text())
        got = [measured(r) for r in GroupDir(group).runs() if _finished(r)]
        if not got:
            continue
        k = est["target"]["ranks_per_node"]
        views = [("rank 0", est["rank"], [g[0][0] for g in got], est["deepspeed_estimate_rank_bytes"])]
        if k > 1:
            views.append(("node", est["node"], [g[1] for g in got], est["deepspeed_estimate_bytes"]))
        for who, view, truth, ds in views:
            for key, label in (("steady_rss", "steady RSS"), ("peak_rss", "peak RSS"),
                               ("initialize_peak", "initialize peak")):
                values = [t[key] for t in truth]
                word, err, noise = case(values, view, key)
                interval = "no interval" if view[f"{key}_bytes_low"] is None else \
                    f"[{view[f'{key}_bytes_low'] / MIB:,.0f}, {view[f'{key}_bytes_high'] / MIB:,.0f}]"
                ds_cell = f"{ds / MIB:,.0f} | {100 * (ds / fmean(values) - 1):+.1f}%" if key == "steady_rss" \
                    else " | "
                lines.append(f"| {name} | {who if k > 1 else 1} | {label} | {fmean(values) / MIB:,.1f} "
                             f"({len(values)}; {100 * noise:.2f}%) | {view[f'{key}_bytes'] / MIB:,.1f} {interval} | "
                             f"{100 * err:+.2f}% | {word} | {ds_cell} |")
    return lines


def projections(out: Path) -> list[str]:
    """projections.sh's estimates: per node, torch's default rounding against pin.register."""
    gib = 2**30
    lines = ["| target | params | ZeRO | ranks/node | live buffers | pinned slack | steady RSS | with pin.register | "
             "saved | peak RSS [95%] | initialize peak is | DeepSpeed's estimate |", "|---|---:|---|---:|" + "---:|" * 6
             + "---|---:|"]
    for path in sorted((out / "projections").glob("*--default.json")):
        base = json.loads(path.read_text())
        fixed = json.loads(path.with_name(path.name.replace("--default", "--register")).read_text())
        t, n, f = base["target"], base["node"], fixed["node"]
        zero = f"{t['stage']}" + (" (params offloaded)" if t["offload_param"] else "")
        peak = f"{n['peak_rss_bytes'] / gib:,.0f} [{n['peak_rss_bytes_low'] / gib:,.0f}, " \
               f"{n['peak_rss_bytes_high'] / gib:,.0f}]"
        lines.append(f"| {t['scenario']} | {t['params'] / 1e9:.2f} B | {zero} | {t['ranks_per_node']} | "
                     f"{n['live_bytes'] / gib:,.0f} | {n['pinned_slack_bytes'] / gib:,.1f} | "
                     f"{n['steady_rss_bytes'] / gib:,.0f} | {f['steady_rss_bytes'] / gib:,.0f} | "
                     f"{(n['steady_rss_bytes'] - f['steady_rss_bytes']) / gib:,.1f} | {peak} | "
                     f"{base['rank']['initialize_peak_is']} | {base['deepspeed_estimate_bytes'] / gib:,.0f} |")
    return lines


if __name__ == "__main__":
    print("\n".join(projections(Path(sys.argv[2])) if sys.argv[1] == "projections" else rows(Path(sys.argv[1]))))
