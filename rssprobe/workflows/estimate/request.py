"""What `rssprobe estimate` was asked (Request) and the question it makes (Question): where the buffers live and
how many ranks share a node. A question that does not say is refused in one line with a hint, before anything."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...config.runoptions import RunOptions
from ...errors import UserError

ACCELERATORS = ("cpu", "cuda")


@dataclass
class Request:
    """What `rssprobe estimate` was asked for (None: not given)."""

    scenario_ref: str | None = None
    sets: list[str] = field(default_factory=list)  # the user's --set words
    steps: int | None = None
    params: float | None = None
    ranks_per_node: int | None = None
    gpus_per_node: int | None = None
    nodes: int = 1
    accelerator: str | None = None
    model: str | None = None
    hf_config: Path | None = None
    stage: int | None = None
    offload_param: bool | None = None
    node_ram: int | None = None
    calibration: Path | None = None
    calibrate: bool = False
    fresh: bool = False
    # the calibration's runs: patches, allocator, glibc knobs, environment; repeat None: by the glibc in use
    options: RunOptions = field(default_factory=lambda: RunOptions(repeat=None))
    torch_alloc_conf: str | None = None
    calibration_ranks: int | None = None
    calibration_steps: int | None = None
    calibration_params: list[float] | None = None
    argv: list[str] = field(default_factory=list)
    # the job as the trainer runs it (config/trainerjob.py; None: HF Trainer / accelerate's default)
    zero_init: bool | None = None
    load_dtype: str | None = None
    trainable: str | None = None


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


def zero_options(req: Request) -> dict[str, Any]:
    """--stage and --offload-param as the spec's typed options (config/scenariospec.py)."""
    if req.stage is not None and req.stage not in (1, 2, 3):
        raise UserError(f"--stage {req.stage}: ZeRO stages are 1, 2 and 3")
    if req.offload_param and req.stage is not None and req.stage < 3:
        raise UserError(f"--offload-param: parameters are offloaded at ZeRO stage 3 only (--stage {req.stage})")
    offload = req.offload_param or (req.stage == 3 and req.offload_param is None)
    return {"stage": req.stage, "offload_param": "cpu" if offload else None}
