"""The save phase (issue 42 item 6, issue 41's save-phase known answer): every save a measured phase of its own.

Known answers at tiny size (4,198,400 params, bf16, CPU optimizer offload):

* The consolidated 16-bit model as HF Trainer's save_model gets it under DeepSpeed below ZeRO-3 (accelerate's
  get_state_dict: deepspeed.checkpoint.utils.clone_tensors_for_torch_save of the module's state dict, called by
  save_model on EVERY rank, before its _save returns early on the ranks that do not write) holds the whole
  model's bf16 bytes, 2 B/param, on every rank: the state dict's storages are exactly 2 x P bytes, and each rank's
  exact peak (VmHWM) above its pre-save RSS is at least that, less the noise of the two RSS reads it is made of
  (tests/noise.py). At ZeRO-3 (_zero3_consolidated_16bit_state_dict) rank 0 alone holds 2 x P and the other
  ranks' state dict is empty: the node holds 2 B/param where ZeRO-2's holds 2 x ranks (ms-swift #8193: ZeRO-3
  saves with less host RAM than ZeRO-2, reproduced small: the slow test below).
* DeepSpeed's save_checkpoint builds no consolidated state dict: each rank serializes its optimizer partition
  (fp32 master and Adam's states) from the tensors it holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rssprobe.analysis import metrics, saves
from rssprobe.config import scenario
from rssprobe.contract.events import event_problem
from rssprobe.contract.files import SAVE_AT_END
from rssprobe.errors import UserError

from .conftest import STEADY_GLIBC, rssprobe, summary
from .noise import bound

P = 4 * (1024 * 1024 + 1024)  # tiny: 4 x Linear(1024, 1024), weights and biases
BF16 = 2
SAVES = ["--set", 'save.at_end=["model_16bit", "checkpoint"]']


def _events(run: Path, rank: int) -> list[dict[str, Any]]:
    name = "events.jsonl" if rank == 0 else f"events.rank{rank}.jsonl"
    return [json.loads(line) for line in (run / name).read_text().splitlines() if line.strip()]


def _saves(run: Path, rank: int) -> dict[str, dict[str, Any]]:
    return {e["save"]: e for e in _events(run, rank) if e["event"] == "save"}


# ---- without a worker: the figures from events, the registry, the scenario option ------------------------
def _save(kind: str, step: int, entry: int, peak: int, rss: int, held: int | None = None) -> dict[str, Any]:
    parts = {} if held is None and kind != "model_16bit" else {
        "clone_tensors_for_torch_save": {"calls": 1, "retained": 0, "peak": peak, "time_s": 0.1,
                                         "state_dict_bytes": held}}
    return {"event": "save", "save": kind, "step": step, "time_s": 1.0, "entry_rss": entry, "peak": peak, "rss": rss,
            "parts": parts, "state_dict_bytes": held, "sites": {}, "mallinfo": None}


def test_save_figures_per_kind_are_above_the_pre_save_rss_and_the_final_save_is_the_one_after_the_last_step() -> None:
    events = [{"event": "step", "step": 1}, _save("save_checkpoint", 1, 100, 150, 110),
              {"event": "step", "step": 2}, _save("model_16bit", 2, 200, 400, 210, held=180),
              _save("save_checkpoint", 2, 210, 230, 210)]
    got = saves.summarize(events, baseline=50, params=10)
    assert got is not None
    assert got["model_16bit"]["peak"] == 20 and got["model_16bit"]["peak_rss"] == 35
    assert got["model_16bit"]["state_dict"] == 18 and got["model_16bit"]["retained"] == 1
    assert got["save_checkpoint"]["occurrences"] == 2 and got["save_checkpoint"]["peak"] == 5  # max of 5 and 2
    assert got["save_checkpoint"]["state_dict"] is None  # nothing consolidated: not a 0 as if measured
    assert got["final"]["kinds"] == ["model_16bit", "save_checkpoint"] and got["final"]["peak"] == 20
    figures = metrics.registered(saves.metrics(got))  # every name declared in the registry
    assert figures["save.final.peak"] == 20 and "save.save_checkpoint.state_dict" not in figures
    assert metrics.group("save.model_16bit.peak") == "saves" and metrics.metric("save.x.state_dict").exact


def test_a_rank_whose_consolidation_returned_nothing_holds_zero_and_the_node_sums_the_ranks() -> None:
    rank1 = saves.summarize([_save("model_16bit", 1, 100, 120, 100, held=None)], 0, 10)
    assert rank1 is not None and rank1["model_16bit"]["state_dict"] == 0
    rank0 = saves.summarize([_save("model_16bit", 1, 100, 300, 100, held=180)], 0, 10)
    node = saves.node([saves.metrics(rank0), saves.metrics(rank1)])
    assert node["node.save.model_16bit.state_dict"] == 18 and node["node.save.model_16bit.peak"] == 22
    assert metrics.group("node.save.model_16bit.peak") == "saves"
    assert "save.model_16bit.peak" in metrics.known(scenario.load("tiny", ['save.at_end=["model_16bit"]']))
    assert "save.trainer_save_model.peak" in metrics.known(None)


def test_what_the_collector_frees_after_a_scenario_save_is_a_figure_of_its_own() -> None:
    """A scenario's save is followed by gc.collect(): what it frees is `collected`, part of `retained` (a state
    dict a reference cycle kept alive); a user's own save is left to the collector: n/a, never 0 as if measured."""
    collected = {**_save("model_16bit", 2, 200, 400, 222, held=180), "collected": {"objects": 9, "rss": 20,
                                                                                    "inuse": 18}}
    got = saves.summarize([collected], baseline=50, params=10)
    assert got is not None and got["model_16bit"]["collected"] == 2 and got["model_16bit"]["retained"] == 2.2
    user = saves.summarize([_save("trainer_save_model", 2, 200, 400, 210, held=180)], 50, 10)
    assert user is not None and user["trainer_save_model"]["collected"] is None
    assert metrics.registered(saves.metrics(got))["save.model_16bit.collected"] == 2
    assert "save.model_16bit.collected" in metrics.known(scenario.load("tiny", ['save.at_end=["model_16bit"]']))
    assert "save.trainer_save_model.collected" not in metrics.known(None)


def test_the_scenario_save_option_checks_its_kinds_and_is_for_scenarios_only() -> None:
    assert scenario.load("tiny", ["save.keep=false"]).save.at_end == list(SAVE_AT_END)
    with pytest.raises(UserError, match=r"save\.at_end"):
        scenario.load("tiny", ['save.at_end=["everything"]'])
    event = _save("model_16bit", 1, 1, 2, 1, held=4)
    assert event_problem({**event, "rss": 1.0}) is None
    assert "without 'parts'" in (event_problem({k: v for k, v in event.items() if k != "parts"}) or "")


# ---- real runs ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def zero2(runs_dir: Path) -> Path:
    """tiny at ZeRO-2, 2 ranks, 2 steps, then the Trainer's consolidated 16-bit save and DeepSpeed's checkpoint.
    glibc's mmap threshold fixed (64 KiB): each cloned tensor gets pages of its own, so the clone shows in RSS;
    under the dynamic threshold an 8 MiB clone is served from memory glibc kept free after the steps (RSS +0.00,
    glibc in use +2.00 B/param: both measured here, which is why `inuse` is recorded beside the peak)."""
    out = runs_dir / "save-zero2"
    rssprobe("run", "tiny", "--steps", "2", "--world-size", "2", *SAVES, *STEADY_GLIBC, "--out", str(out), check=True)
    return out


@pytest.mark.worker
def test_at_zero2_the_consolidated_16bit_save_holds_the_whole_bf16_model_on_every_rank(zero2: Path) -> None:
    noise = bound(2, P)  # a peak above the entry RSS: two reads
    for rank in (0, 1):
        save = _saves(zero2, rank)["model_16bit"]
        assert save["state_dict_bytes"] == BF16 * P  # exact: the clone's storages, every rank
        assert (save["peak"] - save["entry_rss"]) / P >= BF16 - noise, rank  # and resident at the save's top
        assert save["parts"]["clone_tensors_for_torch_save"]["inuse"] >= BF16 * P  # allocated, not a view


@pytest.mark.worker
def test_deepspeed_save_checkpoint_consolidates_nothing(zero2: Path) -> None:
    for rank in (0, 1):
        save = _saves(zero2, rank)["save_checkpoint"]
        assert save["state_dict_bytes"] is None and save["step"] == 2


@pytest.mark.worker
def test_show_has_the_save_phase_per_rank_and_the_node(zero2: Path) -> None:
    s = summary(zero2)
    m = s["metrics"]
    assert m["save.model_16bit.state_dict"] == BF16 and m["node.save.model_16bit.state_dict"] == 2 * BF16
    assert s["ranks"][1]["metrics"]["save.model_16bit.state_dict"] == BF16
    text = rssprobe("show", str(zero2)).stdout
    assert "The save phase" in text and "node (sum)" in text


@pytest.fixture(scope="module")
def zero3(runs_dir: Path) -> Path:
    out = runs_dir / "save-zero3"
    rssprobe("run", "tiny", "--steps", "2", "--world-size", "2", "--set", "zero.stage=3", *SAVES, *STEADY_GLIBC,
             "--out", str(out), check=True)
    return out


@pytest.mark.worker
@pytest.mark.slow
def test_zero3_saves_the_16bit_model_with_less_host_ram_than_zero2_ms_swift_8193(zero2: Path, zero3: Path) -> None:
    """ms-swift #8193 small: ZeRO-3 consolidates on rank 0 only, ZeRO-2 on every rank."""
    z3 = {rank: _saves(zero3, rank)["model_16bit"] for rank in (0, 1)}
    assert z3[0]["state_dict_bytes"] == BF16 * P and z3[1]["state_dict_bytes"] is None
    noise = bound(2, P)
    # rank 1 never holds the whole model: only the layer being gathered (here a quarter of the model: tiny has 4)
    assert (z3[1]["peak"] - z3[1]["entry_rss"]) / P < BF16 - noise
    two, three = summary(zero2)["metrics"], summary(zero3)["metrics"]
    assert two["node.save.model_16bit.state_dict"] == 2 * BF16 and three["node.save.model_16bit.state_dict"] == BF16
    # the node's save peak: each side the sum of two ranks' peaks, each two reads
    assert three["node.save.model_16bit.peak"] < two["node.save.model_16bit.peak"] - 4 * noise
    diff = rssprobe("diff", str(zero2), str(zero3), "--all").stdout  # every figure, the save phase's table among them
    assert "The save phase" in diff and "save.model_16bit.peak" in diff


@pytest.mark.worker
@pytest.mark.slow
def test_zero3_consolidation_keeps_its_state_dict_alive_until_the_garbage_collector_runs(zero3: Path) -> None:
    """Issue 42: rank 0 kept +2.18 B/param of RSS after the scenario's ZeRO-3 16-bit save, all of it glibc bytes in
    use (not glibc retention). What holds it: DeepSpeed's _zero3_consolidated_16bit_state_dict builds the state dict
    in a recursive nested function whose closure refers to itself and to the dict, a reference cycle, so the dict
    outlives the call (rssprobe's own `del` drops the last other reference) until Python's collector runs. The
    collection right after the save frees at least the state dict's storages (2 x P bytes of glibc in use) and
    the RSS it kept, less the noise of two RSS reads (tests/noise.py)."""
    save = _saves(zero3, 0)["model_16bit"]
    noise = bound(2, P)
    assert (save["rss"] - save["entry_rss"]) / P >= BF16 - noise  # kept after the call returned
    assert save["collected"]["inuse"] >= BF16 * P and save["collected"]["objects"] > 0
    assert save["collected"]["rss"] / P >= BF16 - noise
    other = _saves(zero3, 1)["model_16bit"]  # rank 1 built no state dict: nothing of the model to free
    assert other["collected"]["inuse"] < BF16 * P / 4


# ---- the Trainer's own saves (slow: a Trainer job per stage) ----------------------------------------------
TRAINER = Path(__file__).resolve().parent / "data" / "scripts" / "train_trainer_save.py"


def _trainer(runs_dir: Path, stage: int) -> Path:
    out = runs_dir / f"save-trainer-zero{stage}"
    rssprobe("run", "--script", str(TRAINER), "--world-size", "2", *STEADY_GLIBC, "--out", str(out), "--",
             "--out", str(out / "trainer-output"), "--stage", str(stage), check=True)
    return out


@pytest.fixture(scope="module")
def trainer2(runs_dir: Path) -> Path:
    return _trainer(runs_dir, 2)


@pytest.fixture(scope="module")
def trainer3(runs_dir: Path) -> Path:
    return _trainer(runs_dir, 3)


@pytest.mark.worker
@pytest.mark.slow
def test_the_trainers_checkpoint_and_final_save_are_save_phases_whole_model_on_every_rank_at_zero2(
        trainer2: Path, trainer3: Path) -> None:
    """Trainer.save_model under DeepSpeed below ZeRO-3 consolidates on every rank (accelerate's get_state_dict runs
    before _save returns on the ranks that do not write); at ZeRO-3 on rank 0 only."""
    for run, holders in ((trainer2, (0, 1)), (trainer3, (0,))):
        s = summary(run)
        params = s["params"]
        for rank in (0, 1):
            got = _saves(run, rank)
            assert set(got) == {"trainer_checkpoint", "trainer_save_model"}
            assert {"Trainer.save_model", "save_checkpoint"} <= set(got["trainer_checkpoint"]["parts"])
            for kind in got:
                held = got[kind]["state_dict_bytes"]
                assert held == (BF16 * params if rank in holders else None), (run.name, rank, kind)
        node = s["metrics"]["node.save.trainer_save_model.state_dict"]
        assert node == BF16 * len(holders)  # exact: storages
        text = rssprobe("show", str(run)).stdout
        assert "Trainer save_model" in text and "the final save" in text
    diff = rssprobe("diff", str(trainer2), str(trainer3), "--all").stdout
    assert "node.save.trainer_save_model.state_dict" in diff
