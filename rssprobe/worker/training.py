"""The training scenario itself: a synthetic model and a real DeepSpeed ZeRO engine (stage 1, 2 or 3).

Everything here runs inside the worker process and imports torch/DeepSpeed lazily, so
the process-start probe is taken before either is loaded.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Callable
from typing import Any

from ..contract.workerscenario import WorkerScenario
from . import opreuse


def pick_accelerator() -> str:
    """'cuda' where a GPU is usable, else 'cpu'; DS_ACCELERATOR is set before deepspeed is imported."""
    import torch

    name = os.environ.get("DS_ACCELERATOR") or ("cuda" if torch.cuda.is_available() else "cpu")
    os.environ["DS_ACCELERATOR"] = name
    return name


def ask_cpuinfo_once() -> None:
    """DeepSpeed's CPU op builder asks py-cpuinfo for the CPU's flags at every op load (3 times a run), and
    py-cpuinfo answers each time from a new Python process (~1.3 s here): the process keeps its first answer, a
    copy for each caller (the CPU does not change under a run). Time only: no op, buffer or figure changes."""
    try:
        import cpuinfo
    except ImportError:
        return  # a DeepSpeed without py-cpuinfo reads lscpu instead
    first = functools.cache(cpuinfo.get_cpu_info)

    def get_cpu_info() -> dict[str, Any]:
        return copy.deepcopy(first())

    cpuinfo.get_cpu_info = get_cpu_info


def init_distributed(on_compile: Callable[[str], None]) -> None:
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().device_name() == "cpu":  # loaded here (or reused: opreuse), as DeepSpeed would load it
        builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
        if builder is not None and deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
            opreuse.load(builder, on_compile)
    deepspeed.init_distributed()


def load_cpu_adam(on_compile: Callable[[str], None]) -> None:
    """Load (JIT-compile on first use) the CPU Adam op before the baseline probe.

    Its shared library is code, not per-parameter state: loading it here keeps its
    pages out of the init figures.
    """
    from deepspeed.ops.op_builder import CPUAdamBuilder

    opreuse.load(CPUAdamBuilder(), on_compile)


def load_pin_memory(on_compile: Callable[[str], None]) -> bool:
    """Load DeepSpeed's pin_memory op (its native pinned backend, DS_PIN_MEMORY_BACKEND=native: PR #8211, 0.19.6)
    before the baseline probe, as cpu_adam is, when the run pins natively. False where this DeepSpeed has none
    (the ds.native-pin intervention then refuses the run, in one line)."""
    try:
        from deepspeed.ops.op_builder import PinMemoryBuilder
    except ImportError:
        return False
    opreuse.load(PinMemoryBuilder(), on_compile)
    return True


ACTIVATIONS = {"relu": "ReLU", "gelu": "GELU", "silu": "SiLU", "tanh": "Tanh"}  # scenario name -> torch.nn class


def build_model(scenario: WorkerScenario) -> tuple[Any, list[dict[str, Any]], int]:
    """(model, optimizer param groups, parameter count). The orchestrator resolved model.layers."""
    import torch

    from . import models

    if models.kind(scenario) == "transformers":
        return models.build(scenario)
    m = models.linear_model(scenario)
    torch.manual_seed(scenario["seed"])
    width = m["width"]
    activation = m["activation"]
    checkpointing = m["activation_checkpointing"]
    wrap = _checkpointed_class() if checkpointing else None
    blocks: list[torch.nn.Module] = []
    linears: list[torch.nn.Module] = []
    for _ in range(m["layers"]):
        layer = [torch.nn.Linear(width, width)]
        linears.append(layer[0])
        if activation in ACTIVATIONS:
            layer.append(getattr(torch.nn, ACTIVATIONS[activation])())
        blocks += [wrap(torch.nn.Sequential(*layer), checkpointing == "reentrant")] if wrap else layer
    model = torch.nn.Sequential(*blocks)
    groups = [{"params": [p for layer in linears[g::m["param_groups"]] for p in layer.parameters()]}
              for g in range(m["param_groups"])]
    return model, groups, sum(p.numel() for p in model.parameters())


def _checkpointed_class() -> Any:
    """The checkpointing wrapper, defined on first use (torch is imported lazily here)."""
    import torch
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(torch.nn.Module):
        """One layer under torch.utils.checkpoint: its activations are dropped after forward and
        recomputed in backward (ZeRO-3 gathers its parameters again for that)."""

        def __init__(self, inner: torch.nn.Module, reentrant: bool) -> None:
            super().__init__()
            self.inner, self.reentrant = inner, reentrant

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.reentrant and not x.requires_grad:
                # the reentrant form returns no graph unless an input needs a gradient: without this the
                # first layer's parameters would get none (the usual `enable_input_require_grads` fix)
                x = x.detach().requires_grad_()
            return checkpoint(self.inner, x, use_reentrant=self.reentrant)

    return Checkpointed


def input_dtype(scenario: WorkerScenario) -> Any:
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[scenario["precision"]]


def initialize(model: Any, groups: list[dict[str, Any]], ds_config: dict[str, Any]) -> Any:
    import deepspeed

    engine, _optimizer, _loader, _scheduler = deepspeed.initialize(model=model, model_parameters=groups,
                                                                   config=ds_config)
    return engine


def estimator_cpu_bytes(params: int, ranks_per_node: int = 1, nodes: int = 1, *, stage: int,
                        offload_param: bool = False, largest_layer_params: int = 0,
                        zero_init: bool = False) -> int | None:
    """DeepSpeed's own host-memory estimate with CPU optimizer offload: absolute bytes for a whole node
    of `ranks_per_node` ranks (model states only), for reference. Stages 1 and 2 share ZeRO-2's estimator
    (DeepSpeed has none for stage 1); stage 3's is told whether parameters are offloaded too, and that the
    model was not built under zero.Init (it is built whole, then partitioned by initialize) unless `zero_init`."""
    try:
        if stage == 3:
            from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

            cpu_mem, *_gpu = estimate_zero3_model_states_mem_needs(
                params, largest_layer_params, num_gpus_per_node=ranks_per_node, num_nodes=nodes,
                cpu_offload=True, cpu_offload_params=offload_param, zero_init=zero_init)
            return cpu_mem
        from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
    except ImportError:
        return None
    cpu_mem, _gpu_mem = estimate_zero2_model_states_mem_needs(params, num_gpus_per_node=ranks_per_node,
                                                              num_nodes=nodes, cpu_offload=True)
    return cpu_mem
