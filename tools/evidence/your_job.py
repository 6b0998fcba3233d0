"""reports/your-job.md from reports/your-job/evidence.sh's runs (issue 31).

    python -m tools.evidence.your_job $OUT > reports/your-job.md

Every figure is read from the runs (Summary, the events); nothing is typed in. A row whose run is missing or did
not finish says so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rssprobe.analysis import answers

from . import your_job_finetune as finetune
from .your_job_runs import MIB, census, events, fmt, summary


def section_script(runs: Path) -> list[str]:
    out = ["## 1. Script runs as exact as scenarios", ""]
    a, b = runs / "z3-script", runs / "z3-scenario"
    ca, cb = census(a, "after_init"), census(b, "after_init") or {"roles": {}}
    sa, sb = summary(a), summary(b)
    if ca and sa:
        params, params_b = sa.params, (sb.params if sb else None)  # each column per its own run's parameters
        out += [f"A Llama ({params / 1e6:.2f} M params) at ZeRO-3, optimizer and parameters offloaded, as a script "
                "(`examples/train_hf.py` with `examples/ds_config_hf_zero3.json`) and, where run, as the scenario "
                f"`llama-small-zero3` of the same shape ({(params_b or 0) / 1e6:.2f} M params). After-init census, "
                "allocated bytes per parameter (`buckets`: allocated, mostly never touched; before the fix the script "
                "read every byte as `other`: 12.00 B/param, as run_clm's row below shows):", "",
                "| role | script | scenario |", "|---|---:|---:|"]
        for role in sorted(set(ca["roles"]) | set(cb["roles"])):
            va = ca["roles"].get(role, {}).get("allocated")
            vb = cb["roles"].get(role, {}).get("allocated")
            out.append(f"| {role} | {fmt(va / params if va is not None else None)} | "
                       f"{fmt(vb / params_b if vb is not None and params_b else None)} |")
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
    return [*out, "", *_bisect(root)]


def _bisect(root: Path) -> list[str]:
    """The bisect of the load's peak over the releases between 4.51.3 and 5.13.0 (evidence.sh), its probes."""
    path = root / "moe-bisect" / "bisect.json"
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    out = [f"Bisected over {len(data['values'])} releases ({data['values'][0]} ... {data['values'][-1]}: the last of "
           f"each minor), the same load, 3 runs a release against 3 of {data['values'][0]}, threshold "
           f"{data['threshold']} B/param, alpha {data['alpha']}: " + " ".join(answers.bisect(data)), "",
           "| probe | transformers | load peak, rank 0, B/param | against 4.51.3 | verdict |",
           "|---:|---|---:|---:|---|"]
    for i, probe in enumerate(data["probes"], 1):
        out.append(f"| {i} | {probe['what'].removeprefix('transformers ')} | {fmt(probe['b'])} | "
                   f"{probe['delta']:+.2f} | {probe['verdict']} |")
    return [*out, ""]


CLM = (("clm-z2", "after", "2", "1", "rssprobe"), ("clm-z3", "after", "3", "1", "rssprobe"),
       ("clm-z3-before", "before (2f7e902)", "3", "1", "rssprobe"), ("clm-z3-ga2", "after", "3", "1", "rssprobe"),
       ("clm-z2-2r", "after", "2", "2", "rssprobe"), ("clm-z2-torchrun", "after", "2", "2", "torchrun"),
       ("clm-z2-deepspeed", "after", "2", "2", "deepspeed"), ("clm-z2-accelerate", "after", "2", "2", "accelerate"))


def _script_rows(runs: Path, rows: tuple[tuple[str, str, str, str, str], ...]) -> list[str]:
    """One row a third-party script's run: what ran, its steps, the after-init census, the end's budget."""
    out = ["| run | code | ZeRO | ranks | launcher | status | params | optimizer steps (micro-steps each) | "
           "after-init census: largest roles | `other` after init | live buffers at end | RSS at end |",
           "|---|---|---:|---:|---|---|---:|---|---|---:|---:|---:|"]
    for name, code, stage, ranks, launcher in rows:
        s = summary(runs / name)
        if s is None:
            out.append(f"| {name} | {code} | {stage} | {ranks} | {launcher} | not run | | | | | | |")
            continue
        c = census(runs / name, "after_init") or {"roles": {}}
        params = s.params or 0
        roles = sorted(((r, v.get("allocated", 0)) for r, v in c["roles"].items()), key=lambda kv: -kv[1])
        top = ", ".join(f"{r} {v / params:.2f}" for r, v in roles[:3]) if params else ""
        other = c["roles"].get("other", {}).get("allocated")
        m = s.metrics()
        micro = sorted({e.get("micro_steps") for e in s.steps})
        out.append(f"| {name} | {code} | {stage} | {ranks} | {launcher} | {s.status} | {params:,} | "
                   f"{len(s.steps)} ({', '.join(str(x) for x in micro)}) | {top} | "
                   f"{fmt(other / params if other is not None and params else None)} | {fmt(m.get('budget.live'))} | "
                   f"{fmt(m.get('budget.rss_above_baseline'))} |")
    return [*out, ""]


def section_clm(runs: Path) -> list[str]:
    """transformers' own run_clm.py (HF Trainer), unmodified, under `rssprobe run`: before and after the fixes."""
    return ["## transformers' run_clm.py (HF Trainer), unmodified", "",
            "`examples/pytorch/language-modeling/run_clm.py` as transformers ships it, trained from scratch offline: a "
            "Llama of 2 layers (hidden 256, vocab 4096) on this repository's own markdown, with a byte-level BPE "
            "tokenizer trained on the same text (`reports/your-job/run_clm/prepare.py`), 4 optimizer steps of 2 "
            "sequences of 16 tokens, the Trainer's DeepSpeed config with every value `auto` (optimizer offloaded; "
            "at ZeRO-3 the parameters too), glibc as users have it. `before` is the same command under the code "
            "before issue 31's fixes. B/param of the measured parameters, above the pre-model baseline:", "",
            *_script_rows(runs, CLM)]


HDS = (("hds-z1", "after", "1", "1", "rssprobe"), ("hds-z1-before", "before (2f7e902)", "1", "1", "rssprobe"),
       ("hds-z1-2r", "after", "1", "2", "rssprobe"), ("hds-z1-torchrun", "after", "1", "2", "torchrun"),
       ("hds-z1-deepspeed", "after", "1", "2", "deepspeed"), ("hds-z1-accelerate", "after", "1", "2", "accelerate"))


def section_hello(runs: Path) -> list[str]:
    """DeepSpeedExamples' HelloDeepSpeed (train_bert_ds.py), unmodified, under each launcher."""
    return ["## DeepSpeedExamples' HelloDeepSpeed (train_bert_ds.py), unmodified", "",
            "`training/HelloDeepSpeed/train_bert_ds.py` as DeepSpeedExamples ships it (its own DeepSpeed config: "
            "ZeRO-1, Adam offloaded to the CPU, bf16; a RoBERTa MLM of 6 layers, hidden 256, vocabulary 50,265, the "
            "word embedding tied to the head), run offline: the Hub's `wikitext` is a local stand-in in a datasets "
            "cache (this repository's markdown, one record a line) and its `--tokenizer` a RoBERTa-like BPE trained "
            "on the same text (`reports/your-job/hello_ds/prepare.py`); 3 optimizer steps (`--num_iterations 4`) "
            "of 8 sequences of up to 128 tokens, glibc as users have it. B/param as above:", "",
            *_script_rows(runs, HDS)]


COMMANDS = ["## How the runs were made", "",
            "Every row's command is in `reports/your-job/evidence.sh` (`OUT=DIR RUN_CLM=PATH bash "
            "reports/your-job/evidence.sh`, then this script); the runs behind this page are "
            "`reports/your-job/runs.tar.gz`. Two sessions made them: the first by hand with the same arguments before "
            "the script existed (the 2-rank load rows then had the node's load window running to each rank's "
            "after_model; the first 4.51.3 MoE row ran in an environment with accelerate added by hand), the second "
            "(2026-12-02) by the script: the 1- and 4-rank load rows, the bf16-on-disk row, the scenario beside the "
            "ZeRO-3 script, the python launcher, the HF Trainer row, the MoE rows of the release matrix "
            "(`moe-releases`) and run_clm's rows.", "",
            "transformers' `run_clm.py` is not in this repository: `RUN_CLM` names a downloaded copy (its 30,345-byte "
            "version whose `check_min_version` asks 4.57.0.dev0 ran here, under transformers 5.24.0 with `datasets` "
            "5.2.0 and `evaluate` 0.4.6 installed by `pip install datasets evaluate`). DeepSpeedExamples' "
            "`training/HelloDeepSpeed/train_bert_ds.py` is not here either: `HELLO_DS` names a copy (its version of "
            "commit 45b4b71, 2026-03-29, ran here, with `sh==1.14.2` as its requirements pin it). It loads "
            "`wikitext` from the Hub and `roberta-base` by default, which this machine cannot reach: the stand-ins "
            "above take their names, and nothing in the script changes. A third session (2026-12-02, later) made "
            "HelloDeepSpeed's rows and run_clm's under the `deepspeed` and `accelerate` launchers, from a copy of "
            "the same run_clm.py (its sha256 is the earlier rows' manifests').", "",
            "Issue 42's rows (2026-12-03) were made by `reports/your-job/finetune/evidence.sh` (`TP_VENV` set when "
            "calling `reports/your-job/evidence.sh`), in a virtualenv made with `python3.11 -m venv` holding torch "
            "2.13.0, DeepSpeed 0.19.8, transformers 5.24.0 and accelerate 1.16.0 as rssprobe's own, and trl 1.16.0, "
            "peft 0.21.2 and datasets 5.2.0 from the registry (installed, not copied here); the user scripts are "
            "this repository's own (`reports/your-job/finetune/`).", ""]


def _role_other(run: Path) -> float | None:
    s, c = summary(run), census(run, "after_init")
    if not s or not c or not s.params:
        return None
    return c["roles"].get("other", {}).get("allocated", 0) / s.params


def answer(root: Path) -> list[str]:
    """The page's answer first, each number read from the runs below it (a sentence whose runs are missing is left
    out)."""
    runs, out = root / "runs", []
    before, after = _role_other(runs / "clm-z3-before"), _role_other(runs / "clm-z3")
    if before is not None and after is not None:
        out.append(f"transformers' own `run_clm.py` (HF Trainer, unmodified) at ZeRO-3 read {before:.2f} B/param as "
                   f"`other` after `initialize` under the code before issue 31's fixes and {after:.2f} after them, "
                   "every byte now under its ZeRO role, as the scenario of the same model reads them.")
    for script, rows in (("transformers' `run_clm.py` (ZeRO-2)", CLM),
                         ("DeepSpeedExamples' HelloDeepSpeed (`train_bert_ds.py`, ZeRO-1)", HDS)):
        live = {launcher: (s.metrics().get("budget.live") if (s := summary(runs / name)) else None)
                for name, _code, _stage, ranks, launcher in rows if ranks == "2"}
        if len(live) > 1 and all(v is not None for v in live.values()):
            figures = {f"{v:.2f}" for v in live.values()}
            out.append(f"{script}, unmodified, at 2 ranks under {', '.join(live)}: rank 0's live ZeRO buffers read "
                       + (f"{figures.pop()} B/param under every launcher." if len(figures) == 1 else
                          ", ".join(f"{v:.2f}" for v in live.values()) + " B/param."))
    loads = {order: summary(runs / f"load-z3bf-4r-{order}") for order in ("before", "after")}
    if all(loads.values()):
        held = {o: s.load()["figures"] for o, s in loads.items() if s and s.load()}  # type: ignore[union-attr]
        node = {o: ((s.node() or {}).get("model_peak_rss_bytes") or 0) / MIB for o, s in loads.items() if s}
        if len(held) == 2:
            out.append(f"FAI-RL #68's order at 4 ranks (a bf16 load of an fp32 checkpoint, ZeRO-3): each rank holds "
                       f"{held['after']['whole'] + held['after']['partition']:.2f} B/param of the model when the HF "
                       f"DeepSpeed config is made after `from_pretrained` against "
                       f"{held['before']['whole'] + held['before']['partition']:.2f} with zero.Init during the load; "
                       f"the node's load peak {node['after']:,.1f} MiB against {node['before']:,.1f}.")
    releases = []
    matrix = root / "moe-releases"
    if (matrix / "matrix.json").exists():
        for group in sorted(p for p in matrix.iterdir() if p.is_dir()):
            for member in sorted(group.glob("run-*")):
                s = summary(member)
                load = s.load() if s else None
                if s and load:
                    releases.append(((s.manifest.versions or {}).get("transformers") or "?", load["figures"]["peak"]))
    if len(releases) > 1:
        worst = max(releases, key=lambda r: r[1])
        others = ", ".join(f"{v:.2f} for {t}" for t, v in releases if (t, v) != worst)
        out.append(f"transformers #47514, small (Qwen3-MoE, 8 experts, ZeRO-3, 2 ranks, zero.Init during the load): "
                   f"transformers {worst[0]}'s load peaks highest on rank 0, {worst[1]:.2f} B/param, against "
                   f"{others} (one run each).")
    bisected = root / "moe-bisect" / "bisect.json"
    if bisected.exists():
        out.append("Bisected over the releases between: " + " ".join(answers.bisect(json.loads(bisected.read_text()))))
    return [" ".join(out), ""] if out else []


def main(root: Path) -> None:
    runs = root / "runs"
    lead = answer(root)
    more = finetune.answer(runs)
    if more:  # issue 42's sentences join the answer paragraph
        lead = [" ".join([*lead[:1], *more]), ""] if lead else [" ".join(more), ""]
    lines = ["# Your job as you run it (issues 31 and 42): evidence", "", *lead,
             "Generated by `python -m tools.evidence.your_job $OUT` from the runs of `OUT=... bash "
             "reports/your-job/evidence.sh` (on a 2-core, 24 GiB machine shared with other sessions: timings are "
             "noisy and none is shown; memory figures are per run).", "",
             *section_script(runs), *section_scale(root), *section_launchers(runs), *section_load(runs),
             *section_moe(root), *section_clm(runs), *section_hello(runs), *finetune.section(runs), *COMMANDS]
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
