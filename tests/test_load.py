"""Loading a checkpoint as users do (issue 31, part 3): model.load = "checkpoint" writes the configured model once
with save_pretrained (cached by shape) and loads it with from_pretrained in every run, as a load phase of its own
between the pre-model baseline and deepspeed.initialize. Known answers from real runs:

* after initialize, a loaded model's buffers are the config-built model's, role by role (exact);
* the load itself: what the rank holds is the whole model (fp32 on disk, 4 B/param); the census right after it
  names the checkpoint's mapped pages apart;
* ZeRO-3 at 2 ranks with the Hugging Face DeepSpeed config made before from_pretrained (zero.Init partitions as it
  loads) or after it (FAI-RL #68's order): each rank holds half the model or all of it, and the node's peak while
  the ranks load differs by about one model;
* a script's own from_pretrained is measured the same way (the HF Trainer, TrainingArguments before the model).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import STEADY_GLIBC, rssprobe, summary
from .noise import PAGE, READ_ERROR

pytestmark = [pytest.mark.worker, pytest.mark.slow]  # make test-slow: end-to-end, minutes each

TRAINER = Path(__file__).resolve().parent / "data" / "scripts" / "train_trainer.py"
SMALL = ["--set", "model.hf.hidden_size=256", "--set", "model.hf.intermediate_size=704", "--set",
         "model.hf.num_hidden_layers=2", "--set", "model.hf.num_attention_heads=4", "--set", "model.hf.vocab_size=4096",
         "--set", "model.seq_len=16"]
LOAD = ["--set", 'model.load="checkpoint"']


def _events(run: Path, rank: int = 0) -> list[dict[str, Any]]:
    name = "events.jsonl" if rank == 0 else f"events.rank{rank}.jsonl"
    return [json.loads(line) for line in (run / name).read_text().splitlines() if line.strip()]


def _first(run: Path, kind: str, rank: int = 0) -> dict[str, Any]:
    return next(e for e in _events(run, rank) if e["event"] == kind)


@pytest.fixture(scope="module")
def built_and_loaded(runs_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The small Llama at ZeRO-2, 2 steps: built from its config, and loaded from its checkpoint."""
    # a checkpoint cache of its own (the compiled ops stay the user's: RSSPROBE_CACHE would build them again)
    env = {"RSSPROBE_CHECKPOINTS": str(tmp_path_factory.mktemp("checkpoints"))}
    built, loaded = runs_dir / "llama-built", runs_dir / "llama-loaded"
    for out, extra in ((built, []), (loaded, LOAD)):
        rssprobe("run", "llama-small", "--steps", "2", "--trim-at-end", *SMALL, *extra, "--out", str(out),
                 *STEADY_GLIBC, check=True, env=env)
    return built, loaded


def test_a_loaded_model_after_initialize_is_the_built_ones(built_and_loaded: tuple[Path, Path]) -> None:
    built, loaded = built_and_loaded
    a, b = summary(built), summary(loaded)
    assert a["params"] == b["params"] and a["load"] is None and b["load"] is not None
    init = {run: next(e for e in _events(run) if e["event"] == "census" and e["at"] == "after_init")["roles"]
            for run in built_and_loaded}
    for role, counts in init[built].items():
        if role != "other":
            assert init[loaded][role]["allocated"] == counts["allocated"], role  # the same partitions, exactly
    for role, value in a["budget"]["roles"].items():
        assert abs(b["budget"]["roles"][role] - value) <= 0.01, role
    result = json.loads(rssprobe("diff", str(built), str(loaded), "--format", "json").stdout)
    roles = [c for c in result["comparisons"].get("roles", []) if c["gated"]]
    assert roles and all(c["verdict"] == "same" for c in roles)


def test_the_load_is_a_phase_with_what_the_rank_holds(built_and_loaded: tuple[Path, Path]) -> None:
    loaded = built_and_loaded[1]
    s = summary(loaded)
    load, event = s["load"], _first(loaded, "load")
    assert event["how"] == "from_pretrained" and not event["zero_init"] and event["holds"] == "whole model"
    assert event["whole_bytes"] == 4 * s["params"]  # fp32 on disk, dtype auto: every parameter in full
    assert event["checkpoint"]["files"] >= 2 and event["checkpoint"]["format"] == "safetensors"  # sharded
    phases = [e.get("name") or e["event"] for e in _events(loaded) if e["event"] in ("phase", "load")]
    assert phases.index("pre_model") < phases.index("load") < phases.index("after_model")  # baseline first
    # transformers 5 uses the weights in place from the mapped safetensors files: right after the load every
    # parameter's storage lies in a checkpoint mapping, which the census names apart (exact: allocated bytes)
    after = next(b for b in s["budgets"] if b["at"] == "after_load")
    assert abs(after["roles_allocated"]["checkpoint_mapped"] - 4.00) < 1e-9, after["roles_allocated"]
    # resident is what was read of them (pages are read on use), never more than the model
    assert 0 < after["roles"]["checkpoint_mapped"] <= 4.00 and load["figures"]["whole"] == 4.00
    init = next(b for b in s["budgets"] if b["at"] == "after_init")
    assert "checkpoint_mapped" not in init["roles_allocated"]  # initialize copied them into its own buffers
    shown = rssprobe("show", str(loaded), "--format", "markdown", check=True).stdout.replace("\\_", "_")  # as read
    assert "load: from_pretrained of" in shown and "the whole model (4.00 B/param)" in shown


@pytest.fixture(scope="module")
def zero3_orders(runs_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """llama-small-zero3 (25.2 M params; fp32 on disk, loaded as bf16, as users pass torch_dtype) at 2 ranks, one
    step: the HF DeepSpeed config before from_pretrained (zero.Init during the load) and after it. (Loaded in the
    checkpoint's own dtype, transformers 5 keeps the weights in the mapped files untouched until initialize reads
    them: then neither order holds a model copy after the load; reports/your-job.md.)"""
    env = {"RSSPROBE_CHECKPOINTS": str(tmp_path_factory.mktemp("checkpoints"))}
    out = {}
    for order in ("before", "after"):
        out[order] = runs_dir / f"zero3-load-{order}"
        rssprobe("run", "llama-small-zero3", "--world-size", "2", "--steps", "1", *LOAD, "--set",
                 'model.from_pretrained.torch_dtype="bf16"', "--set", f'model.from_pretrained.hf_ds_config="{order}"',
                 "--out", str(out[order]), *STEADY_GLIBC, check=True, env=env)
    return out


def test_zero3_each_rank_holds_half_the_model_with_zero_init_and_all_of_it_without(
        zero3_orders: dict[str, Path]) -> None:
    s = summary(zero3_orders["before"])
    params, tensors = s["params"], s["model"]["param_tensors"]
    model = 2 * params  # bf16
    for rank in (0, 1):
        before, after = _first(zero3_orders["before"], "load", rank), _first(zero3_orders["after"], "load", rank)
        assert before["zero_init"] and before["holds"] == "partition" and not after["zero_init"]
        assert after["holds"] == "whole model" and after["whole_bytes"] == model
        # each rank's ds_tensor partitions: ceil(numel / 2) per tensor: half the model up to one element a tensor
        assert 0 <= before["partition_bytes"] - model / 2 <= 2 * tensors, before["partition_bytes"]
        # the anonymous memory each load left above the baseline: the bytes held beside what the loader keeps,
        # alike in both orders, so their difference is the half model a rank without zero.Init holds more; off
        # by the four RSS reads it is made of and by up to a page of each tensor in each run
        base = {run: next(e for e in _events(run, rank) if e["event"] == "phase" and e["name"] == "pre_model")
                for run in zero3_orders.values()}
        grown = [e["smaps"]["anonymous"] - base[run]["smaps"]["anonymous"]
                 for e, run in ((before, zero3_orders["before"]), (after, zero3_orders["after"]))]
        assert abs((grown[1] - grown[0]) - model / 2) <= 4 * READ_ERROR + 2 * tensors * PAGE, (grown, model)


def test_zero3_the_node_holds_one_model_more_after_the_load_without_zero_init(zero3_orders: dict[str, Path]) -> None:
    """Every rank holds what it loaded until initialize, so the node's anonymous memory after the load is the ranks'
    summed: without zero.Init it holds one (bf16) model more than with it (two whole copies instead of two halves);
    off by the 8 RSS reads it is made of and a page per tensor, rank and run. The node's sampled peak while the
    ranks load (20 ms samples, ranks overlapping in time) never exceeds the ranks' exact load peaks summed."""
    s = summary(zero3_orders["before"])
    params, tensors = s["params"], s["model"]["param_tensors"]
    model = 2 * params
    held = {}
    for order, run in zero3_orders.items():
        held[order] = 0
        for rank in (0, 1):
            base = next(e for e in _events(run, rank) if e["event"] == "phase" and e["name"] == "pre_model")
            held[order] += _first(run, "load", rank)["smaps"]["anonymous"] - base["smaps"]["anonymous"]
        exact = sum(_first(run, "load", r)["peak"] for r in (0, 1))
        assert summary(run)["node"]["model_peak_rss_bytes"] <= exact + 2 * READ_ERROR, order
    assert abs((held["after"] - held["before"]) - model) <= 8 * READ_ERROR + 4 * tensors * PAGE, (held, model)


def test_a_scripts_from_pretrained_is_a_load_phase(runs_dir: Path, tmp_path: Path) -> None:
    """The Trainer script loading a checkpoint with TrainingArguments(deepspeed=ZeRO-3 config) made first: the
    load is measured, zero.Init was active, and the rank holds its partition."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.for_model("llama", vocab_size=4096, hidden_size=256, intermediate_size=704,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  max_position_embeddings=64, tie_word_embeddings=False)
    checkpoint = tmp_path / "ckpt"
    AutoModelForCausalLM.from_config(config).save_pretrained(checkpoint, max_shard_size="4MB")
    out = runs_dir / "script-from-pretrained"
    proc = rssprobe("run", "--script", str(TRAINER), "--out", str(out), *STEADY_GLIBC, "--", "--out",
                    str(tmp_path / "trainer"), "--stage", "3", "--max_steps", "1", "--grad_accum", "1",
                    "--from_pretrained", str(checkpoint))
    assert proc.returncode == 0, proc.stderr[-3000:]
    event = _first(out, "load")
    assert event["how"] == "from_pretrained" and event["zero_init"] and event["holds"] == "partition"
    phases = [e.get("name") or e["event"] for e in _events(out) if e["event"] in ("phase", "load")]
    assert phases.index("pre_model") < phases.index("load")
