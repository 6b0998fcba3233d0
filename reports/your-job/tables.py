"""reports/your-job.md from reports/your-job/evidence.sh's runs (issue 31).

    python reports/your-job/tables.py $OUT > reports/your-job.md

Every figure is read from the runs (Summary, the events); nothing is typed in. A row whose run is missing or did
not finish says so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rssprobe.analysis.summary import Summary
from rssprobe.errors import UserError
from rssprobe.store.rundir import RunDir

MIB = 2**20


def events(run: Path, rank: int = 0) -> list[dict[str, Any]]:
    name = "events.jsonl" if rank == 0 else f"events.rank{rank}.jsonl"
    path = run / name
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def census(run: Path, at: str, rank: int = 0) -> dict[str, Any] | None:
    return next((e for e in events(run, rank) if e["event"] == "census" and e["at"] == at), None)


def summary(run: Path, rank: int = 0) -> Summary | None:
    try:
        return Summary(RunDir(run), rank) if (run / "manifest.json").exists() else None
    except UserError:
        return None


def fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def section_script(runs: Path) -> list[str]:
    out = ["## 1. Script runs as exact as scenarios", ""]
    a, b = runs / "z3-script", runs / "z3-scenario"
    ca, cb = census(a, "after_init"), census(b, "after_init") or {"roles": {}}
    sa = summary(a)
    if ca and sa:
        params = sa.params
        out += [f"A Llama ({params / 1e6:.2f} M params) at ZeRO-3, optimizer and parameters offloaded, as a script "
                "(`examples/train_hf.py` with `examples/ds_config_hf_zero3.json`) and, where run, as the scenario "
                "`llama-small-zero3` of the same shape. After-init census, allocated bytes per parameter (`buckets`: "
                "allocated, mostly never touched; before the fix the script read every byte as `other`: 11.69 B/param "
                "on run_clm, 12.00 on train_hf):", "", "| role | script | scenario |", "|---|---:|---:|"]
        for role in sorted(set(ca["roles"]) | set(cb["roles"])):
            va = ca["roles"].get(role, {}).get("allocated")
            vb = cb["roles"].get(role, {}).get("allocated")
            out.append(f"| {role} | {fmt(va / params if va is not None else None)} | "
                       f"{fmt(vb / params if vb is not None else None)} |")
        out.append("")
    pair = [summary(runs / f"aa-{i}") for i in (1, 2)]
    if all(pair):
        m = [s.metrics() for s in pair if s]
        out += ["A/A, two identical script runs (glibc as users have it, final trim), 1 vs 1:", "",
                "| figure | run 1 | run 2 | difference |", "|---|---:|---:|---:|"]
        for key in ("budget.live", "budget.rss_after_trim_above_baseline", "role.other"):
            x, y = m[0].get(key), m[1].get(key)
            out.append(f"| {key} | {fmt(x)} | {fmt(y)} | {fmt(y - x if x is not None and y is not None else None)} |")
        pre = [census(runs / f"aa-{i}", "pre_model") for i in (1, 2)]
        out += ["", f"Tensors alive at the baseline: {', '.join(str(p['allocated']) for p in pre if p)} bytes "
                "(the first parameter, a 4 MiB embedding, was in it before the fix).", ""]
    t = runs / "trainer-ga2"
    steps = [e for e in events(t) if e["event"] == "step"]
    if steps:
        engine = next((e for e in events(t) if e["event"] == "script_engine"), {})
        out += [f"HF Trainer (accelerate), gradient accumulation 2: micro-steps per optimizer step "
                f"{[e['micro_steps'] for e in steps]} (before the fix: 1 each); the progress total read from the "
                f"Trainer: {engine.get('steps_total')}.", ""]
    return out


def section_launchers(runs: Path) -> list[str]:
    out = ["## 2. Each launcher", "", "`examples/train_linear.py` (4 x Linear(512), ZeRO-2, 2 ranks) started by each "
           "launcher under `rssprobe run -- ...`; end-of-run census per rank, allocated bytes:", "",
           "| launcher | rank | status | fp32_master | adam_exp_avg | bit16_params | h2d_staging |",
           "|---|---|---|---:|---:|---:|---:|"]
    for name in ("torchrun", "deepspeed", "accelerate", "python"):
        run = runs / f"launch-{name}"
        s = summary(run)
        if s is None:
            out.append(f"| {name} | | not run | | | | |")
            continue
        for rank in range(s.manifest.world_size):
            c = census(run, "end", rank) or {"roles": {}}
            vals = [c["roles"].get(r, {}).get("allocated") for r in ("fp32_master", "adam_exp_avg", "bit16_params",
                                                                      "h2d_staging")]
            out.append(f"| {name} | {rank} | {s.status} | " + " | ".join(str(v) for v in vals) + " |")
    return [*out, ""]


def section_load(runs: Path) -> list[str]:
    out = ["## 3. Loading a checkpoint", "", "`llama-small-zero3` (25.2 M params, fp32 on disk: 100.8 MB), ZeRO-3, "
           "loaded with `from_pretrained`; the Hugging Face DeepSpeed config made before it (zero.Init during the "
           "load) or after it (FAI-RL #68's order). Per rank: what it holds after the load, its load peak and "
           "anonymous / file-backed RSS above the baseline (MiB); the node: its peak while the ranks load, "
           "sampled every 20 ms (MiB).", "",
           "| loaded as | ranks | HF config | rank 0 holds | rank 0 peak | rank 0 anon | rank 0 file | "
           "node load peak | node load peak / ranks |", "|---|---:|---|---|---:|---:|---:|---:|---:|"]
    for prefix, dtype in (("load-z3", "fp32 (auto)"), ("load-z3bf", "bf16")):
        out += _load_rows(runs, prefix, dtype)
    return out + _load_small(runs)


def _load_rows(runs: Path, prefix: str, dtype: str) -> list[str]:
    out = []
    for ranks in (1, 2, 4):
        for order in ("before", "after"):
            run = runs / f"{prefix}-{ranks}r-{order}"
            s = summary(run)
            load = s.load() if s else None
            if not load:
                out.append(f"| {dtype} | {ranks} | {order} | not run | | | | | |")
                continue
            node = (s.node() or {}) if ranks > 1 else {}
            peak = node.get("model_peak_rss_bytes") if ranks > 1 else None
            f = load["figures"]
            anon = f["anon"] * s.params / MIB if f["anon"] is not None else None
            file = f["file"] * s.params / MIB if f["file"] is not None else None
            held = fmt(f["whole"] + f["partition"])
            out.append(f"| {dtype} | {ranks} | {order} | {load['holds']} ({held} B/param) | "
                       f"{fmt(load['peak_bytes'] / MIB, 1)} | {fmt(anon, 1)} | {fmt(file, 1)} | "
                       f"{fmt(peak / MIB if peak else None, 1)} | {fmt(peak / MIB / ranks if peak else None, 1)} |")
    return out


def _load_small(runs: Path) -> list[str]:
    out = ["", "Loaded against built, and safetensors against `.bin` (the small Llama, 3.57 M params, ZeRO-2, 1 rank, "
            "2 steps; B/param "
            "above the baseline):", "", "| run | load peak | after load: anon | file | budget.live at end | "
            "RSS after trim |", "|---|---:|---:|---:|---:|---:|"]
    for name in ("load-built", "load-safetensors", "load-bin", "load-bf16-on-disk", "load-safetensors-small"):
        s = summary(runs / name)
        if s is None:
            out.append(f"| {name} | not run | | | | |")
            continue
        m, load = s.metrics(), s.load()
        f = load["figures"] if load else {}
        out.append(f"| {name} | {fmt(f.get('peak'))} | {fmt(f.get('anon'))} | {fmt(f.get('file'))} | "
                   f"{fmt(m.get('budget.live'))} | {fmt(m.get('budget.rss_after_trim_above_baseline'))} |")
    return [*out, ""]


def section_scale(root: Path) -> list[str]:
    path = root / "scale-linear.json"
    if not path.exists():
        return ["## A script's fixed and per-parameter cost", "", "not run", ""]
    data = json.loads(path.read_text())
    rows = {r["figure"]: r for r in data.get("fit", [])}
    out = ["## A script's fixed and per-parameter cost", "",
           "`rssprobe scale --script examples/train_linear.py --size-arg layers=2,4,8` (width 512, 2 steps, fixed "
           f"mmap threshold): {len(data.get('sizes_run', []))} sizes, parameter counts measured "
           f"({', '.join(str(g['params']) for g in data.get('sizes_run', []))}); bytes = fixed + slope x params:", "",
           "| figure | slope B/param | fixed MiB |", "|---|---:|---:|"]
    for figure in ("budget.live", "budget.rss_after_trim_above_baseline", "budget.rss_above_baseline", "peak"):
        r = rows.get(figure)
        if r:
            out.append(f"| {figure} | {fmt(r['slope_bytes_per_param'])} | {fmt(r['fixed_bytes'] / MIB)} |")
    return [*out, ""]


def section_moe(root: Path) -> list[str]:
    runs = root / "runs"
    out = ["## transformers #47514, small", "",
           "The smallest Qwen3-MoE (`reports/your-job/qwen3-moe-tiny.toml`: 8 experts, 2 active, 2 layers), ZeRO-3, "
           "2 ranks, loaded from its checkpoint (fp32 on disk, bf16 in memory), one run each (no repeats: a signal, "
           "not a verdict; node figures are absolute and include each release's import cost):", "",
           "| transformers | HF config | rank 0 holds | rank 0 load peak B/param (MiB) | rank 0 initialize peak "
           "B/param | node load peak MiB | node peak MiB |", "|---|---|---|---:|---:|---:|---:|"]
    cells = [(run, "after" if "-after" in run.name else "before") for run in sorted(runs.glob("moe-z3-2r-*"))
             if run.is_dir()]
    matrix = root / "moe-releases"  # the matrix over releases, when evidence.sh ran it
    if (matrix / "matrix.json").exists():
        for group in sorted(p for p in matrix.iterdir() if p.is_dir()):
            cells += [(member, "before") for member in sorted(group.glob("run-*"))]
    for run, order in cells:
        s = summary(run) if run is not None else None
        load = s.load() if s else None
        if not s or not load:
            out.append(f"| {run.name if run else '?'} | {order} | not run or failed | | | | |")
            continue
        node = s.node() or {}
        version = (s.manifest.versions or {}).get("transformers") or "?"
        mp, peak = node.get("model_peak_rss_bytes"), node.get("peak_rss_bytes")
        init = s.phases()["init"].get("peak")
        out.append(f"| {version} | {order} | {load['holds']} | {fmt(load['figures']['peak'])} "
                   f"({fmt(load['peak_bytes'] / MIB, 1)}) | {fmt(init)} | {fmt(mp / MIB if mp else None, 1)} | "
                   f"{fmt(peak / MIB if peak else None, 1)} |")
    return [*out, ""]


COMMANDS = ["## How the runs were made", "",
            "Every row's command is in `reports/your-job/evidence.sh` (`OUT=DIR bash reports/your-job/evidence.sh`, "
            "then this script); the runs behind this page are `reports/your-job/runs.tar.gz`. In this session some "
            "were made by hand with the same arguments before the script existed, and differ from it where said: "
            "`z3-script` is `examples/train_hf.py` at its default size (25.2 M params) with "
            "`examples/ds_config_hf_zero3.json`; the 2-rank load rows were made before the node's load window was "
            "narrowed to the load itself (it then ran to each rank's after_model); the 4.51.3 MoE row ran in the "
            "environment `torch2.13.0+cpu-ds0.19.8-tf4.51.3` (`rssprobe run ... --env NAME`) with accelerate added by "
            "hand, which the code now adds itself. Rows marked \"not run\" were not run in this session (time: each "
            "new transformers release is a new environment and a DeepSpeed op compile, ~20 min here).",
            "",
            "Third-party scripts (transformers' `run_clm.py`, DeepSpeedExamples' `train_bert_ds.py`) were not run "
            "here: run_clm needs `datasets`, `evaluate` and a local tokenizer, HelloDeepSpeed needs wikitext in the "
            "datasets cache, and none is on this machine; `evidence.sh` takes them from a local clone "
            "(`TRANSFORMERS_SRC`, `DSE_SRC`), never from this repository.", ""]


def main(root: Path) -> None:
    runs = root / "runs"
    lines = ["# Your job as you run it (issue 31): evidence", "",
             "Generated by `python reports/your-job/tables.py $OUT` from the runs of `OUT=... bash "
             "reports/your-job/evidence.sh` (on a 2-core, 24 GiB machine shared with other sessions: timings are "
             "noisy and none is shown; memory figures are per run).", "",
             *section_script(runs), *section_scale(root), *section_launchers(runs), *section_load(runs),
             *section_moe(root), *COMMANDS]
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
