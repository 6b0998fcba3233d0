"""The scenario as worker.json gives it to the worker, typed: what the orchestrator resolved, every default filled.

The orchestrator validates a scenario (rssprobe/config/scenario.py, pydantic) and dumps it whole into worker.json
(rssprobe/run/launch.py), so every key below is present with its default already applied; the worker reads keys,
never supplies a default of its own (a default written twice drifts). A script run's scenario is the exception the
types say: what the script's engine decides (model shape, ZeRO, precision, batch) is absent until it decides, so
those keys are NotRequired and the worker starts from WorkerSpec.zero_stage.

Part of the contract (rssprobe/contract/__init__.py): stdlib only. tests/test_workerscenario.py holds these keys
to the scenario model's, so neither side can add a key the other does not know.
"""

# no `from __future__ import annotations`: TypedDict reads NotRequired from evaluated annotations only (3.11)
from typing import Any, Literal, NotRequired, TypedDict

# The ZeRO stage a scenario trains at unless it says otherwise, and the stage whose roles a script run's census
# names until its engine decides: written here once, read by the scenario model and every reader of an old run.
DEFAULT_ZERO_STAGE = 2


class FromPretrainedSpec(TypedDict):
    """[model.from_pretrained]; `path` is the checkpoint the orchestrator wrote (run/checkpoints.py)."""

    dtype_on_disk: Literal["bf16", "fp32"]
    format: Literal["safetensors", "bin"]
    shards: int
    torch_dtype: Literal["auto", "bf16", "fp32"]
    low_cpu_mem_usage: bool
    hf_ds_config: Literal["before", "after"]
    path: NotRequired[str]


class LinearModelSpec(TypedDict):
    """[model] kind = "linear": its layer count resolved from params when given so."""

    kind: Literal["linear"]
    hf: dict[str, Any] | None
    seq_len: int | None
    params: float | None
    layers: int
    width: int
    param_groups: int
    activation: Literal["relu", "gelu", "silu", "tanh", "none"]
    activation_checkpointing: Literal["non_reentrant", "reentrant", False]
    load: Literal["config", "checkpoint"]
    from_pretrained: FromPretrainedSpec | None


class TransformersModelSpec(TypedDict):
    """[model] kind = "transformers": its config resolved (hfconfig.worker_hf), its seq_len decided."""

    kind: Literal["transformers"]
    hf: dict[str, Any]
    seq_len: int
    params: float | None
    layers: int | None
    width: int
    param_groups: int
    activation: Literal["relu", "gelu", "silu", "tanh", "none"]
    activation_checkpointing: Literal["non_reentrant", "reentrant", False]
    load: Literal["config", "checkpoint"]
    from_pretrained: FromPretrainedSpec | None  # with load = "checkpoint": its path set by the orchestrator


class ScriptModelSpec(TypedDict):
    """A script run's [model]: the script's own."""

    kind: Literal["script"]


ModelSpec = LinearModelSpec | TransformersModelSpec | ScriptModelSpec


class ZeroSpec(TypedDict):
    """[zero]: empty in a script run's scenario until its engine decides (WorkerSpec.zero_stage until then)."""

    stage: NotRequired[int]
    offload_optimizer: NotRequired[Literal["cpu"]]
    offload_param: NotRequired[Literal["cpu"] | None]
    pin_memory: NotRequired[bool | None]
    contiguous_gradients: NotRequired[bool]
    overlap_comm: NotRequired[bool]
    reduce_bucket_size: NotRequired[int]
    allgather_bucket_size: NotRequired[int]
    gradient_clipping: NotRequired[float]
    stage3_max_live_parameters: NotRequired[int | None]
    stage3_prefetch_bucket_size: NotRequired[int | None]
    stage3_max_reuse_distance: NotRequired[int | None]
    stage3_param_persistence_threshold: NotRequired[int | None]


class ProbesSpec(TypedDict):
    sites: Literal["default", "none"]
    extra_sites: list[str]
    trace_sites: list[str]
    parts: bool
    census: bool
    memmap: bool
    smaps: bool
    trim_at_end: bool
    steady_sites: Literal["light", "full"]
    alternate: bool


class ScriptSpec(TypedDict):
    """[script]: the user's own training script (rssprobe run --script); `args` replaced by a launched rank's."""

    path: str
    sha256: str | None
    args: list[str]
    stop_after: int | None
    command: list[str]


class CheckpointSpec(TypedDict):
    every: int
    consolidate_16bit: bool
    keep: int


class EvalSpec(TypedDict):
    every: int
    forwards: int


class ReinitSpec(TypedDict):
    every: int


class SaveSpec(TypedDict):
    at_end: list[Literal["checkpoint", "model_16bit"]]
    keep: bool


class WorkerScenario(TypedDict):
    """worker.json's `scenario`: the validated scenario, dumped whole (config/scenario.py's Scenario)."""

    name: str
    description: str
    precision: NotRequired[Literal["bf16", "fp32", "fp16"]]  # NotRequired: a script's engine decides
    steps: int | None
    micro_batch: NotRequired[int]
    grad_accum_steps: NotRequired[int]
    seed: int
    world_size: int
    torch_alloc_conf: str | None
    timeout_s: float
    model: ModelSpec
    zero: ZeroSpec
    optimizer: NotRequired[dict[str, Any]]  # DeepSpeed's, through deepspeed_config; the worker does not read it
    probes: ProbesSpec
    patches: dict[str, Any]  # what --patched applies; the orchestrator expands it into WorkerSpec.patches
    checkpoint: CheckpointSpec | None
    eval: EvalSpec | None
    reinit: ReinitSpec | None
    save: SaveSpec | None
    script: ScriptSpec | None
