"""What `rssprobe estimate` was asked (Request) and the question it makes (Question): where the buffers live and
how many ranks share a node. A question that does not say is refused in one line with a hint, before anything."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from ...config.runoptions import RunOptions
from ...config.scenariospec import ScenarioSpec
from ...errors import UserError

ACCELERATORS = ("cpu", "cuda")
Source = Literal["scenario", "model", "hf-config"]  # what a Request's spec.ref names


@dataclass
class Request:
    """What `rssprobe estimate` was asked for (None: not given). The target is a ScenarioSpec as every run command
    builds one: its ref names a SCENARIO, a shipped model (--model) or a config.json (--hf-config), `source` says
    which; its --set words and typed options (--steps, --params, --stage, --offload-param, --torch-alloc-conf: the
    PYTORCH_CUDA_ALLOC_CONF the CUDA run would have) are the target's."""

    spec: ScenarioSpec
    source: Source = "scenario"
    ranks_per_node: int | None = None
    gpus_per_node: int | None = None
    nodes: int = 1
    accelerator: str | None = None
    node_ram: int | None = None
    calibration: Path | None = None
    calibrate: bool = False
    fresh: bool = False
    # the calibration's runs: patches, allocator, glibc knobs, environment; repeat None: by the glibc in use
    options: RunOptions = field(default_factory=lambda: RunOptions(repeat=None))
    calibration_ranks: int | None = None
    calibration_steps: int | None = None
    calibration_params: list[float] | None = None
    argv: list[str] = field(default_factory=list)
    # the job as the trainer runs it (config/trainerjob.py; None: HF Trainer / accelerate's default)
    zero_init: bool | None = None
    load_dtype: str | None = None
    trainable: str | None = None
    final_save: str | None = None
    offload_optimizer: bool | None = None  # False: the optimizer on the GPU (CUDA only; None: offloaded)
    # the node's host RAM the user saw their job use in steady training (--seen-steady): above the estimate's
    # steady figure, the trainer's own memory (analysis/estimate.py Target.trainer_bytes)
    seen_steady: int | None = None
    load_onto: str | None = None  # "device": from_pretrained(device_map="cuda:LOCAL_RANK") (None: the host)


@dataclass
class Question:
    """The question resolved: where the buffers live and how many ranks share a node."""

    accelerator: str
    ranks: int
    for_this_machine: bool  # a CPU target on one node: this machine's RAM and lock limit are the default


def number(flag: str, value: float | None, minimum: float) -> None:
    """UserError unless `value` (when given) is a finite number of at least `minimum`."""
    if value is not None and (not isinstance(value, (int, float)) or not math.isfinite(value) or value < minimum):
        raise UserError(f"{flag} {value}: not a number >= {minimum:g}")


def question(req: Request) -> Question:
    """Where the buffers live and how many ranks a node runs; UserError (one line, a hint) for a question that does
    not say: a rank count without an accelerator, or both --gpus-per-node and --ranks-per-node."""
    number("--nodes", req.nodes, 1)
    if req.accelerator is not None and req.accelerator not in ACCELERATORS:
        raise UserError(f"--accelerator {req.accelerator}: not one of {', '.join(ACCELERATORS)}")
    if req.gpus_per_node is not None:
        number("--gpus-per-node", req.gpus_per_node, 1)
        if req.ranks_per_node is not None:
            raise UserError("--gpus-per-node and --ranks-per-node both given: one says the ranks of a node "
                            "(--gpus-per-node G: CUDA; --ranks-per-node R --accelerator cpu: CPU ranks)")
        if req.accelerator == "cpu":
            raise UserError(f"--gpus-per-node {req.gpus_per_node} --accelerator cpu: GPUs are CUDA; CPU ranks are "
                            f"--ranks-per-node {req.gpus_per_node} --accelerator cpu")
        return Question("cuda", req.gpus_per_node, False)
    if req.ranks_per_node is not None:
        number("--ranks-per-node", req.ranks_per_node, 1)
        if req.accelerator is None:
            raise UserError(f"--ranks-per-node {req.ranks_per_node}: on GPUs or CPUs? --gpus-per-node "
                            f"{req.ranks_per_node} (CUDA: the model on the device) or --ranks-per-node "
                            f"{req.ranks_per_node} --accelerator cpu (every buffer in host RAM)")
        return Question(req.accelerator, req.ranks_per_node, req.accelerator == "cpu" and req.nodes == 1)
    if req.calibrate:
        accelerator = req.accelerator or "cpu"
        return Question(accelerator, 1, accelerator == "cpu" and req.nodes == 1)
    raise UserError("how many ranks a node? --gpus-per-node G (CUDA) or --ranks-per-node R --accelerator cpu")


def which_model(scenario_ref: str | None, model: str | None, hf_config: Path | None) -> tuple[str, Source]:
    """The one model asked for, as a spec's ref and what it names; UserError for none or two."""
    given = [(flag, str(v), source) for flag, v, source in (("SCENARIO", scenario_ref, "scenario"),
                                                            ("--model", model, "model"),
                                                            ("--hf-config", hf_config, "hf-config")) if v is not None]
    if len(given) != 1:
        raise UserError("which model? a SCENARIO, --model NAME (rssprobe estimate --help lists them) or --hf-config "
                        "PATH" if not given else f"{' and '.join(g[0] for g in given)}: give one model")
    return given[0][1], cast(Source, given[0][2])


def zero_options(stage: int | None, offload_param: bool | None, offload_optimizer: bool | None = None
                 ) -> dict[str, Any]:
    """--stage and --offload-param as the spec's typed options (config/scenariospec.py): ZeRO-3 offloads the
    parameters unless --no-offload-param, or unless the optimizer is not offloaded (--no-offload-optimizer)."""
    if stage is not None and stage not in (1, 2, 3):
        raise UserError(f"--stage {stage}: ZeRO stages are 1, 2 and 3")
    if offload_param and stage is not None and stage < 3:
        raise UserError(f"--offload-param: parameters are offloaded at ZeRO stage 3 only (--stage {stage})")
    offload = offload_param or (stage == 3 and offload_param is None and offload_optimizer is not False)
    return {"stage": stage, "offload_param": "cpu" if offload else None}
