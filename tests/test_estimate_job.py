"""Issue 41 items 2-4: the estimate of the job the trainer runs (zero.Init, the load dtype, the trainable share,
DeepSpeed's two ZeRO-3 rows), suggestions that run as printed, verdict words that are their table's, and a phase
not estimated named in the first sentence.

Truth: DeepSpeed's own estimator (asked through the worker's Python, as every estimate does), the recorded H200
sweep that ships as the CUDA calibration (its fitted lines: the options' effect is a known answer of the same line),
and the command line itself (each suggested change run through the real CLI). No worker starts.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rssprobe.analysis import calibration, estimate, partition, provision
from rssprobe.analysis.partition import Zero
from rssprobe.cli import main
from rssprobe.config import modelshape

GIB = 2**30
SEVENTY = ["estimate", "--model", "llama-3-70b", "--gpus-per-node", "8", "--nodes", "4", "--stage", "3",
           "--node-ram", "1T"]


def cli(args: list[str], root: Path) -> Any:
    """The real command line in this process, sys.argv as `python -m rssprobe ARGS` sets it (the changes'
    command lines are made from it)."""
    import sys

    saved = sys.argv
    sys.argv = ["rssprobe", *args]
    try:
        return CliRunner().invoke(main, args, env={"RSSPROBE_ESTIMATE": str(root), "COLUMNS": "200"})
    finally:
        sys.argv = saved


def as_json(args: list[str], root: Path) -> dict[str, Any]:
    proc = cli([*args, "--format", "json"], root)
    assert proc.exit_code == 0, proc.output
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def seventy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return as_json(SEVENTY, tmp_path_factory.mktemp("root"))


def test_the_70b_zero3_answer_states_its_assumptions_and_answers_both_ways(seventy: dict[str, Any]) -> None:
    """The issue's case: HF Trainer builds under zero.Init at ZeRO-3 and loads bf16; the answer says so, fits
    the steps in 1 TiB that way, and says what happens without zero.Init (each of the 8 ranks holding the whole
    bf16 model: 8 x 2 B x 70.55 B = 1,051 GiB of copies alone, more than the node)."""
    first, other = seventy["answer"][0], seventy["answer"][1]
    assert "under zero.Init" in first and "loaded in bf16" in first
    assert other.startswith("The other way, without zero.Init") and "does not fit in 1,024 GiB" in other
    assert seventy["other_way"]["initialize_peak_bytes"] > 8 * 2 * seventy["target"]["params"]
    phases = {r["key"]: r for r in seventy["phases"]}
    assert phases["initialize_peak"]["bytes"] == seventy["node"]["initialize_state_bytes"]  # no whole copy
    assumed = " ".join(seventy["assumptions"])
    assert "zero.Init on" in assumed and "loaded in bf16" in assumed and "--no-zero-init" in assumed


def test_deepspeeds_two_zero3_rows_and_the_matching_one_reconciled(seventy: dict[str, Any]) -> None:
    """DeepSpeed's own estimator, asked for both rows, prints 443.53 GB with zero_init=1 and 3,154 GB with 0 for
    Llama-3-70B on 4 nodes x 8 GPUs (estimate_zero3_model_states_mem_needs_all_cold; its GB are GiB): the
    formula rssprobe shows gives DeepSpeed's own figure to the byte (int() rounding), and the target's row
    (zero.Init on) is the one reconciled."""
    rows = {r["zero_init"]: r for r in seventy["deepspeed_formula_rows"]}
    assert round(rows[True]["deepspeed_bytes"] / GIB, 2) == 443.53
    assert round(rows[False]["deepspeed_bytes"] / GIB) == 3154
    for r in rows.values():
        assert r["bytes"] == pytest.approx(r["deepspeed_bytes"], abs=1)
    assert rows[True]["matches_target"] and not rows[False]["matches_target"]
    assert seventy["deepspeed_formula"]["zero_init"] and "zero_init=1" in seventy["deepspeed_formula"]["reconciled"]


@pytest.fixture(scope="module")
def h200() -> calibration.Calibration:
    return calibration.load(calibration.packaged("h200-default"), {})


def target(cal: calibration.Calibration, **changes: Any) -> estimate.Target:
    shape = modelshape.linear(8, 2048, 1)
    zero = Zero(3, 8, 2, offload_param=True, accelerator=cal.accelerator)
    return dataclasses.replace(estimate.Target(shape, zero, 8, 1, cal.points[0].rule), **changes)


def test_zero_init_and_load_dtype_known_answers(h200: calibration.Calibration) -> None:
    """At a tiny size on the recorded H200 calibration: under zero.Init no rank holds the whole model (the
    initialize peak is the buffers after initialize); without it every rank holds it, and a bf16 load is the
    calibration's fp32 line at half the parameters (the same fitted line: equal to the byte)."""
    on = estimate.terms(target(h200, zero_init=True), h200, 8)
    assert on["initialize_model_copy"].value == 0 and on["initialize_peak"].value == on["initialize_state"].value
    bf16 = estimate.terms(target(h200, load_bytes=2), h200, 8)["initialize_model_copy"]
    half = target(h200, shape=modelshape.linear(4, 2048, 1))  # 4 of 8 layers: half the parameters, no outside
    fp32_half = estimate.terms(half, h200, 8)["initialize_model_copy"]
    assert bf16.value == pytest.approx(fp32_half.value, rel=1e-12)
    fp32 = estimate.terms(target(h200), h200, 8)["initialize_model_copy"]
    assert fp32.value > bf16.value >= 8 * 2 * target(h200).shape.params


def test_trainable_share_known_answer(h200: calibration.Calibration) -> None:
    """An adapter's 0.5%: the optimizer's roles (fp32 master, its gradient, Adam's states, the bit16 gradient
    partitions) are 0.5% of the full model's, the bit16 parameters unchanged; the node's steady estimate lower by
    exactly the ranks' sum of what those roles drop."""
    t = target(h200)
    full = estimate.live(t.shape, t.zero, "step")
    share = estimate.live(t.shape, t.zero, "step", 0.005)
    for role, nbytes in full.items():
        expected = round(nbytes * 0.005) if role in estimate.TRAINABLE_ROLES else nbytes
        assert share[role] == expected
    dropped = sum(full.values()) - sum(share.values())
    a = estimate.terms(t, h200, 8)["steady"].value
    b = estimate.terms(dataclasses.replace(t, trainable=0.005), h200, 8)["steady"].value
    assert a - b == pytest.approx(8 * dropped, abs=8)
    assert share["bit16_partitions"] == full["bit16_partitions"] > 0


def test_loading_onto_the_device_known_answer(h200: calibration.Calibration) -> None:
    """ms-swift's device_map="cuda:LOCAL_RANK" below ZeRO-3 (--load-onto device): no whole copy of the model in
    host RAM before initialize (the model-copy line at no parameters: its fixed part, as the line has at none), and
    the load is each rank's baseline plus the one tensor passing through host memory. Exact: the same fitted lines."""
    host = target(h200, zero=Zero(2, 8, 2, accelerator="cuda"), load_bytes=2)
    device = dataclasses.replace(host, load_onto_device=True)
    h, d = estimate.terms(host, h200, 8), estimate.terms(device, h200, 8)
    assert d["initialize_model_copy"] == estimate.intercept(estimate.fits(h200.points)["model_copy"], 8,
                                                            8 * min(p.baseline for p in h200.points), h200.read_sd)
    assert h["initialize_model_copy"].value - d["initialize_model_copy"].value >= 8 * 2 * host.shape.params
    assert h["steady"] == d["steady"] and h["step_peak"] == d["step_peak"]  # only the load changes
    from rssprobe.analysis import savephase

    phases = savephase.load()
    base = 8 * min(p.baseline for p in h200.points)
    load = savephase.terms(device, phases, 8, d["steady"], base)["checkpoint_load"]
    assert load == estimate.Term.exact(base + 8 * host.shape.largest_tensor * 2)


def test_the_trainers_own_memory_is_in_every_phase(tmp_path: Path) -> None:
    """--seen-steady: what the user saw above the steady estimate is the trainer's own, added to every phase to the
    byte (ms-swift #8193: 60 GB seen in training, 6 GiB of DeepSpeed's; its save did not fit); seen below the
    estimate, nothing is added and a note says so."""
    args = ["estimate", "--model", "llama-3-8b", "--gpus-per-node", "4", "--stage", "2", "--node-ram", "256G"]
    plain = as_json(args, tmp_path)
    steady = plain["node"]["steady_rss_bytes"]
    seen = int(steady + 40 * GIB)
    got = as_json([*args, "--seen-steady", str(seen)], tmp_path)
    own = got["trainer_own"]["bytes"]
    assert own == int(seen - steady) == pytest.approx(40 * GIB, abs=1)
    assert plain["trainer_own"]["bytes"] == 0 and got["trainer_own"]["seen_steady_bytes"] == seen
    before = {r["key"]: r for r in plain["phases"]}
    for row in got["phases"]:
        assert row["bytes"] == pytest.approx(before[row["key"]]["bytes"] + own, abs=1e-3), row["key"]
        assert row["upper_bytes"] == pytest.approx(before[row["key"]]["upper_bytes"] + own, abs=1e-3), row["key"]
    assert got["node"]["peak_rss_bytes"] == pytest.approx(plain["node"]["peak_rss_bytes"] + own, abs=1e-3)
    assert "GiB of the trainer's own" in got["answer"][0]
    assert any("the trainer's own host memory 40.0 GiB" in a for a in got["assumptions"])
    below = as_json([*args, "--seen-steady", "1G"], tmp_path)
    assert below["trainer_own"]["bytes"] == 0 and [r["bytes"] for r in below["phases"]] == \
        [r["bytes"] for r in plain["phases"]]
    assert any("--seen-steady 1.00 GiB is below" in n for n in below["notes"])


def test_trainable_option_reaches_the_answer(tmp_path: Path) -> None:
    got = as_json(["estimate", "--model", "llama-3-8b", "--gpus-per-node", "8", "--trainable", "0.5%"], tmp_path)
    full = as_json(["estimate", "--model", "llama-3-8b", "--gpus-per-node", "8"], tmp_path)
    assert "0.50% trainable" in got["answer"][0] and got["node"]["live_bytes"] < full["node"]["live_bytes"]
    assert any("train (0.500%)" in a for a in got["assumptions"])


@pytest.mark.parametrize(("args", "says"), [
    (["--model", "llama-3-70b", "--params", "70B", "--gpus-per-node", "8"], "rebuild it with 79 layers"),
    (["--model", "llama-3-8b", "--gpus-per-node", "8", "--zero-init"], "ZeRO stage 3 only"),
    (["tiny", "--gpus-per-node", "8", "--load-dtype", "bf16"], "Linear stack in fp32"),
    (["--model", "llama-3-8b", "--gpus-per-node", "8", "--trainable", "lots"], "a percentage"),
    (["--model", "llama-3-8b", "--gpus-per-node", "8", "--trainable", "200%"], "outside 1 to"),
    (["--model", "llama-3-8b", "--ranks-per-node", "2", "--accelerator", "cpu", "--load-onto", "device"],
     "a CPU target has no device"),
    (["--model", "llama-3-8b", "--gpus-per-node", "8", "--stage", "3", "--load-onto", "device"],
     "under zero.Init each rank loads only its partition"),
    (["tiny", "--gpus-per-node", "8", "--load-onto", "device"], "Linear stack in host RAM"),
    (["--model", "llama-3-8b", "--gpus-per-node", "8", "--seen-steady", "-5G"], "--seen-steady"),
])
def test_refusals(tmp_path: Path, args: list[str], says: str) -> None:
    proc = cli(["estimate", *args], tmp_path)
    assert proc.exit_code == 2 and says in proc.output and len(proc.output.strip().splitlines()) == 1, proc.output


def test_every_suggested_change_runs_as_printed(tmp_path: Path) -> None:
    """A GPU node's "fewer ranks" was printed as --ranks-per-node 3, refused when typed: each change now carries
    the command line for this target, and each runs (exit 0) and reaches the peak it promised."""
    args = [*SEVENTY, "--no-zero-init"]
    got = as_json(args, tmp_path)
    assert got["changes"], got["answer"]
    fewer = [c for c in got["changes"] if "per node" in c["change"]]
    assert fewer and all("--gpus-per-node" in c["command"] and "--ranks-per-node" not in c["command"]
                         for c in fewer)
    for c in got["changes"]:
        words = shlex.split(c["command"])
        assert words[:2] == ["rssprobe", "estimate"]
        ran = as_json(words[1:], tmp_path)
        assert ran["provision"]["bytes"] == pytest.approx(c["peak_upper_bytes"], rel=1e-9), c["command"]
    assert got["changes"][0]["command"] in " ".join(got["answer"])


def test_a_device_loading_jobs_zero3_change_loads_as_trainers_do_at_zero3(tmp_path: Path) -> None:
    """ms-swift loads onto the GPU below ZeRO-3 and under zero.Init at ZeRO-3 (no device_map there): the ZeRO-3
    change for a --load-onto device job is that job, --load-onto replaced (not repeated), and it runs as printed
    reaching the peak it promised."""
    args = ["estimate", "--hf-config", str(Path(__file__).resolve().parent.parent / "reports" / "estimate" / "field"
                                          / "qwen2.5-32b" / "config.json"),
            "--gpus-per-node", "4", "--stage", "2", "--no-offload-optimizer", "--load-onto", "device",
            "--node-ram", "256G"]
    got = as_json(args, tmp_path)
    [z3] = [c for c in got["changes"] if c["change"] == "ZeRO-3"]
    words = shlex.split(z3["command"])
    assert words.count("--load-onto") == 1 and words[words.index("--load-onto") + 1] == "host"
    assert "--zero-init" in words and "--no-zero-init" not in words
    ran = as_json(words[1:], tmp_path)
    assert ran["provision"]["bytes"] == pytest.approx(z3["peak_upper_bytes"], rel=1e-9)
    assert "under zero.Init" in ran["answer"][0]


def test_command_replaces_what_a_change_gives() -> None:
    from rssprobe.workflows.estimate import job as estimate_job

    argv = ["estimate", "--model", "m", "--gpus-per-node=8", "--no-zero-init", "--stage", "2"]
    assert estimate_job.command(argv, ["--gpus-per-node", "3"]) == \
        "rssprobe estimate --model m --no-zero-init --stage 2 --gpus-per-node 3"
    assert estimate_job.command(argv, ["--zero-init", "--stage", "3", "--no-offload-param"]) == \
        "rssprobe estimate --model m --gpus-per-node=8 --zero-init --stage 3 --no-offload-param"


def _rows(**verdicts: str) -> list[dict[str, Any]]:
    out = []
    for label, key in estimate.PHASES:
        v = verdicts.get(key)
        out.append({"phase": label, "key": key, "measured": False, "why": "not estimated"} if v is None else
                   {"phase": label, "key": key, "measured": True, "bytes": 90 * GIB if v == "does not fit" else
                    50 * GIB, "upper_bytes": 120 * GIB if v != "fits" else 60 * GIB, "interval": True,
                    "verdict": v})
    return out


def test_the_answers_verdict_word_is_each_phases() -> None:
    """The table says "may not fit" for the step peak and "does not fit" for initialize: the answer says each,
    not "does not fit" for both."""
    rows = _rows(initialize_peak="does not fit", steady="fits", step_peak="may not fit",
                 checkpoint_load="fits", checkpoint_save="fits")
    node = {"peak_rss_bytes": 90 * GIB}
    [first] = provision.answer("m", node, rows, provision.provision(rows), 80 * GIB, "--node-ram", [])
    assert "does not fit during initialize (short by" in first and "may not fit during step peak (short by" in first
    assert "fits during checkpoint load, steady and checkpoint save" in first


def test_a_phase_not_estimated_is_named_first_and_never_fits() -> None:
    """ms-swift #6473's shape of answer: every measured phase fits, the load and the save are n/a: the first
    sentence says so and how to measure them, never "it fits" alone."""
    rows = _rows(initialize_peak="fits", steady="fits", step_peak="fits")
    [first] = provision.answer("m", {"peak_rss_bytes": 50 * GIB}, rows, provision.provision(rows), 80 * GIB,
                               "--node-ram", [], "run X to measure")
    assert "fits in 80.0 GiB (--node-ram) during initialize, steady and step peak; the checkpoint load, " \
           "checkpoint save and final model save are not estimated: run X to measure" in first


def test_the_measure_hint_names_a_scenario_that_takes_its_sets() -> None:
    """The scale command the hint prints validates as a scenario (its --set words apply to it)."""
    from rssprobe.config.scenariospec import ScenarioSpec
    from rssprobe.workflows.estimate import job as estimate_job

    rows = [{"key": "checkpoint_load", "measured": False}, {"key": "checkpoint_save", "measured": False}]
    hint = estimate_job.measure_hint("cuda", rows, True, ["rssprobe", "estimate"])
    assert hint is not None
    words = shlex.split(hint.split("run ", 1)[1].split(" on a GPU", 1)[0])
    sets = tuple(words[i + 1] for i, w in enumerate(words) if w == "--set")
    scen = ScenarioSpec(words[2], sets, params=20e6).load()
    assert scen.model.load == "checkpoint" and scen.checkpoint is not None and scen.checkpoint.every == 6
    assert partition  # the module is the one the estimate partitions with
