"""The job's final save as its config makes it (`estimate --final-save`, config/trainerjob.py): HF Trainer's
save_model gets the consolidated 16-bit model (model16, the default), but at ZeRO-3 with
stage3_gather_16bit_weights_on_model_save false (DeepSpeed's own default; DeepSpeed #3448's config) accelerate's
get_state_dict raises and save_model calls the engine's save_checkpoint instead (checkpoint); a job may save no
final model (none).

Known answers at tiny size (32 layers of 4096 x 4096, 8 ranks, ZeRO-3): with model16 the final-save row holds the
bf16 model once (rank 0 gathers it: 2 B/param x params, exact) above the steady figure; with checkpoint the row is
the checkpoint save's figure to the byte and no 16-bit state dict is counted; with none the row and its term are
gone and the peak is the larger of the others. All arithmetic: exact comparisons, no noise to allow for.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from rssprobe.analysis import calibration, estimate, provision, savephase
from rssprobe.analysis.estimate import Target
from rssprobe.analysis.partition import Zero
from rssprobe.config import modelshape, trainerjob
from rssprobe.errors import UserError

from .test_estimate_job import as_json

BF16 = 2


def _node(final_save: str) -> tuple[Target, dict[str, estimate.Term], list[dict]]:
    shape = modelshape.linear(32, 4096, 1)
    h200 = calibration.load(calibration.packaged("h200-default"), {})
    h200.phases = savephase.load()
    target = Target(shape, Zero(3, 8, BF16, accelerator="cuda", offload_param=True), 8, 1, h200.points[0].rule,
                    zero_init=True, final_save=final_save)
    got = estimate.terms(target, h200, 8)
    node = estimate.view(got, estimate.live(shape, target.zero, "step"), 8)
    return target, got, savephase.final_rows(provision.phases(node, None), target)


def test_the_final_save_row_follows_the_option_as_the_rule_says() -> None:
    target, m16, rows16 = _node("model16")
    params = target.shape.params
    assert m16["model_save_state_dict"].value == BF16 * params  # ZeRO-3: rank 0 alone gathers the bf16 model
    assert m16["model_save"].value >= m16["steady"].value + BF16 * params  # plus the writer's transient (>= 0)
    _, ck, rows_ck = _node("checkpoint")
    assert ck["model_save"] == ck["checkpoint_save"] and "model_save_state_dict" not in ck
    [row] = [r for r in rows_ck if r["key"] == "model_save"]
    assert row["phase"] == "final save (save_checkpoint)" and row["bytes"] == ck["checkpoint_save"].value
    _, none, rows_none = _node("none")
    assert "model_save" not in none and "model_save" not in {r["key"] for r in rows_none}
    assert all(r["measured"] for r in rows_none)  # no row says "not estimated": the job has no such phase
    assert none["peak"].value == max(none[k].value for k in ("step_peak", "initialize_peak", "checkpoint_load",
                                                              "checkpoint_save"))
    # the same steps either way: only the final save changes
    assert m16["steady"] == ck["steady"] == none["steady"]
    assert [r["key"] for r in rows16] == [r["key"] for r in rows_ck]


def test_the_default_is_the_16bit_model_and_a_bad_value_is_one_line() -> None:
    job = trainerjob.resolve(None, None, None, 3, "transformers", 1000)
    assert job.final_save == "model16" and not job.final_save_given
    line = job.assumptions(3, True, True, "transformers")[-1]
    assert "stage3_gather_16bit_weights_on_model_save true" in line and "--final-save checkpoint" in line
    given = trainerjob.resolve(None, None, None, 3, "transformers", 1000, "checkpoint")
    assert "save_checkpoint" in given.assumptions(3, True, True, "transformers")[-1]
    with pytest.raises(UserError, match="--final-save gathered: one of model16, checkpoint, none"):
        trainerjob.resolve(None, None, None, 3, "transformers", 1000, "gathered")


def test_the_answer_with_the_final_save_a_checkpoint(tmp_path: Path) -> None:
    """DeepSpeed #3448's config (stage3_gather_16bit_weights_on_model_save false) as typed: the final-save row is
    the checkpoint save's figure, named so, and the assumptions say it with the option for the other."""
    got = as_json(["estimate", "--model", "qwen3-30b-a3b", "--gpus-per-node", "8", "--stage", "3", "--node-ram",
                   "1.5T", "--final-save", "checkpoint"], tmp_path)
    rows = {r["key"]: r for r in got["phases"]}
    assert rows["model_save"]["phase"] == "final save (save_checkpoint)"
    assert rows["model_save"]["bytes"] == rows["checkpoint_save"]["bytes"]
    assert rows["model_save"]["from"] == rows["checkpoint_save"]["from"]
    assert "model_save_state_dict_bytes" not in got["node"] and got["save_load"]["holders"] == 0
    assert any(a.startswith("the final save: DeepSpeed's save_checkpoint (stage3_gather_16bit_weights_on_model_save "
                            "false") and "--final-save model16" in a for a in got["assumptions"])


def test_an_optimizer_set_off_the_host_is_refused_naming_the_option(tmp_path: Path) -> None:
    """The scenario's zero.offload_optimizer takes only "cpu": the one line names --no-offload-optimizer."""
    from .test_estimate_job import cli

    proc = cli(["estimate", "--model", "qwen3-30b-a3b", "--gpus-per-node", "4", "--stage", "2", "--set",
                'zero.offload_optimizer="none"'], tmp_path)
    assert proc.exit_code == 2 and len(proc.output.strip().splitlines()) == 1
    assert "--no-offload-optimizer" in proc.output


def test_replace_keeps_the_final_save() -> None:
    """What-ifs (provision.changes, the other way of zero.Init) keep the job's final save."""
    target, _, _ = _node("checkpoint")
    assert replace(target, zero_init=False).final_save == "checkpoint"
