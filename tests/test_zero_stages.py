"""ZeRO stages 1 and 3: each stage's census adds up to what its own DeepSpeed code allocates, `show`
says which stage a run used, and ZeRO-3 counts the parameters it left gathered.

Two real tiny runs (4,198,400 params, bf16, CPU optimizer offload, 1 rank), one per stage, shared by
every test here. The census measures storage sizes, so its figures are exact: the known answers below
are integers of bytes, each derived from the DeepSpeed 0.19.8 function that allocates the buffer, and
compared exactly (allocated bytes) or to the page (resident bytes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rssprobe.worker import training

from .conftest import rssprobe, summary
from .noise import PAGE

P = 4 * (1024 * 1024 + 1024)  # tiny: 4 x Linear(1024, 1024), weights and biases
LARGEST = 1024 * 1024  # its largest parameter (one weight)
BF16, FP32 = 2, 4

# Stage 1: deepspeed/runtime/zero/stage_1_and_2.py, class DeepSpeedZeroOptimizer (1 rank: the partition is
# the whole model; groups are padded to 2 x world-size elements, and P is even, so there is no padding)
STAGE1 = {
    # __init__: bit16_groups_flat.append(flatten_dense_tensors_aligned(<the bf16 params>))
    "bit16_params": BF16 * P,
    # __init__: weights_partition = <bit16 partition>.detach().clone().to(dtype=master_weights_and_grads_dtype)
    "fp32_master": FP32 * P,
    # __init__ (cpu_offload): torch.full(weights_partition.shape, dtype=<bit16>) ->
    # param_buffer_of_bit16_for_cpu_offload_groups
    "h2d_staging": BF16 * P,
    # initialize_optimizer_states: single_grad_partition = torch.zeros(partition_size, dtype=<fp32 master>)
    "fp32_grad": FP32 * P,
    # __init__ (cpu_offload): temp_grad_buffer_for_cpu_offload and temp_grad_buffer_for_gpu_offload, each
    # torch.zeros(largest_param_numel, dtype=self.dtype)
    "temp_grad_buffers": 2 * BF16 * LARGEST,
    # deepspeed/ops/adam/cpu_adam.py, DeepSpeedCPUAdam.step: state['exp_avg'] / state['exp_avg_sq'] =
    # torch.zeros_like(p.data, dtype=torch.float) (fp32_optimizer_states defaults to True; p = fp32 master)
    "adam_exp_avg": FP32 * P,
    "adam_exp_avg_sq": FP32 * P,
}

# Stage 3: deepspeed/runtime/zero/stage3.py, class DeepSpeedZeroOptimizer_Stage3, with offload_param
STAGE3 = {
    # _create_param_groups_fp16_flat_cpu_memory: torch.empty(<partition numel of the group>, dtype=self.dtype),
    # the CPU buffer every parameter's partition (ds_tensor) is moved into
    "bit16_partitions": BF16 * P,
    # _create_fp32_partitions: fp16_partitioned_groups_flat[i].to(dtype=master_weights_and_grads_dtype).clone()
    "fp32_master": FP32 * P,
    # initialize_optimizer_states (offload_optimizer): subgroup_gradient_buffer = torch.zeros(num_elements,
    # dtype=<fp32 master dtype>) -> fp32_partitioned_groups_flat[i].grad
    "fp32_grad": FP32 * P,
    # _setup_for_real_optimizer: grad_partitions_flat_buffer = torch.zeros(<sum of partition numels>,
    # dtype=gradient_accumulation_dtype), the model dtype (runtime/engine.py get_data_types: grad_accum_dtype
    # defaults to it)
    "grad_partitions": BF16 * P,
    # as at stage 1: DeepSpeedCPUAdam.step
    "adam_exp_avg": FP32 * P,
    "adam_exp_avg_sq": FP32 * P,
}
# _setup_for_real_optimizer: each IPG bucket's buffer = torch.empty(reduce_bucket_size, dtype=<bf16>),
# allocated whole but only touched where backward copies gradients in (__add_grad_to_ipg_bucket, from
# offset 0): all P bf16 gradients fit one bucket, so exactly BF16 * P bytes of it are resident (at most one
# page more where the copy ends mid-page; BF16 * P is a whole number of pages here)
REDUCE_BUCKET = 500_000_000


def _census(run: Path, at: str) -> dict[str, Any]:
    for line in (run / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e["event"] == "census" and e["at"] == at:
            return e
    raise AssertionError(f"no {at} census in {run}")


@pytest.fixture(scope="module")
def stage1(runs_dir: Path) -> Path:
    """Stage 1, with GELU and reentrant activation checkpointing (model options that must not change the
    model states)."""
    out = runs_dir / "zero-stage1"
    rssprobe("run", "tiny", "--set", "zero.stage=1", "--set", 'model.activation="gelu"',
             "--set", 'model.activation_checkpointing="reentrant"', "--out", str(out), check=True)
    return out


@pytest.fixture(scope="module")
def stage3(runs_dir: Path) -> Path:
    """Stage 3 with both offloads, non-reentrant activation checkpointing, and no persistent parameters."""
    out = runs_dir / "zero-stage3"
    rssprobe("run", "tiny", "--set", "zero.stage=3", "--set", 'zero.offload_param="cpu"',
             "--set", 'model.activation_checkpointing="non_reentrant"',
             "--set", "zero.stage3_param_persistence_threshold=0", "--out", str(out), check=True)
    return out


@pytest.fixture(scope="module")
def shown(stage1: Path, stage3: Path) -> dict[int, dict[str, Any]]:
    """Each run's `show --format json`, read once."""
    return {1: summary(stage1), 3: summary(stage3)}


@pytest.mark.parametrize("stage,expected", [(1, STAGE1), (3, STAGE3)])
@pytest.mark.worker
def test_census_adds_up_to_what_each_stage_allocates(stage: int, expected: dict[str, int],
                                                     shown: dict[int, dict[str, Any]],
                                                     request: pytest.FixtureRequest) -> None:
    run = request.getfixturevalue(f"stage{stage}")
    end = _census(run, "end")
    roles = end["roles"]
    for role, size in expected.items():
        assert roles[role]["allocated"] == size, (stage, role, roles[role])
        # every byte of these was written (zeros, a copy or Adam's update): resident to the byte
        assert roles[role]["resident"] == size, (stage, role, roles[role])
    if stage == 3:
        bucket = roles["buckets"]
        assert bucket["allocated"] == BF16 * REDUCE_BUCKET
        assert BF16 * P <= bucket["resident"] <= BF16 * P + PAGE
        # one rank: a gathered parameter is a view of its own partition, so nothing is held apart
        assert roles.get("gathered_params", {"resident": 0})["resident"] == 0
    # the roles named above are the whole budget: "other" is rssprobe's input batch (2 x 1024 bf16), the
    # loss and DeepSpeed's scalars; a missed buffer would be at least a bias (4 KiB) per layer and usually MiBs
    assert roles.get("other", {"resident": 0})["resident"] < 64 * 1024
    s = shown[stage]
    named = sum(expected.values()) + (BF16 * P if stage == 3 else 0)
    assert abs(s["budget"]["live_bytes_per_param"] - named / P) < 64 * 1024 / P
    assert s["partition_params"] == P  # one rank holds the whole partition (stage 3 counts its sub-groups)


@pytest.mark.worker
def test_show_says_the_stage_in_every_format(stage1: Path, stage3: Path, shown: dict[int, dict[str, Any]]) -> None:
    line = {stage1: "ZeRO stage 1, offload_optimizer cpu", stage3: "ZeRO stage 3, offload_optimizer cpu, "
            "offload_param cpu"}
    for run, text in line.items():
        for fmt in ("terminal", "markdown", "csv"):
            out = rssprobe("show", str(run), "--format", fmt, check=True).stdout
            if fmt == "markdown":  # as a reader sees it: GFM shows `\_` as `_` (tests/test_markdown.py renders it)
                out = out.replace("\\_", "_")
            assert text in out, (run, fmt)
    assert shown[1]["zero"] == {"stage": 1, "offload_optimizer": "cpu", "offload_param": None}
    assert shown[3]["zero"] == {"stage": 3, "offload_optimizer": "cpu", "offload_param": "cpu"}
    # DeepSpeed's estimator, per stage (absolute, so exact): stage 1 is given ZeRO-2's
    # (stage_1_and_2.py estimate_zero2_model_states_mem_needs, cpu_offload: max(4 x GPUs, 16) x 1.5 = 24);
    # stage 3's (stage3.py estimate_zero3_model_states_mem_needs, params offloaded, not zero.Init:
    # max(4 x GPUs per node, 18) x 1.5 = 27)
    assert shown[1]["budget"]["estimator_bytes_per_param"] == 24.0
    assert shown[3]["budget"]["estimator_bytes_per_param"] == 27.0


@pytest.mark.worker
def test_stage3_counts_parameters_left_gathered(stage3: Path, shown: dict[int, dict[str, Any]]) -> None:
    """ZeRO-3 gathers each layer's parameters around its use and releases them after (release_sub_module);
    with stage3_param_persistence_threshold = 0 none is kept gathered by design, so after backward and
    after the step the count is exactly 0 of the model's 8 tensors (with DeepSpeed's default threshold, 1e5,
    the four 1024-element biases would stay: the knob reached DeepSpeed)."""
    points = shown[3]["zero3_gathered"]
    assert set(points) == {f"{w}.{at}" for w in ("first_step", "last_step") for at in ("after_backward",
                                                                                        "after_step")}
    for point, c in points.items():
        assert (c["tensors"], c["params"], c["persistent_params"]) == (0, 0, 0), point
        assert (c["of_tensors"], c["of_params"]) == (8, P), point
    assert "ZeRO-3 gathered parameters" in rssprobe("show", str(stage3), "--format", "csv", check=True).stdout
    assert shown[1]["zero3_gathered"] is None  # nothing is gathered below stage 3
    # as gate-able figures: the 16-bit weights left gathered, bytes per parameter (a count: exact)
    assert shown[3]["metrics"]["zero3.gathered_after_backward"] == 0.0
    assert shown[3]["metrics"]["zero3.gathered_after_step"] == 0.0
    assert not any(k.startswith("zero3.") for k in shown[1]["metrics"])


@pytest.mark.parametrize("mode", ["reentrant", "non_reentrant"])
def test_checkpointed_layers_all_get_gradients(mode: str) -> None:
    """Per-layer torch.utils.checkpoint (no DeepSpeed: the model as built). The reentrant form returns no
    graph unless an input needs a gradient, which would leave the first layer without one."""
    import torch

    from rssprobe.config import scenario

    scen = scenario.validate({"name": "t", "model": {"layers": 3, "width": 16, "activation": "gelu",
                                                     "activation_checkpointing": mode}}, "t").model_dump()
    model, groups, params = training.build_model(scen)
    assert params == 3 * (16 * 16 + 16) and len(groups[0]["params"]) == 6
    assert sum(isinstance(m, torch.nn.GELU) for m in model.modules()) == 3
    model(torch.randn(2, 16)).pow(2).mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_each_stage_declares_its_own_sites_and_roles() -> None:
    """The budget means the same at every stage: shared roles keep their names, each stage reads its own
    optimizer's attributes, and a figure of another stage is not a known name (a --metric typo check)."""
    from rssprobe.analysis import metrics
    from rssprobe.config import scenario
    from rssprobe.config import sites as sites_config
    from rssprobe.contract.names import partitioned_roles, role_names

    two, three = (scenario.load("tiny", [f"zero.stage={n}"]) for n in (2, 3))
    shared = {"fp32_master", "fp32_grad", "adam_exp_avg", "adam_exp_avg_sq"}
    assert shared <= set(role_names(1)) and shared <= set(role_names(3))
    assert role_names(1) == role_names(2)  # one optimizer class, DeepSpeedZeroOptimizer
    assert shared | {"bit16_partitions", "grad_partitions"} <= partitioned_roles(3)
    assert "gathered_params" not in partitioned_roles(3)  # gathered = full parameters, on every rank
    assert partitioned_roles(2) == partitioned_roles(1) == shared | {"h2d_staging"}
    assert not any("stage_1_and_2" in s for s in sites_config.default_sites(3))
    assert all(".stage3." not in s for s in sites_config.default_sites(2))
    assert "role.bit16_partitions" in metrics.known(three) and "role.bit16_partitions" not in metrics.known(two)
    assert "site.DeepSpeedZeroOptimizer_Stage3.step.steady.retained" in metrics.known(three)
