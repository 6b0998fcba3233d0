"""reports/your-job.md's issue-42 sections: TRL's SFTTrainer, PEFT LoRA and an accelerate loop (the scripts in
reports/your-job/finetune/, run by its evidence.sh in another virtualenv), and the save phase of a Trainer job.

Every figure is read from the runs; the first-principles sums are computed from each run's own parameter counts
(the model event: parameters, trainable parameters, the optimizer's tensor sizes) and its world size, never typed
in. A row whose run is missing or did not finish says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .your_job_runs import events, fmt, summary

MIB = 2**20
# (run, job, launcher)
JOBS = (("sft-z2-1r-accelerate", "TRL SFTTrainer", "accelerate"), ("sft-z2-1r-torchrun", "TRL SFTTrainer", "torchrun"),
        ("sft-z2-2r-accelerate", "TRL SFTTrainer", "accelerate"), ("sft-z2-2r-torchrun", "TRL SFTTrainer", "torchrun"),
        ("lora-z3-2r-accelerate", "PEFT LoRA (SFTTrainer)", "accelerate"),
        ("lora-z3-2r-torchrun", "PEFT LoRA (SFTTrainer)", "torchrun"),
        ("lora-z2-1r-torchrun", "PEFT LoRA (SFTTrainer)", "torchrun"),
        ("loop-z2-2r-accelerate", "accelerate loop, from_pretrained", "accelerate"),
        ("loop-z2-2r-torchrun", "accelerate loop, from_pretrained", "torchrun"))
SAVES = ("trainer-save-z2", "trainer-save-z3")


def _model(run: Path) -> dict[str, Any]:
    return next((e for e in events(run) if e["event"] == "model"), {})


def first_principles(run: Path) -> tuple[list[tuple[str, float]], list[str]] | None:
    """(term, B/param of the whole model) of rank 0's live ZeRO buffers from first principles, and the roles
    measured outside the sum; None when the run has no model or stage to compute from."""
    s, model = summary(run), _model(run)
    if s is None or not model or not s.params:
        return None
    zero = s.zero()
    p, t, n = s.params, model.get("trainable_params") or s.params, s.manifest.world_size or 1
    frozen = p - t
    if zero["stage"] in (1, 2):
        largest = max((x for group in model.get("shape_groups") or [] for x in group), default=0)
        terms = [(f"fp32 master, fp32 gradient, Adam's two states (4+4+4+4 over {n} rank{'s' if n > 1 else ''})",
                  16 * t / n / p), ("bf16 weights (whole, every rank)", 2 * t / p)]
        if zero["offload_optimizer"]:
            terms += [("bf16 staging (partition)", 2 * t / n / p),
                      ("two temp gradient buffers of the largest trained tensor (2 x 2 B)", 4 * largest / p)]
        if frozen:
            terms.append(("frozen bf16 weights (whole, every rank)", 2 * frozen / p))
        return terms, []
    if zero["stage"] == 3:
        terms = [(f"fp32 master, fp32 gradient, Adam's two states (4+4+4+4 over {n} ranks)", 16 * t / n / p),
                 ("bf16 partitions", 2 * t / n / p), ("bf16 gradient partitions", 2 * t / n / p)]
        if frozen:
            terms.append(("frozen bf16 partitions", 2 * frozen / n / p))
        return terms, ["gathered_params", "buckets"]
    return None


def _roles_end(run: Path) -> dict[str, float]:
    s = summary(run)
    budget = s.budget("end") if s else None
    return (budget or {}).get("roles") or {}


def _jobs_table(runs: Path) -> list[str]:
    out = ["| run | job | ZeRO | ranks | launcher | status | params (trainable) | rank 0 live buffers at end | "
           "first-principles sum | its terms | measured apart | `other` |",
           "|---|---|---:|---:|---|---|---|---:|---:|---|---|---:|"]
    for name, job, launcher in JOBS:
        s = summary(runs / name)
        if s is None or s.status != "ok":
            out.append(f"| {name} | {job} | | | {launcher} | {s.status if s else 'not run'} | | | | | | |")
            continue
        model, roles = _model(runs / name), _roles_end(runs / name)
        fp = first_principles(runs / name)
        terms, apart = fp if fp else ([], [])
        trainable = model.get("trainable_params") or s.params or 0
        live = s.metrics().get("budget.live")
        total = sum(v for _k, v in terms) + sum(roles.get(r, 0.0) for r in apart)
        out.append(f"| {name} | {job} | {s.zero()['stage']} | {s.manifest.world_size} | {launcher} | {s.status} | "
                   f"{s.params:,} ({trainable:,}) | {fmt(live)} | {fmt(total if fp else None)} | "
                   + " + ".join(f"{label} {v:.2f}" for label, v in terms) + " | "
                   + ", ".join(f"{r} {roles.get(r, 0.0):.2f}" for r in apart) + f" | {fmt(roles.get('other'))} |")
    return [*out, ""]


def _frozen_table(runs: Path) -> list[str]:
    out = ["| run | ZeRO | ranks | trainable | frozen role | frozen role, B/param | 2 B per frozen parameter "
           "(over the ranks at ZeRO-3) | `other` |", "|---|---:|---:|---|---|---:|---:|---:|"]
    for name in ("lora-z2-1r-torchrun", "lora-z3-2r-accelerate", "lora-z3-2r-torchrun"):
        s = summary(runs / name)
        if s is None or s.status != "ok" or not s.params:
            out.append(f"| {name} | | | | | | | |")
            continue
        model, roles = _model(runs / name), _roles_end(runs / name)
        t, p, n, stage = model.get("trainable_params") or s.params, s.params, s.manifest.world_size, s.zero()["stage"]
        role = "frozen_partitions" if stage == 3 else "frozen_weights"
        expected = 2 * (p - t) / (n if stage == 3 else 1) / p
        out.append(f"| {name} | {stage} | {n} | {t:,} of {p:,} ({100 * t / p:.2f}%) | {role} | "
                   f"{fmt(roles.get(role))} | {expected:.2f} | {fmt(roles.get('other'))} |")
    return [*out, ""]


def _part_inuse(e: dict[str, Any], params: int) -> str:
    held = [(k, p.get("inuse")) for k, p in e["parts"].items()
            if k in ("clone_tensors_for_torch_save", "_zero3_consolidated_16bit_state_dict")]
    return ", ".join(f"{v / params:.2f}" for _k, v in held if v is not None) or "n/a"


def _saves_table(runs: Path) -> list[str]:
    out = ["| run | save | rank | RSS before it, MiB | exact peak, MiB | peak above pre-save, B/param | "
           "retained, B/param | consolidated state dict, B/param | glibc in use by the consolidation, B/param |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for name in SAVES:
        s = summary(runs / name)
        if s is None or s.status != "ok" or not s.params:
            out.append(f"| {name} | | | | | | | | |")
            continue
        world = s.manifest.world_size or 1
        for kind in ("trainer_checkpoint", "trainer_save_model"):
            entry = peak = 0.0
            held_node = 0.0
            for rank in range(world):
                got = [e for e in events(runs / name, rank) if e["event"] == "save" and e["save"] == kind]
                if not got:
                    continue
                e = got[-1]
                held = e["state_dict_bytes"] or 0
                entry, peak, held_node = entry + e["entry_rss"], peak + e["peak"], held_node + held
                out.append(f"| {name} | {kind} | {rank} | {e['entry_rss'] / MIB:,.1f} | {e['peak'] / MIB:,.1f} | "
                           f"{(e['peak'] - e['entry_rss']) / s.params:.2f} | "
                           f"{(e['rss'] - e['entry_rss']) / s.params:+.2f} | {held / s.params:.2f} | "
                           f"{_part_inuse(e, s.params)} |")
            if world > 1:
                out.append(f"| {name} | {kind} | node (sum) | {entry / MIB:,.1f} | {peak / MIB:,.1f} | "
                           f"{(peak - entry) / s.params:.2f} | | {held_node / s.params:.2f} | |")
    return [*out, ""]


def _scenario_save(runs: Path) -> list[str]:
    """The scenario's ZeRO-3 16-bit save: what rank 0 kept after it and what the garbage collector then freed."""
    s = summary(runs / "save-scenario-z3")
    if s is None or s.status != "ok" or not s.params:
        return []
    got = [e for e in events(runs / "save-scenario-z3") if e["event"] == "save" and e["save"] == "model_16bit"]
    if not got or not got[-1].get("collected"):
        return []
    e, p = got[-1], s.params
    c = e["collected"]
    return [f"The scenario's own ZeRO-3 16-bit save (`tiny`, {p:,} parameters, 2 ranks, "
            "`save.at_end=[\"model_16bit\"]`): rank 0 kept "
            f"{(e['rss'] - e['entry_rss']) / p:+.2f} B/param of RSS after it returned, though rssprobe's own code had "
            f"dropped its reference to the {(e['state_dict_bytes'] or 0) / p:.2f} B/param state dict; `gc.collect()` "
            "right after it "
            f"found {c['objects']} objects and freed {c['rss'] / p:.2f} B/param of RSS "
            f"({(c['inuse'] or 0) / p:.2f} of glibc's bytes in use). What held it: DeepSpeed's "
            "`_zero3_consolidated_16bit_state_dict` builds the dict in a recursive nested function "
            "(`get_layer_state_dict`) whose closure cell refers to the function itself and to the dict, a reference "
            "cycle that outlives the call until Python's collector runs; not glibc retention, and not rssprobe's. "
            "The Trainer's saves above keep little: the collector ran during their later work.", ""]


def _reuse(runs: Path) -> str:
    """How the DeepSpeed ops were had in the other environment, from each run's log."""
    reused = built = 0
    for name, _job, _launcher in JOBS:
        log = runs / name / "worker.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        reused += text.count(" reused from ")
        built += text.count("building") + text.count("Building extension")
    return f"{reused} op loads reused from the shared directory, {built} builds"


def section(runs: Path) -> list[str]:
    return ["## Issue 42: TRL, PEFT and accelerate jobs, in their own virtualenv", "",
            "TRL's `SFTTrainer`, PEFT LoRA through its `peft_config`, and an accelerate loop with a `DeepSpeedPlugin` "
            "(`reports/your-job/finetune/`: a Llama of 2 layers, hidden 256, vocabulary 4,096, built from a config "
            "and saved by `prepare.py`, loaded with `from_pretrained`; this repository's markdown as a local "
            "JSON-lines "
            "dataset; 4 optimizer steps of 2 sequences of 16 tokens, bf16, the optimizer offloaded to the CPU, at "
            "ZeRO-3 the parameters too), run in a virtualenv of their own (trl, peft, datasets beside the same "
            "torch, DeepSpeed, transformers and accelerate) with `rssprobe run --python` under `accelerate launch` "
            f"and `torchrun`. DeepSpeed's CPU ops in that environment: {_reuse(runs)}. Rank 0's live ZeRO buffers "
            "at the end against their first-principles sum (bytes per parameter of the whole model; the sum's "
            "terms from the run's own parameter counts, world size and the largest tensor its optimizer holds; at "
            "ZeRO-3 the parameters DeepSpeed keeps gathered and its buckets are measured apart and added):", "",
            *_jobs_table(runs),
            "A fine-tune's frozen weights are a role of their own at every stage (`frozen_weights` at ZeRO-1/2: "
            "whole bf16 weights on every rank; `frozen_partitions` at ZeRO-3), against 2 B per frozen parameter:",
            "", *_frozen_table(runs),
            "### The save phase of a Trainer job", "",
            "`tests/data/scripts/train_trainer_save.py` (the HF Trainer, the same Llama built from its config, a "
            "checkpoint at its last step, then `trainer.save_model()`), 2 ranks, optimizer offloaded (at ZeRO-3 the "
            "parameters too, `stage3_gather_16bit_weights_on_model_save` on), glibc's mmap threshold fixed at 64 KiB "
            "so a freed clone's pages go back at once. Per rank and the node: the RSS right before each save, its "
            "exact peak (VmHWM), what it kept, the consolidated 16-bit state dict it built (storage bytes, exact) "
            "and glibc's bytes in use the consolidating call left allocated when it returned:", "",
            *_saves_table(runs), *_scenario_save(runs)]


def answer(runs: Path) -> list[str]:
    """The issue-42 sentences of the page's answer (left out where their runs are missing)."""
    out = []
    one, two = summary(runs / "sft-z2-1r-accelerate"), summary(runs / "sft-z2-2r-accelerate")
    fp1 = first_principles(runs / "sft-z2-1r-accelerate")
    if one and two and fp1 and one.status == two.status == "ok":
        out.append(f"TRL's `SFTTrainer` (ZeRO-2, optimizer offloaded) under `accelerate launch`: rank 0's live "
                   f"buffers read {fmt(one.metrics().get('budget.live'))} B/param at 1 rank against "
                   f"{sum(v for _k, v in fp1[0]):.2f} from first principles, "
                   f"{fmt(two.metrics().get('budget.live'))} at 2 ranks.")
    lora = summary(runs / "lora-z3-2r-accelerate")
    if lora and lora.status == "ok":
        roles = _roles_end(runs / "lora-z3-2r-accelerate")
        out.append(f"PEFT LoRA at ZeRO-3, 2 ranks: the frozen bf16 partitions read "
                   f"{fmt(roles.get('frozen_partitions'))} B/param, `other` {fmt(roles.get('other'))}.")
    saves = {stage: summary(runs / f"trainer-save-z{stage}") for stage in (2, 3)}
    if all(s and s.status == "ok" for s in saves.values()):
        node = {stage: s.node_saves().get("node.save.trainer_save_model.state_dict")  # type: ignore[union-attr]
                for stage, s in saves.items()}
        if None not in node.values():
            out.append(f"A Trainer job's final `save_model` holds a consolidated bf16 state dict of "
                       f"{node[2]:.2f} B/param on the node at ZeRO-2 (every rank builds one) against {node[3]:.2f} "
                       "at ZeRO-3 (rank 0 only): ms-swift #8193, small.")
    return out
