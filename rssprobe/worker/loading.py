"""A model loaded from its checkpoint, measured as a phase of its own before deepspeed.initialize.

Where users run out of host RAM is mostly here (FAI-RL #68, transformers #47514, DeepSpeed #1814/#5290): every
rank loads its copy of the model before ZeRO partitions it, unless zero.Init is active during the load (at ZeRO-3,
transformers turns it on inside from_pretrained when a Hugging Face DeepSpeed config, HfDeepSpeedConfig, is alive:
TrainingArguments(deepspeed=...) made *before* from_pretrained). A load is one interval (exact peak, RSS after it,
anonymous vs file-backed vs shared), with what the rank then holds: the whole model, or its ZeRO-3 partition. The
baseline comes before it, so the load's bytes are the model's.

A scenario's load (model.load = "checkpoint", [model.from_pretrained]) happens here; a script's from_pretrained
and zero.Init are measured by the same `measured` (rssprobe/worker/script.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..contract.workerscenario import WorkerScenario

DTYPES = {"bf16": "bfloat16", "fp32": "float32"}


def holding(model: Any) -> dict[str, Any]:
    """What the rank holds of the model's parameters: whole tensors, ZeRO-3 partitions (ds_tensor), or both."""
    whole = partition = params = 0
    for p in model.parameters():
        params += getattr(p, "ds_numel", p.numel())
        ds = getattr(p, "ds_tensor", None)
        if ds is not None:
            partition += ds.numel() * ds.element_size()
            if p.data.numel() == getattr(p, "ds_numel", -1):  # gathered: the full tensor too
                whole += p.data.numel() * p.data.element_size()
        else:
            whole += p.numel() * p.element_size()
    holds = "partition" if partition and not whole else "whole model" if whole and not partition else \
        "mixed" if whole and partition else "nothing"
    return {"holds": holds, "whole_bytes": whole, "partition_bytes": partition, "params": params}


def describe_checkpoint(path: str) -> dict[str, Any] | None:
    """The checkpoint's files as the load event records them: path, files, bytes on disk, format."""
    root = Path(path)
    if not root.is_dir():
        return None
    files = sorted(p for p in root.iterdir() if p.suffix in (".safetensors", ".bin"))
    return {"path": str(root), "files": len(files), "bytes": sum(p.stat().st_size for p in files),
            "format": "safetensors" if any(p.suffix == ".safetensors" for p in files) else "bin"}


def zero_init_active() -> bool:
    """Is deepspeed.zero.Init partitioning parameters as they are made (a context entered and not left)?"""
    try:
        from deepspeed.runtime.zero import partition_parameters as pp
    except ImportError:
        return False
    return bool(getattr(pp, "zero_init_context", 0)) or bool(getattr(pp, "top_level_context", None))


def measured(worker: Any, how: str, call: Any, checkpoint: str | None = None) -> Any:
    """Run `call` (a load) as one measured interval; emit its load event; return what it returned. The `loading`
    phase marks its start (the orchestrator's node view samples the node from there to the load event)."""
    worker.phase("loading")
    interval = worker.tracker.enter()
    t0 = time.perf_counter()
    zero_init = zero_init_active()
    with worker.native.phase("load"):
        result = call()
    time_s = time.perf_counter() - t0
    peak = worker.tracker.exit(interval)
    model = result[0] if isinstance(result, tuple) else result  # from_pretrained(..., output_loading_info=True)
    zero_init = zero_init or any(hasattr(p, "ds_tensor") for p in model.parameters())
    worker.events.emit("load", how=how, time_s=time_s, peak=peak, entry_rss=interval.rss0, zero_init=zero_init,
                       checkpoint=describe_checkpoint(checkpoint) if checkpoint else None, **holding(model),
                       **worker.probe(smaps=True, rss=interval.rss1))
    worker.census("after_load")  # the memory-map partition names the checkpoint's mapped pages, if any stay
    return result


def load(worker: Any, scenario: WorkerScenario, ds_config: dict[str, Any]) -> tuple[Any, list[dict[str, Any]], int]:
    """(model, optimizer param groups, unique parameters) of a scenario that loads its checkpoint. The Hugging Face
    DeepSpeed config is made before from_pretrained or after it, as [model.from_pretrained] hf_ds_config says; it
    is kept alive on the worker (transformers holds it by a weak reference)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.integrations import HfDeepSpeedConfig

    m = scenario["model"]
    options = m["from_pretrained"] if m["kind"] == "transformers" else None
    if options is None or "path" not in options:  # the orchestrator writes the checkpoint and sets its path
        raise ValueError("model.load = \"checkpoint\" without the checkpoint's path in worker.json")
    path = options["path"]
    # torch_dtype: what every release takes (transformers 5 calls it dtype and still reads torch_dtype), so the
    # same worker loads under transformers 4.x and 5.x (a version axis)
    kwargs: dict[str, Any] = {"local_files_only": True, "low_cpu_mem_usage": options["low_cpu_mem_usage"],
                              "torch_dtype": "auto" if options["torch_dtype"] == "auto" else
                              getattr(torch, DTYPES[options["torch_dtype"]])}
    if options["hf_ds_config"] == "before":
        worker.hf_ds_config = HfDeepSpeedConfig(ds_config)  # at ZeRO-3: zero.Init inside from_pretrained
    model = measured(worker, "from_pretrained", lambda: AutoModelForCausalLM.from_pretrained(path, **kwargs), path)
    if options["hf_ds_config"] == "after":
        worker.hf_ds_config = HfDeepSpeedConfig(ds_config)  # too late for the load: FAI-RL #68's order
    model.train()
    params = list(model.parameters())
    return model, [{"params": params}], sum(getattr(p, "ds_numel", p.numel()) for p in params)
