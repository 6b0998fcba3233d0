"""The load and the saves estimated for every target, GPU targets included (issue 41 item 3): analysis/savephase.py
and the packaged CPU save/load calibration (rssprobe/data/calibrations/cpu-save-load.json, reports/save-load-cpu).

Known answer at tiny size: a consolidated 16-bit save holds the model's bf16 bytes once on the writing rank. The
estimate's state-dict term is exactly 2 B/param x params on each rank that holds it (every rank below ZeRO-3, rank 0
at ZeRO-3), and against a real tiny run's measured save phase (1 rank, 4,198,400 params, glibc's mmap threshold
fixed as the calibration's was) it is the measured state dict to the byte, and the estimate's whole addition (state
dict + the writing rank's fitted transient) holds the measured peak above the save's entry within the fit's 95%
interval widened by the two RSS reads the measured figure is made of (tests/noise.py: 2 x 256 KiB here). Measured
when written: peak above entry 8,945,664 B = state dict 8,396,800 + 548,864; the fit says +594,000 (+-~40,000).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rssprobe.analysis import estimate, savephase
from rssprobe.analysis.estimate import Target, Term
from rssprobe.analysis.partition import Zero
from rssprobe.analysis.pinrule import Rule
from rssprobe.config import modelshape, scenario
from rssprobe.errors import UserError

from . import noise
from .conftest import STEADY_GLIBC, rssprobe

BF16 = 2


def _target(stage: int = 2, ranks: int = 8, accelerator: str = "cuda", layers: int = 32, zero_init: bool = False,
            load_bytes: int = 2) -> Target:
    shape = modelshape.linear(layers, 4096, 1)
    return Target(shape, Zero(stage, ranks, BF16, accelerator=accelerator), ranks, 1, Rule.of("2.13.0", None),
                  zero_init=zero_init, load_bytes=load_bytes)


def _terms(target: Target, k: int) -> dict[str, Term]:
    return savephase.terms(target, savephase.load(), k, Term.exact(0.0), 0.0)


# ---- no worker: the packaged calibration and the arithmetic ------------------------------------------------------
def test_the_packaged_save_load_calibration_measured_the_consolidated_state_dict_as_the_shapes_say() -> None:
    """Every packaged run's consolidated state dict is its model's bf16 bytes to the byte (storages, exact), and
    its save's peak above entry is that within two RSS reads plus the write transient (under 0.03 B/param)."""
    ph = savephase.load()
    assert len({p.params for p in ph.points}) == 3 and ph.malloc_env == {"MALLOC_MMAP_THRESHOLD_": "65536"}
    for p in ph.points:
        assert p.state_dict == BF16 * p.params and p.load_bytes == BF16
    for p in (p for p in ph.points if not p.zero_init):  # the saves are fitted on these (1 rank, ZeRO-2)
        assert abs(p.model_16bit - p.state_dict) / p.params <= 0.03 + noise.bound(2, p.params)
    assert all(fit.dof == 4 for fit in savephase.fits(ph).values())


def test_under_zero_init_rank_0_alone_holds_the_checkpoint_it_reads() -> None:
    """The zero.Init load's known answer (transformers' _load_state_dict_into_zero3_model: rank 0 reads every
    shard, the other ranks take meta tensors): less each rank's partition (exact), what grows with the model on
    rank 0 is the whole checkpoint's bf16 bytes more than on the others. The two slopes differ by 2 B/param within
    their 95% intervals combined (each slope's standard error from its fit's pooled residuals)."""
    import math

    from rssprobe.analysis import stats

    ph = savephase.load()
    zi = [p for p in ph.points if p.zero_init]
    assert len(zi) == 6 and {p.ranks for p in zi} == {2} and all(2 * p.partition >= p.params for p in zi)
    assert all(p.load_partition_bytes == BF16 * p.partition for p in zi)  # the load event's partition: exact
    f = savephase.fits(ph)
    first, other = f["checkpoint_load_zero_init"], f["checkpoint_load_zero_init_other"]

    def se(fit: stats.ProportionalFit) -> float:  # v = y/x on u = 1/x: the slope of y is v's intercept
        return fit.s * math.sqrt(1 / fit.n + fit.u_mean ** 2 / fit.suu)

    t = stats.t_quantile(first.dof)
    assert t is not None
    assert abs(first.slope - other.slope - BF16) <= t * math.hypot(se(first), se(other)), (first, other)


@pytest.mark.parametrize("stage,holders", [(1, 8), (2, 8), (3, 1)])
def test_the_consolidated_save_holds_the_bf16_model_once_per_holding_rank(stage: int, holders: int) -> None:
    """Below ZeRO-3 every rank clones the whole 16-bit model (accelerate's get_state_dict); at ZeRO-3 rank 0
    alone gathers it. One rank's figure is 2 B/param x params; the node's that times its holders."""
    target = _target(stage)
    params = target.shape.params
    assert _terms(target, 1)["model_save_state_dict"].value == BF16 * params
    assert _terms(target, 8)["model_save_state_dict"].value == holders * BF16 * params
    # the node's final save: the steady RSS plus every holder's state dict plus the writer's transient (>= 0)
    got = _terms(target, 8)
    assert got["model_save"].value >= holders * BF16 * params


def test_the_load_is_the_whole_model_per_rank_or_its_partition_under_zero_init_and_every_rank_at_once() -> None:
    """Without zero.Init every rank loads the whole model (the node: 8 times one rank); under zero.Init rank 0's
    measured line plus 7 times the other ranks', each with its partition's bytes in host memory (the parameters
    offloaded), exactly so; with the parameters on the GPU the partitions are there, not in host RAM."""
    whole = _target(3)
    part = replace(_target(3, zero_init=True), zero=Zero(3, 8, BF16, accelerator="cuda", offload_param=True))
    one, node = _terms(whole, 1)["checkpoint_load"], _terms(whole, 8)["checkpoint_load"]
    assert node.value == pytest.approx(8 * one.value, rel=1e-12)  # every rank at its load peak at once
    f = savephase.fits(savephase.load())
    params = part.shape.params
    from rssprobe.analysis import partition

    share = partition.partition_params(part.shape, part.zero) * BF16
    expected = (f["checkpoint_load_zero_init"].mean(params) + 7 * f["checkpoint_load_zero_init_other"].mean(params)
                + 8 * share)
    assert _terms(part, 8)["checkpoint_load"].value == pytest.approx(expected, rel=1e-9)
    assert _terms(part, 1)["checkpoint_load"].value == pytest.approx(
        f["checkpoint_load_zero_init"].mean(params) + share, rel=1e-9)  # one rank: rank 0's line alone
    fp32 = _terms(_target(3, load_bytes=4), 1)["checkpoint_load"].value
    assert fp32 > 1.9 * one.value  # the same line at twice the bytes (its intercept once)
    on_device = replace(part, zero=replace(part.zero, offload_param=False))
    assert partition.partition_params(on_device.shape, on_device.zero) * BF16 == share
    assert _terms(part, 8)["checkpoint_load"].value - _terms(on_device, 8)["checkpoint_load"].value == \
        pytest.approx(8 * share, rel=1e-9)


def test_the_zero_init_load_at_4_ranks_is_held_out_and_within_its_interval(tmp_path: Path) -> None:
    """Calibrated at 2 ranks, checked at 4: reports/save-load-cpu/runs.tar.gz's heldout-z3-4r (llama-small with 8
    layers, ZeRO-3, 4 CPU ranks, loaded under zero.Init) measured its 4 ranks' load peaks above their baselines;
    the estimate of that node (rank 0's line, 3 times the others', each partition exact) holds the sum within its
    95% interval widened by the 8 RSS reads the sum is made of (tests/noise.py). Measured when written:
    320,856,064 B against 321,628,469 [319,959,809, 323,297,128] (+0.24%)."""
    import tarfile

    from rssprobe.analysis import partition
    from rssprobe.config.scenariospec import ScenarioSpec

    with tarfile.open(Path(__file__).resolve().parent.parent / "reports" / "save-load-cpu" / "runs.tar.gz") as tar:
        tar.extractall(tmp_path, members=[m for m in tar.getmembers() if m.name.startswith("heldout-z3-4r/")],
                       filter="data")
    run = tmp_path / "heldout-z3-4r"
    above, loads = 0, []
    for rank in range(4):
        events = [json.loads(line) for line in
                  (run / ("events.jsonl" if rank == 0 else f"events.rank{rank}.jsonl")).read_text().splitlines()]
        base = next(e["rss"] for e in events if e["event"] == "phase" and e["name"] == "pre_model")
        [load] = [e for e in events if e["event"] == "load"]
        assert load["zero_init"] and load["holds"] == "partition"
        above += load["peak"] - base
        loads.append(load)
    scen = ScenarioSpec("llama-small", ("model.hf.num_hidden_layers=8", "zero.stage=3")).load()
    shape = modelshape.of(scen, scen.name)
    zero = Zero(3, 4, BF16, accelerator="cpu")
    assert shape.params == loads[0]["params"]
    assert all(ld["partition_bytes"] == BF16 * partition.partition_params(shape, zero) for ld in loads)  # exact
    target = Target(shape, zero, 4, 1, Rule.of("2.13.0", None), zero_init=True, load_bytes=BF16)
    got = _terms(target, 4)["checkpoint_load"]
    assert got.low is not None and got.high is not None
    reads = 8 * noise.READ_ERROR
    assert got.low - reads <= above <= got.high + reads, (above, got)


def test_a_format_1_save_load_calibration_still_reads(tmp_path: Path) -> None:
    """Format 2 added the zero.Init load's fields; a format-1 file (none of them) reads as whole-model loads."""
    data = savephase.pack(savephase.load())
    data["format"] = 1
    data["points"] = [{k: v for k, v in p.items() if k not in ("ranks", "zero_init", "load_partition_bytes",
                                                               "other_baseline", "other_load_peak")}
                      for p in data["points"] if not p["zero_init"]]
    old = tmp_path / "v1.json"
    old.write_text(savephase.dumps(data))
    got = savephase.load(old)
    assert len(got.points) == 6 and not any(p.zero_init for p in got.points)
    assert savephase.load().read_sd == 2 * 32 * 4096 / 3 ** 0.5  # the sweep's 2 CPUs; format 1 said none: 0
    assert got.read_sd == 2 * 32 * 4096 / 3 ** 0.5
    del data["read_sd"]
    old.write_text(savephase.dumps(data))
    assert savephase.load(old).read_sd == 0.0
    assert "checkpoint_load_zero_init" not in savephase.fits(got)


def test_on_cuda_the_checkpoint_save_adds_rank_0s_device_to_host_copy_of_one_tensor() -> None:
    cuda, cpu = _target(2), _target(2, accelerator="cpu")
    largest = cuda.shape.largest_tensor * BF16
    assert _terms(cuda, 1)["checkpoint_save"].value - _terms(cpu, 1)["checkpoint_save"].value == largest


def test_the_estimate_adds_the_phases_its_own_calibration_lacks() -> None:
    from rssprobe.analysis import calibration

    h200 = calibration.load(calibration.packaged("h200-default"), {})
    target = replace(_target(2, ranks=8), rule=h200.points[0].rule)
    without = estimate.terms(target, h200, 8)
    assert {"checkpoint_load", "checkpoint_save", "model_save"}.isdisjoint(without)
    h200.phases = savephase.load()
    got = estimate.terms(target, h200, 8)
    assert got["peak"].value == max(got[k].value for k in ("step_peak", "initialize_peak", "checkpoint_load",
                                                             "checkpoint_save", "model_save"))
    alone = savephase.terms(target, h200.phases, 8, Term.exact(0.0), 0.0)["model_save"]  # what the save adds
    assert got["model_save"].value == pytest.approx(got["steady"].value + alone.value, rel=1e-12)


def test_a_damaged_save_load_calibration_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"kind": savephase.PACKED, "format": 1, "points": [{"run": "r", "params": "many"}]}))
    with pytest.raises(UserError, match="damaged save/load calibration"):
        savephase.load(bad)
    bad.write_text("[]")
    with pytest.raises(UserError, match="not a packed save/load calibration"):
        savephase.load(bad)
    data = savephase.pack(savephase.load())
    data["points"][0]["baseline"] = -1  # a negative figure is no count
    bad.write_text(savephase.dumps(data))
    with pytest.raises(UserError, match="damaged save/load calibration"):
        savephase.load(bad)
    data = savephase.pack(savephase.load())
    bad.write_text(savephase.dumps({**data, "read_sd": "wide"}))  # the read's spread: a number of bytes
    with pytest.raises(UserError, match=r"damaged save/load calibration.*read_sd 'wide'"):
        savephase.load(bad)
    for p in data["points"]:
        p["ranks"] = 1  # a zero.Init point of one rank has no other ranks' line
    bad.write_text(savephase.dumps(data))
    with pytest.raises(UserError, match="needs 2 ranks or more"):
        savephase.load(bad)


def test_a_gpu_targets_answer_has_the_load_and_the_saves_with_their_labels(tmp_path: Path) -> None:
    """ms-swift #6473's job as typed: the packaged H200 sweep neither loads nor saves; the answer now has the load,
    DeepSpeed's checkpoint save and the final 16-bit save (8 ranks x 2 B/param, a device-to-host copy: predicted),
    each row saying where it comes from, and the first sentence names no phase as not estimated."""
    from .test_estimate_job import as_json

    got = as_json(["estimate", "--model", "qwen3-30b-a3b", "--gpus-per-node", "8", "--stage", "2", "--node-ram",
                   "1.5T"], tmp_path)
    params = got["target"]["params"]
    assert params == 30_532_122_624 and "not estimated" not in got["answer"][0]
    rows = {r["key"]: r for r in got["phases"]}
    assert all(rows[k]["measured"] for k in ("checkpoint_load", "checkpoint_save", "model_save"))
    assert rows["model_save"]["from"].startswith("predicted") and "device-to-host" in rows["model_save"]["from"]
    assert "same on CUDA" in rows["checkpoint_load"]["from"]
    assert got["node"]["model_save_state_dict_bytes"] == 8 * BF16 * params  # exact: the shapes
    assert "device-to-host" in got["predicted_terms"]["model_save_state_dict"]
    assert "CPU save/load calibration" in got["measured_terms"]["model_save_write"]
    assert got["save_load"]["holders"] == 8


# ---- a real tiny run: the known answer ---------------------------------------------------------------------------
@pytest.mark.worker
def test_the_estimates_consolidated_save_is_the_measured_one_at_tiny_size(runs_dir: Path) -> None:
    out = runs_dir / "savephase-tiny"
    rssprobe("run", "tiny", "--steps", "2", "--set", 'save.at_end=["model_16bit"]', *STEADY_GLIBC, "--out", str(out),
             check=True)
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines() if line.strip()]
    [save] = [e for e in events if e["event"] == "save"]
    shape = modelshape.of(scenario.load("tiny"), "tiny")
    params = shape.params
    target = Target(shape, Zero(2, 1, BF16, accelerator="cpu"), 1, 1, Rule.of("2.13.0", None))
    got: dict[str, Any] = _terms(target, 1)
    held = got["model_save_state_dict"].value
    assert held == BF16 * params == save["state_dict_bytes"]  # once, on the writing rank, to the byte
    write = got["model_save"] + Term(-held, -held, -held)  # the writer's fitted transient, with its interval
    measured = save["peak"] - save["entry_rss"]
    reads = 2 * noise.READ_ERROR
    assert held + write.low - reads <= measured <= held + write.high + reads, (held, write, measured)
