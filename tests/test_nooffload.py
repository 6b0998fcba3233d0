"""A GPU job with nothing offloaded (`estimate --no-offload-optimizer`, ms-swift #8193: ZeRO-2, 4 GPUs, "CPU memory
stable at about 60GB" in training, 250GB+ at the model save). The optimizer's states, gradients and ZeRO's buffers
live on the device, so host RAM holds the pre-model baseline and each process's fixed cost (the steady line's
intercept), the checkpoint load, and the saves: below ZeRO-3 the Trainer's consolidated 16-bit state dict is cloned
to the host on every rank.

Known answers at tiny size (32 layers of 4096 x 4096, 4 ranks, ZeRO-2, the packaged H200 calibration and the
packaged save/load calibration): no host buffers and no pinned slack; steady and the step peak are the steady
line's intercept (exact arithmetic on the fit); the final save is steady + 2 B/param x params on every rank, plus
the writer's transient once; the node is ranks x the rank (the writer's transient once); save_checkpoint adds the
largest flat fp32 partition per rank; the load is the same as with the optimizer offloaded. All arithmetic: exact
comparisons (floating sums of the same terms: a relative 1e-12), no noise to allow for.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from rssprobe.analysis import calibration, estimate, partition, savephase
from rssprobe.analysis.estimate import Target
from rssprobe.analysis.partition import Zero
from rssprobe.analysis.term import fitted
from rssprobe.config import modelshape

from .test_estimate_job import as_json, cli

BF16, RANKS = 2, 4
SHAPE = modelshape.linear(32, 4096, 1)
FIELD = "reports/estimate/field/qwen2.5-32b/config.json"


@pytest.fixture(scope="module")
def h200() -> calibration.Calibration:
    cal = calibration.load(calibration.packaged("h200-default"), {})
    cal.phases = savephase.load()
    return cal


def _target(cal: calibration.Calibration, on_device: bool, stage: int = 2) -> Target:
    return Target(SHAPE, Zero(stage, RANKS, BF16, accelerator="cuda"), RANKS, 1, cal.points[0].rule,
                  optimizer_on_device=on_device)


def test_nothing_offloaded_holds_no_optimizer_in_host_ram(h200: calibration.Calibration) -> None:
    """Steady and the step peak are the steady line's intercept (baseline + fixed cost) per rank; no buffers."""
    f = estimate.fits(h200.points, estimate.calibration_steps(_target(h200, True), h200))
    one, node = estimate.terms(_target(h200, True), h200, 1), estimate.terms(_target(h200, True), h200, RANKS)
    offloaded = estimate.terms(_target(h200, False), h200, 1)
    assert estimate.host_roles(_target(h200, True), "step") == {} and one["live"].value == 0
    assert one["pinned_slack"].value == 0 and offloaded["live"].value > 0
    assert one["steady"].value == pytest.approx(f["steady"].intercept, rel=1e-12)
    assert one["step_peak"] == one["steady"] == one["initialize_state"]
    assert node["steady"].value == pytest.approx(RANKS * f["steady"].intercept, rel=1e-12)
    assert offloaded["steady"].value > one["steady"].value
    # the load is host-side and does not depend on where the optimizer lives
    assert one["checkpoint_load"] == offloaded["checkpoint_load"]


def test_zero2_final_save_is_steady_plus_the_16bit_model_on_every_rank(h200: calibration.Calibration) -> None:
    """ZeRO-2's consolidated save clones 2 B/param x params to the host on every rank; the node is ranks x that."""
    target = _target(h200, True)
    one, node = estimate.terms(target, h200, 1), estimate.terms(target, h200, RANKS)
    # the writer's transient (rank 0 alone): the save/load calibration's line at the model's parameters
    write = fitted(savephase.fits(h200.phases)["model_save"], SHAPE.params, 1, 0.0).value
    held = BF16 * SHAPE.params
    assert one["model_save_state_dict"].value == held
    assert node["model_save_state_dict"].value == RANKS * held
    assert one["model_save"].value == pytest.approx(one["steady"].value + held + write, rel=1e-12)
    assert node["model_save"].value == pytest.approx(RANKS * (one["steady"].value + held) + write, rel=1e-12)
    assert node["peak"].value >= node["model_save"].value


def test_save_checkpoint_copies_the_largest_flat_partition(h200: calibration.Calibration) -> None:
    """DeepSpeed's save_checkpoint: torch.save copies device tensors a storage at a time (predicted)."""
    target = _target(h200, True)
    one, node = estimate.terms(target, h200, 1), estimate.terms(target, h200, RANKS)
    flat = max(partition.group_partitions(SHAPE, target.zero)) * partition.FP32
    assert flat == SHAPE.params // RANKS * partition.FP32  # one param group, its rank's quarter in fp32
    assert one["checkpoint_save"].value == pytest.approx(one["steady"].value + flat, rel=1e-12)
    assert node["checkpoint_save"].value == pytest.approx(RANKS * (one["steady"].value + flat), rel=1e-12)
    z3 = replace(target, zero=replace(target.zero, stage=3))
    assert savephase.largest_flat_partition(SHAPE, z3.zero) == \
        max(sum(g) for g in partition.sub_groups(SHAPE, z3.zero)) * partition.FP32


def test_a_gpu_job_with_nothing_offloaded_is_answered_and_says_so(tmp_path: Path) -> None:
    """The refusal is gone for CUDA; the assumption and the predicted rule are printed."""
    got = as_json(["estimate", "--hf-config", FIELD, "--gpus-per-node", "4", "--stage", "2",
                   "--no-offload-optimizer", "--node-ram", "256G"], tmp_path)
    assert got["node"]["live_bytes"] == 0 and got["node"]["roles"] == {}
    assert any(a.startswith("optimizer states on the device, parameters on the device") for a in got["assumptions"])
    assert got["predicted_terms"]["optimizer_on_device"].startswith(
        "the optimizer on the device: no host buffers; steady = baseline + fixed cost")
    rows = {r["key"]: r for r in got["phases"]}
    params = got["target"]["params"]
    assert rows["model_save"]["measured"] and got["node"]["model_save_state_dict_bytes"] == 4 * 2 * params
    shown = cli(["estimate", "--hf-config", FIELD, "--gpus-per-node", "4", "--stage", "2", "--no-offload-optimizer",
                 "--node-ram", "256G"], tmp_path)
    assert shown.exit_code == 0
    assert "predicted: optimizer on device: the optimizer on the device: no host buffers" in shown.output


@pytest.mark.parametrize(("args", "says"), [
    (["--ranks-per-node", "2", "--accelerator", "cpu"], "on the CPU accelerator the optimizer is in host RAM anyway"),
    (["--gpus-per-node", "4", "--stage", "3", "--offload-param"], "add --no-offload-param"),
])
def test_nothing_offloaded_is_refused_where_it_means_nothing(tmp_path: Path, args: list[str], says: str) -> None:
    proc = cli(["estimate", "--hf-config", FIELD, *args, "--no-offload-optimizer"], tmp_path)
    assert proc.exit_code == 2 and len(proc.output.strip().splitlines()) == 1 and says in proc.output


def test_zero3_without_offload_param_by_default_when_nothing_is_offloaded(tmp_path: Path) -> None:
    """--stage 3 offloads the parameters by default only when the optimizer is offloaded too."""
    got = as_json(["estimate", "--hf-config", FIELD, "--gpus-per-node", "4", "--stage", "3",
                   "--no-offload-optimizer"], tmp_path)
    assert got["target"]["offload_param"] is False and got["node"]["live_bytes"] == 0
