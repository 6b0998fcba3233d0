"""The model a scenario trains, its inputs and its loss: Linear layers, or a Hugging Face causal LM.

`kind = "transformers"` builds `AutoModelForCausalLM.from_config` from [model.hf] under the scenario's seed:
random weights, nothing downloaded (the worker's environment has HF_HUB_OFFLINE: run/environment.py).
transformers and the model's own modeling module are imported by `prepare`, before the pre-model baseline, as
torch and DeepSpeed are: on this machine they are ~1,700 modules and ~150 MiB after torch and DeepSpeed, a
fixed cost that must not be divided by the parameter count. Inputs are random token ids; the loss is the
model's own language-model loss.
Everything here runs inside the worker (no orchestration imports).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from ..contract.workerscenario import LinearModelSpec, TransformersModelSpec, WorkerScenario
from . import procfs


def kind(scenario: WorkerScenario) -> str:
    return scenario["model"]["kind"]


def transformers_model(scenario: WorkerScenario) -> TransformersModelSpec | None:
    """The scenario's [model] when it is a transformers one (narrowed: its hf config is resolved), else None."""
    m = scenario["model"]
    return m if m["kind"] == "transformers" else None


def linear_model(scenario: WorkerScenario) -> LinearModelSpec:
    m = scenario["model"]
    if m["kind"] != "linear":
        raise ValueError(f"a {m['kind']} model is not built of Linear layers")
    return m


def _config(m: TransformersModelSpec) -> Any:
    from transformers import AutoConfig

    hf = dict(m["hf"])
    return AutoConfig.for_model(hf.pop("model_type"), **hf)


def prepare(scenario: WorkerScenario) -> dict[str, Any] | None:
    """Import what building the model will import, before the baseline; what that cost (None for Linear)."""
    m = transformers_model(scenario)
    if m is None:
        return None
    rss0, modules0, t0 = procfs.rss_bytes(), len(sys.modules), time.perf_counter()
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    transformers.logging.set_verbosity_error()
    model_class = MODEL_FOR_CAUSAL_LM_MAPPING[type(_config(m))]  # imports its modeling module
    if m["load"] == "checkpoint":  # what from_pretrained and its DeepSpeed config import
        import safetensors.torch  # noqa: F401
        import transformers.integrations.deepspeed
    return {"transformers": transformers.__version__, "architecture": model_class.__name__,
            "time_s": time.perf_counter() - t0, "rss": procfs.rss_bytes() - rss0,
            "modules": len(sys.modules) - modules0}


def build(scenario: WorkerScenario) -> tuple[Any, list[dict[str, Any]], int]:
    """(model, optimizer param groups, unique parameter count) of a transformers scenario."""
    import torch
    from transformers import AutoModelForCausalLM

    m = transformers_model(scenario)
    if m is None:
        raise ValueError(f"a {kind(scenario)} model is not a transformers one")
    torch.manual_seed(scenario["seed"])
    model = AutoModelForCausalLM.from_config(_config(m))
    model.train()
    params = list(model.parameters())  # unique: a tied weight (GPT-2's wte / lm_head) once
    return model, [{"params": params}], sum(p.numel() for p in params)


def describe(model: Any, scenario: WorkerScenario) -> dict[str, Any]:
    """What the census and the sites are per: unique parameter tensors, and which names share one (tied)."""
    names: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    tied = [group for group in names.values() if len(group) > 1]
    config = getattr(model, "config", None)
    m = scenario["model"]
    layers = getattr(config, "num_hidden_layers", None) if config is not None else \
        m["layers"] if m["kind"] == "linear" else None
    return {"model_kind": kind(scenario), "architecture": type(model).__name__, "layers": layers,
            "param_tensors": len(names), "tied": tied,
            # a ZeRO-3 partitioned weight holds an empty tensor: its size is ds_numel
            "tied_params": sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters() if len(names[id(p)]) > 1)}


def inputs(scenario: WorkerScenario, device: Any, dtype: Any) -> Any:
    """One batch, used for every step: random features (Linear) or random token ids (transformers)."""
    import torch

    hf_model = transformers_model(scenario)
    if hf_model is not None:
        vocab = int(hf_model["hf"].get("vocab_size") or _config(hf_model).vocab_size)
        return torch.randint(0, vocab, (scenario["micro_batch"], hf_model["seq_len"]), device=device)
    return torch.randn(scenario["micro_batch"], linear_model(scenario)["width"], dtype=dtype, device=device)


def loss(engine: Any, x: Any, scenario: WorkerScenario) -> Any:
    """The transformers model's own language-model loss; for Linear layers the mean square of the output."""
    if kind(scenario) == "transformers":
        return engine(input_ids=x, labels=x).loss
    return engine(x).float().pow(2).mean()
