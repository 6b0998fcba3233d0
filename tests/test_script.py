"""rssprobe run --script: a user's DeepSpeed script, unmodified, under the probes. Known answers from real runs.

examples/train_linear.py is the `tiny` scenario written as an ordinary DeepSpeed script; run under the same
glibc settings its census must equal the scenario's (the census is exact: allocated sizes and resident
pages), and its sites must read what the scenario's read. tests/data/scripts/misbehave.py fails on request.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from rssprobe.config import scenario, script
from rssprobe.config.scenariospec import ScenarioSpec
from rssprobe.errors import UserError

from .conftest import STEADY_GLIBC, rssprobe, summary
from .noise import bound

ROOT = Path(__file__).resolve().parent.parent
LINEAR = ROOT / "examples" / "train_linear.py"
HF = ROOT / "examples" / "train_hf.py"
MISBEHAVE = Path(__file__).resolve().parent / "data" / "scripts" / "misbehave.py"
ADAM = "deepspeed.ops.adam.cpu_adam.DeepSpeedCPUAdam.step"


def _events(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]


def _script_run(out: Path, script: Path, *args: str, options: tuple[str, ...] = ()) -> Any:
    return rssprobe("run", "--script", str(script), "--out", str(out), *STEADY_GLIBC, *options, "--", *args)


@pytest.fixture(scope="module")
def linear(runs_dir: Path) -> tuple[Path, dict[str, Any]]:
    """train_linear.py asked for 6 steps, stopped by --steps 4: the tiny scenario's 4."""
    out = runs_dir / "script-linear"
    proc = _script_run(out, LINEAR, "--deepspeed_config", str(LINEAR.with_name("ds_config_linear.json")),
                       "--steps", "6", options=("--steps", "4"))
    assert proc.returncode == 0, proc.stderr
    return out, summary(out)


@pytest.fixture(scope="module")
def accumulating(runs_dir: Path) -> tuple[Path, dict[str, Any]]:
    """examples/train_hf.py on a tiny GPT-2 (tied embeddings, 2.7 M unique params) with its DeepSpeed config's
    gradient accumulation 4 and PR #8132's patch set: 3 optimizer steps."""
    out = runs_dir / "script-accumulating"
    proc = _script_run(out, HF, "--model_type", "gpt2", "--hidden_size", "256", "--layers", "2", "--heads", "4",
                       "--vocab_size", "4096", "--seq_len", "16", "--steps", "3", options=("--patched",))
    assert proc.returncode == 0, proc.stderr
    return out, summary(out)


@pytest.mark.worker
def test_script_run_of_the_tiny_scenario_measures_what_the_scenario_measures(
        linear: tuple[Path, dict[str, Any]], tiny_baseline: Path) -> None:
    (run, s), t = linear, summary(tiny_baseline)
    assert s["status"] == "ok" and s["params"] == t["params"] and s["steps_done"] == t["steps_done"] == 4
    assert s["script"]["stopped"] == "stopped after 4 steps as asked"  # its own loop would have run 6
    assert s["zero"]["stage"] == 2 and s["script"]["sha256"] and s["script"]["path"] == str(LINEAR)
    # the census is exact: the same buffers, byte for byte per parameter
    assert abs(s["budget"]["live_bytes_per_param"] - t["budget"]["live_bytes_per_param"]) <= 0.01
    assert set(s["budget"]["roles"]) == set(t["budget"]["roles"])
    for role, value in t["budget"]["roles"].items():
        assert abs(s["budget"]["roles"][role] - value) <= 0.01, role
    # DeepSpeedCPUAdam.step allocates the two Adam states on the first step only (two RSS reads a call)
    rows = {(r["site"], r["phase"]): r for r in s["sites"]}
    noise = bound(2, s["params"])
    assert abs(rows[(ADAM, "first_step")]["retained_bytes_per_param"] - 8.00) <= noise
    assert abs(rows[(ADAM, "steady")]["retained_bytes_per_param"]) <= noise
    assert abs(s["budget"]["not_attributed_bytes_per_param"]) <= 0.5
    assert next(e for e in _events(run) if e["event"] == "model")["param_tensors"] == 8
    # markdown, not the terminal's table: rich wraps a long line wherever the run's path length puts the break
    assert "stopped after 4 steps as asked" in rssprobe("show", str(run), "--format", "markdown", check=True).stdout


@pytest.mark.worker
def test_script_baseline_is_taken_before_its_model(linear: tuple[Path, dict[str, Any]], tiny_baseline: Path) -> None:
    """Both baselines come after torch, DeepSpeed and the ops: the script's adds only its own few imports."""
    linear_run = linear[0]
    phases = [e["name"] for e in _events(linear_run) if e["event"] == "phase"]
    assert phases.index("pre_model") < phases.index("after_model")
    modules = {run: next(e for e in _events(run) if e["event"] == "census" and e["at"] == "pre_model")
               ["python_modules"] for run in (linear_run, tiny_baseline)}
    assert 0 <= modules[linear_run] - modules[tiny_baseline] < 50  # argparse, json and the script itself


@pytest.mark.worker
def test_gradient_accumulation_is_one_step_of_four_micro_steps(accumulating: tuple[Path, dict[str, Any]]) -> None:
    run, s = accumulating
    assert json.loads((ROOT / "examples" / "ds_config_hf.json").read_text())["gradient_accumulation_steps"] == 4
    steps = [e for e in _events(run) if e["event"] == "step"]
    assert s["status"] == "ok" and [e["micro_steps"] for e in steps] == [4, 4, 4]
    census = next(e for e in _events(run) if e["event"] == "census" and e["at"] == "end")
    pages = census["roles"]["grad_accum"]["storages"] * 4096 / s["params"]
    assert abs(s["budget"]["roles"]["grad_accum"] - 2.00) <= pages  # one bf16 buffer per parameter


@pytest.mark.worker
def test_a_scripts_transformers_imports_are_in_its_baseline(accumulating: tuple[Path, dict[str, Any]]) -> None:
    """The script imports transformers and builds the model with it: the modeling module it imports inside
    from_config comes before the model's first parameter, so before the baseline, as in a scenario."""
    s = accumulating[1]
    assert s["model"]["architecture"] == "GPT2LMHeadModel"
    after = s["budget"]["imported_since_baseline"]
    assert after is not None and "transformers" not in after and "scipy" not in after


@pytest.mark.worker
def test_tied_weight_is_one_parameter_everywhere(accumulating: tuple[Path, dict[str, Any]]) -> None:
    """GPT-2's wte and lm_head share one weight: one parameter in the count, the census and the gradient path."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    run, s = accumulating
    with torch.device("meta"):  # the script's model, built here on the meta device: the test's own count
        meta = AutoModelForCausalLM.from_config(AutoConfig.for_model("gpt2", n_embd=256, n_layer=2, n_head=4,
                                                                     vocab_size=4096, n_positions=64))
    unique = sum(p.numel() for p in meta.parameters())
    with_duplicates = sum(p.numel() for _n, p in meta.named_parameters(remove_duplicate=False))
    assert with_duplicates - unique == 4096 * 256  # the tied weight, which a naive count takes twice
    assert s["params"] == unique
    assert s["model"]["tied"] == [["transformer.wte.weight", "lm_head.weight"]]
    tensors = len(list(meta.parameters()))
    assert s["model"]["param_tensors"] == tensors
    rows = {r["name"].split(".")[-1]: r for r in s["sites"] if r["phase"] == "first_step"}
    assert rows["copy_grads_in_partition"]["calls"] == 4 * tensors  # once per tensor and micro-step, not twice
    # DeepSpeed's flat buffers hold each unique parameter once: per unique parameter they read exactly 4 and 2
    census = next(e for e in _events(run) if e["event"] == "census" and e["at"] == "end")
    for role, known in (("fp32_master", 4), ("bit16_params", 2)):
        pages = census["roles"][role]["storages"] * 4096 / s["params"]
        assert abs(s["budget"]["roles"][role] - known) <= pages, (role, s["budget"]["roles"][role])
    assert "tied weights counted once (transformer.wte.weight = lm_head.weight" in \
        rssprobe("show", str(run), check=True).stdout


@pytest.mark.worker
def test_patched_script_run_fires_both_pr8132_parts_as_the_scenario_does(
        accumulating: tuple[Path, dict[str, Any]]) -> None:
    effects = {i["name"]: i for i in accumulating[1]["interventions"]}
    assert effects["pr8132.float-scale"]["count"] == 3  # once per optimizer step, not per micro-step
    assert effects["pr8132.malloc-trim"]["count"] == 1  # once per run (ZeRO-2 hands Adam one group)


@pytest.fixture(scope="module")
def raising(runs_dir: Path) -> tuple[Path, Any, dict[str, Any]]:
    """misbehave.py saving a checkpoint after step 1, initializing again after step 2, raising at step 3."""
    out = runs_dir / "script-raises"
    proc = _script_run(out, MISBEHAVE, "--checkpoint", str(out / "checkpoints"), "--init-twice", "--raise-at", "3")
    return out, proc, summary(out)


@pytest.mark.worker
def test_a_script_that_raises_fails_naming_its_line_and_keeps_its_steps(
        raising: tuple[Path, Any, dict[str, Any]]) -> None:
    out, proc, s = raising
    assert proc.returncode == 1
    line = next(i for i, text in enumerate(MISBEHAVE.read_text().splitlines(), 1) if "raise RuntimeError" in text)
    assert s["status"] == "failed" and s["steps_done"] == 2
    assert s["error"] == f"misbehave.py:{line}: RuntimeError: the loss went wrong at step 3"
    assert "Traceback" in (out / "worker.log").read_text()  # the one line above; the traceback in the log


@pytest.mark.worker
def test_a_scripts_checkpoint_is_a_save_phase_and_its_second_initialize_an_in_run_event(
        raising: tuple[Path, Any, dict[str, Any]]) -> None:
    out, _proc, s = raising
    assert {(e["name"], e["step"]) for e in _events(out) if e["event"] == "inrun"} == {("reinit", 2)}
    assert [(e["save"], e["step"]) for e in _events(out) if e["event"] == "save"] == [("save_checkpoint", 1)]
    assert s["script"]["engines"] == 2 and (out / "checkpoints" / "after-step-1").is_dir()


@pytest.mark.worker
def test_a_script_that_never_initializes_fails_saying_so(runs_dir: Path) -> None:
    out = runs_dir / "script-no-init"
    proc = _script_run(out, MISBEHAVE, "--no-init")
    assert proc.returncode == 1
    assert summary(out)["error"] == "misbehave.py never called deepspeed.initialize"


@pytest.mark.worker
def test_diff_refuses_two_different_scripts_unless_allowed(linear: tuple[Path, dict[str, Any]],
                                                           raising: tuple[Path, Any, dict[str, Any]]) -> None:
    a, b = str(linear[0]), str(raising[0])
    proc = rssprobe("diff", a, b)
    assert proc.returncode == 2 and "ran different scripts" in proc.stderr
    assert "--allow-different-scripts" in proc.stderr and proc.stderr.strip().count("\n") == 0
    allowed = rssprobe("diff", a, b, "--allow-different-scripts")
    assert allowed.returncode == 125 and "did not finish" in allowed.stdout  # compared; B failed: undecided


def test_a_changed_script_is_a_different_script() -> None:
    a = {"script": {"path": "/x/train.py", "sha256": "a" * 64}}
    assert script.different(a, a) is None
    assert "changed between the runs" in (script.different(a, {"script": {"path": "/x/train.py",
                                                                          "sha256": "b" * 64}}) or "")
    assert "/y/train.py" in (script.different(a, {"script": {"path": "/y/train.py", "sha256": "a" * 64}}) or "")


@pytest.mark.parametrize("make,reason", [
    (lambda d: d / "missing.py", "no such script"),
    (lambda d: (d / "dir.py").mkdir() or d / "dir.py", "is a directory"),
    (lambda d: (d / "latin1.py").write_bytes(b"# caf\xe9\nimport deepspeed\n") and d / "latin1.py", "not UTF-8"),
    (lambda d: (d / "broken.py").write_text("import deepspeed\ndef f(:\n") and d / "broken.py",
     "broken.py:2: SyntaxError"),
])
def test_a_script_that_cannot_run_is_refused_before_any_worker(tmp_path: Path, make: Any, reason: str) -> None:
    path = make(tmp_path)
    with pytest.raises(UserError, match=reason):
        scenario.load(str(path))


def test_a_script_declared_in_a_scenario_file_is_checked_too(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(f'name = "s"\n[model]\nkind = "script"\n[script]\npath = "{tmp_path}"\n')
    with pytest.raises(UserError, match="is a directory"):
        scenario.load(str(path))
    path.write_text(f'name = "s"\n[model]\nkind = "script"\n[script]\npath = "{LINEAR}"\n')
    scen = scenario.load(str(path))
    assert scen.script is not None and scen.script.sha256 == hashlib.sha256(LINEAR.read_bytes()).hexdigest()
    assert scen.steps is None and scen.script.stop_after is None  # the script's own loop decides
    assert scenario.load(str(path), ["steps=3"]).script.stop_after == 3  # type: ignore[union-attr]


def test_refusals_exit_2_in_one_line_with_no_run_directory(tmp_path: Path) -> None:
    out = tmp_path / "run"
    (tmp_path / "latin1.py").write_bytes(b"# caf\xe9\n")
    for args in (["--script", str(tmp_path / "latin1.py")], ["--script", str(LINEAR), "--set", "zero.stage=3"]):
        proc = rssprobe("run", *args, "--out", str(out))
        assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
        assert "Traceback" not in proc.stderr and not out.exists()
    assert "takes its model and DeepSpeed config from the script" in proc.stderr


def test_script_arguments_travel_exactly() -> None:
    args = ["--name", 'with "quotes"', "back\\slash", "tab\there", "caf\u00e9 \U0001f600", "del\x7f", "", "--x=1"]
    spec = ScenarioSpec(str(LINEAR), script_args=tuple(args), steps=2)
    scen = spec.load()
    assert scen.script is not None and scen.script.args == args and scen.script.stop_after == 2
    assert scen.steps is None  # the script's loop decides; rssprobe stops it after 2
