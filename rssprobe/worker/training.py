"""The training scenario itself: a synthetic model and a real DeepSpeed ZeRO-2 engine.

Everything here runs inside the worker process and imports torch/DeepSpeed lazily, so
the process-start probe is taken before either is loaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def pick_accelerator() -> str:
    """'cuda' where a GPU is usable, else 'cpu'; DS_ACCELERATOR is set before deepspeed is imported."""
    import torch

    name = os.environ.get("DS_ACCELERATOR") or ("cuda" if torch.cuda.is_available() else "cpu")
    os.environ["DS_ACCELERATOR"] = name
    return name


def ops_cached(op_name: str) -> bool:
    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR", ""))
    return root.is_dir() and any((root / op_name).glob("*.so"))


def init_distributed(on_compile: Callable[[str], None]) -> None:
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().device_name() == "cpu" and not ops_cached("deepspeed_shm_comm"):
        on_compile("deepspeed_shm_comm")
    deepspeed.init_distributed()


def load_cpu_adam(on_compile: Callable[[str], None]) -> None:
    """Load (JIT-compile on first use) the CPU Adam op before the baseline probe.

    Its shared library is code, not per-parameter state: loading it here keeps its
    pages out of the init figures.
    """
    from deepspeed.ops.op_builder import CPUAdamBuilder

    if not ops_cached("cpu_adam"):
        on_compile("cpu_adam")
    CPUAdamBuilder().load()


def build_model(scenario: dict[str, Any]) -> tuple[Any, list[dict[str, Any]], int]:
    """(model, optimizer param groups, parameter count). The orchestrator resolved model.layers."""
    import torch

    m = scenario["model"]
    torch.manual_seed(scenario["seed"])
    width = m["width"]
    blocks: list[torch.nn.Module] = []
    for _ in range(m["layers"]):
        blocks += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*blocks)
    linears = [b for b in blocks if isinstance(b, torch.nn.Linear)]
    groups = [{"params": [p for layer in linears[g::m["param_groups"]] for p in layer.parameters()]}
              for g in range(m["param_groups"])]
    return model, groups, sum(p.numel() for p in model.parameters())


def input_dtype(scenario: dict[str, Any]) -> Any:
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[scenario["precision"]]


def initialize(model: Any, groups: list[dict[str, Any]], ds_config: dict[str, Any]) -> Any:
    import deepspeed

    engine, _optimizer, _loader, _scheduler = deepspeed.initialize(model=model, model_parameters=groups,
                                                                   config=ds_config)
    return engine


def estimator_cpu_bytes(params: int, ranks_per_node: int = 1, nodes: int = 1) -> int | None:
    """DeepSpeed's own host-memory estimate for ZeRO-2 with CPU offload: absolute bytes for a whole node
    of `ranks_per_node` ranks (model states only), for reference."""
    try:
        from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
    except ImportError:
        return None
    cpu_mem, _gpu_mem = estimate_zero2_model_states_mem_needs(params, num_gpus_per_node=ranks_per_node,
                                                              num_nodes=nodes, cpu_offload=True)
    return cpu_mem
