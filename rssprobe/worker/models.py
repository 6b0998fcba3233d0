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

from . import procfs


def kind(scenario: dict[str, Any]) -> str:
    return scenario["model"].get("kind") or "linear"


def _config(scenario: dict[str, Any]) -> Any:
    from transformers import AutoConfig

    hf = dict(scenario["model"]["hf"])
    return AutoConfig.for_model(hf.pop("model_type"), **hf)


def prepare(scenario: dict[str, Any]) -> dict[str, Any] | None:
    """Import what building the model will import, before the baseline; what that cost (None for Linear)."""
    if kind(scenario) != "transformers":
        return None
    rss0, modules0, t0 = procfs.rss_bytes(), len(sys.modules), time.perf_counter()
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    transformers.logging.set_verbosity_error()
    model_class = MODEL_FOR_CAUSAL_LM_MAPPING[type(_config(scenario))]  # imports its modeling module
    if scenario["model"].get("load") == "checkpoint":  # what from_pretrained and its DeepSpeed config import
        import safetensors.torch  # noqa: F401
        import transformers.integrations.deepspeed
    return {"transformers": transformers.__version__, "architecture": model_class.__name__,
            "time_s": time.perf_counter() - t0, "rss": procfs.rss_bytes() - rss0,
            "modules": len(sys.modules) - modules0}


def build(scenario: dict[str, Any]) -> tuple[Any, list[dict[str, Any]], int]:
    """(model, optimizer param groups, unique parameter count) of a transformers scenario."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(scenario["seed"])
    model = AutoModelForCausalLM.from_config(_config(scenario))
    model.train()
    params = list(model.parameters())  # unique: a tied weight (GPT-2's wte / lm_head) once
    return model, [{"params": params}], sum(p.numel() for p in params)


def describe(model: Any, scenario: dict[str, Any]) -> dict[str, Any]:
    """What the census and the sites are per: unique parameter tensors, and which names share one (tied)."""
    names: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    tied = [group for group in names.values() if len(group) > 1]
    config = getattr(model, "config", None)
    layers = getattr(config, "num_hidden_layers", None) if config is not None else scenario["model"].get("layers")
    return {"model_kind": kind(scenario), "architecture": type(model).__name__, "layers": layers,
            "param_tensors": len(names), "tied": tied,
            # a ZeRO-3 partitioned weight holds an empty tensor: its size is ds_numel
            "tied_params": sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters() if len(names[id(p)]) > 1)}


def inputs(scenario: dict[str, Any], device: Any, dtype: Any) -> Any:
    """One batch, used for every step: random features (Linear) or random token ids (transformers)."""
    import torch

    m = scenario["model"]
    if kind(scenario) == "transformers":
        vocab = int(m["hf"].get("vocab_size") or _config(scenario).vocab_size)
        return torch.randint(0, vocab, (scenario["micro_batch"], m["seq_len"]), device=device)
    return torch.randn(scenario["micro_batch"], m["width"], dtype=dtype, device=device)


def loss(engine: Any, x: Any, scenario: dict[str, Any]) -> Any:
    """The transformers model's own language-model loss; for Linear layers the mean square of the output."""
    if kind(scenario) == "transformers":
        return engine(input_ids=x, labels=x).loss
    return engine(x).float().pow(2).mean()
