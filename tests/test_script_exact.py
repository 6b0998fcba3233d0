"""Script runs as exact as scenario runs (issue 31, part 1): known answers from real runs.

* a script at ZeRO-3 reads its after-init census by stage-3 roles, as the scenario llama-small-zero3 does (the
  same model, the same DeepSpeed config: examples/ds_config_hf_zero3.json is the scenario's);
* the pre-model baseline holds none of the model: two identical script runs (1 vs 1) agree on every gated figure
  within the gate's threshold, and no role reads negative;
* the Hugging Face Trainer (accelerate calls engine.step at the accumulation boundary only) counts its
  micro-steps;
* a script that fails before deepspeed.initialize has no ZeRO stage to show; one that raises KeyboardInterrupt
  itself failed (exit 1), it was not interrupted (130);
* a script's own output reaches the terminal while the run's log keeps it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rssprobe.config import modelshape

from .conftest import STEADY_GLIBC, rssprobe, summary

pytestmark = [pytest.mark.worker, pytest.mark.slow]  # make test-slow: end-to-end, minutes each

ROOT = Path(__file__).resolve().parent.parent
HF = ROOT / "examples" / "train_hf.py"
ZERO3 = ROOT / "examples" / "ds_config_hf_zero3.json"
TRAINER = Path(__file__).resolve().parent / "data" / "scripts" / "train_trainer.py"
MISBEHAVE = Path(__file__).resolve().parent / "data" / "scripts" / "misbehave.py"
# a small Llama: the same model as a script (examples/train_hf.py) and as a scenario (llama-small-zero3, --set)
SHAPE = {"hidden_size": 256, "intermediate_size": 704, "layers": 2, "heads": 4, "kv_heads": 2, "vocab_size": 4096}
HF_KEYS = {"hidden_size": "hidden_size", "intermediate_size": "intermediate_size", "layers": "num_hidden_layers",
           "heads": "num_attention_heads", "kv_heads": "num_key_value_heads", "vocab_size": "vocab_size"}
SEQ = 16


def _events(run: Path, rank: int = 0) -> list[dict[str, Any]]:
    name = "events.jsonl" if rank == 0 else f"events.rank{rank}.jsonl"
    return [json.loads(line) for line in (run / name).read_text().splitlines() if line.strip()]


def _census(run: Path, at: str) -> dict[str, Any]:
    return next(e for e in _events(run) if e["event"] == "census" and e["at"] == at)


def _hf_args(*extra: str) -> list[str]:
    return ["--model_type", "llama", *[a for k, v in SHAPE.items() for a in (f"--{k}", str(v))],
            "--seq_len", str(SEQ), *extra]


@pytest.fixture(scope="module")
def zero3_pair(runs_dir: Path) -> tuple[Path, Path]:
    """The small Llama at ZeRO-3 (optimizer and parameters offloaded), 2 steps: as a script and as the scenario."""
    script, scen = runs_dir / "z3-script", runs_dir / "z3-scenario"
    rssprobe("run", "--script", str(HF), "--steps", "2", "--out", str(script), *STEADY_GLIBC, "--",
             *_hf_args("--deepspeed_config", str(ZERO3), "--steps", "3"), check=True)
    sets = [a for k, v in SHAPE.items() for a in ("--set", f"model.hf.{HF_KEYS[k]}={v}")]
    rssprobe("run", "llama-small-zero3", "--steps", "2", "--set", f"model.seq_len={SEQ}", *sets, "--out", str(scen),
             *STEADY_GLIBC, check=True)
    return script, scen


def test_a_zero3_script_reads_its_after_init_census_by_stage3_roles(zero3_pair: tuple[Path, Path]) -> None:
    script, scen = zero3_pair
    s, t = summary(script), summary(scen)
    assert s["zero"]["stage"] == t["zero"]["stage"] == 3 and s["params"] == t["params"]
    a, b = _census(script, "after_init")["roles"], _census(scen, "after_init")["roles"]
    stage3 = {"fp32_master", "fp32_grad"} & set(b)
    assert stage3 and stage3 <= set(a), (sorted(a), sorted(b))  # not everything "other", as stage-2 roles read it
    for role, counts in b.items():
        if role == "other":
            continue  # the script's own objects and the scenario's differ; the roles are DeepSpeed's buffers
        assert a.get(role, {}).get("allocated") == counts["allocated"], role  # exact: the same partitions
    # the script's "other" holds no DeepSpeed buffer: within what its own inputs take (one batch of ids)
    assert a["other"]["allocated"] - b["other"]["allocated"] < 1 << 20
    for role, value in t["budget"]["roles"].items():  # and the end budget, role by role
        assert abs(s["budget"]["roles"].get(role, 0.0) - value) <= 0.01, role
    # the tensors it records for an estimate's calibration (a partitioned one by ds_numel) are the scenario's shape
    [model] = [e for e in _events(script) if e["event"] == "model"]
    manifest = json.loads((scen / "manifest.json").read_text())
    want = modelshape.recorded(manifest["scenario"]["model"], SHAPE["layers"], "llama-small-zero3")
    assert model["shape_groups"] == [list(g) for g in want.groups] and model["largest_layer"] == want.largest_layer


def test_a_zero3_scripts_pins_and_tied_line_read_its_stage(zero3_pair: tuple[Path, Path]) -> None:
    script = zero3_pair[0]
    shown = rssprobe("show", str(script), "--format", "markdown", check=True).stdout
    assert "(no census role)" not in shown and "ZeRO stage 3" in shown


@pytest.fixture(scope="module")
def aa_pair(runs_dir: Path) -> tuple[Path, Path]:
    """Two identical script runs (ZeRO-2, final trim, the mmap threshold fixed as every two-run test here: with
    glibc's dynamic threshold, of two pairs measured on a loaded machine one read 0.41 B/param apart after the
    trim and the other 0.03, every census role "same" in both: glibc's noise, not the baseline's): 1 vs 1."""
    runs = (runs_dir / "aa-1", runs_dir / "aa-2")
    for out in runs:
        rssprobe("run", "--script", str(HF), "--trim-at-end", "--out", str(out), *STEADY_GLIBC, "--",
                 *_hf_args("--steps", "2", "--deepspeed_config", str(ROOT / "examples" / "ds_config_linear.json")),
                 check=True)
    return runs


def test_a_scripts_baseline_holds_none_of_its_model(aa_pair: tuple[Path, Path]) -> None:
    """The baseline comes before the model's first weight exists: its census holds no tensor of the model (the
    embedding, 4096 x 256 fp32 = 4 MiB, was in it when the baseline was the first Parameter), and no role of the
    end budget reads below zero by more than a page per storage."""
    for run in aa_pair:
        pre = _census(run, "pre_model")
        assert pre["allocated"] < SHAPE["vocab_size"] * SHAPE["hidden_size"] * 4, pre["roles"]
        s, end = summary(run), _census(run, "end")
        for role, value in s["budget"]["roles"].items():
            pages = end["roles"].get(role, {}).get("storages", 1) * 4096 / s["params"]
            assert value >= -pages, (role, value)


def test_a_script_at_1_vs_1_agrees_on_every_gated_figure(aa_pair: tuple[Path, Path]) -> None:
    """Identical runs: diff's gated figures all "same" (within the gate's threshold, 0.25 B/param)."""
    a, b = aa_pair
    result = json.loads(rssprobe("diff", str(a), str(b), "--format", "json").stdout)
    gated = [c for group in result["comparisons"].values() for c in group if c["gated"]]
    assert gated and all(c["verdict"] == "same" for c in gated), [(c["metric"], c["delta"]) for c in gated
                                                                   if c["verdict"] != "same"]


@pytest.fixture(scope="module")
def trainer(runs_dir: Path) -> tuple[Path, Any]:
    """The HF Trainer, gradient accumulation 2, 3 optimizer steps, ZeRO-2."""
    out = runs_dir / "trainer"
    proc = rssprobe("run", "--script", str(TRAINER), "--out", str(out), *STEADY_GLIBC, "--",
                    "--out", str(out / "trainer-output"), "--grad_accum", "2", "--max_steps", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def test_the_trainers_micro_steps_are_counted(trainer: tuple[Path, Any]) -> None:
    out = trainer[0]
    steps = [e for e in _events(out) if e["event"] == "step"]
    assert [e["micro_steps"] for e in steps] == [2, 2, 2]
    engine = next(e for e in _events(out) if e["event"] == "script_engine")
    assert engine["grad_accum_steps"] == 2 and engine["steps_total"] == 3  # the Trainer's max_steps


def test_a_scripts_output_reaches_the_terminal_and_stays_in_the_log(trainer: tuple[Path, Any]) -> None:
    out, proc = trainer
    # the Trainer's own loss lines ({'loss': ..., 'epoch': ...}) as the script printed them, and in the log
    printed = [line for line in proc.stderr.splitlines() if "'loss'" in line]
    assert len(printed) >= 3, proc.stderr[-2000:]
    assert all(line.strip() in (out / "worker.log").read_text() for line in printed)
    assert "3/3" in proc.stderr  # the progress bar knows the total


def test_a_script_that_fails_before_initialize_has_no_stage(runs_dir: Path) -> None:
    out = runs_dir / "fails-early"
    proc = rssprobe("run", "--script", str(MISBEHAVE), "--out", str(out), "--", "--raise-before-init", "--stage", "3")
    assert proc.returncode == 1
    s = summary(out)
    assert s["status"] == "failed" and "ValueError: no data found" in s["error"] and s["zero"]["stage"] is None
    shown = rssprobe("show", str(out), "--format", "markdown", check=True).stdout
    assert "ZeRO stage not known" in shown and "ZeRO stage 2" not in shown


def test_a_script_raising_keyboardinterrupt_itself_failed(runs_dir: Path) -> None:
    out = runs_dir / "own-interrupt"
    proc = rssprobe("run", "--script", str(MISBEHAVE), "--out", str(out), "--", "--interrupt-at", "2")
    assert proc.returncode == 1, proc.stderr[-2000:]  # not 130: nobody pressed Ctrl-C
    s = summary(out)
    line = next(i for i, text in enumerate(MISBEHAVE.read_text().splitlines(), 1)
                if text.strip().startswith("raise KeyboardInterrupt"))
    assert s["status"] == "failed" and s["steps_done"] == 1
    assert s["error"].startswith(f"misbehave.py:{line}: KeyboardInterrupt raised by the script itself")
