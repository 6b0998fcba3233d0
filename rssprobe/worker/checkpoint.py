"""Write the checkpoint a scenario with model.load = "checkpoint" loads: the configured model, random weights under
the scenario's seed, saved with save_pretrained as real checkpoints are (safetensors or .bin, sharded, bf16 or fp32
on disk). Run once per shape by the orchestrator (rssprobe/run/checkpoints.py) in the worker's Python, in a process
of its own, so that building and saving the model never touches a measured run:

    python -m rssprobe.worker.checkpoint OUT_DIR SPEC_JSON

SPEC_JSON: {"hf": {...model.hf, resolved...}, "seed": 0, "dtype_on_disk": "fp32", "format": "safetensors",
"shards": 4}. The checkpoint is written next to OUT_DIR and renamed into place, so a reader never sees half of one.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path


def write(out: Path, spec: dict) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    hf = dict(spec["hf"])
    config = AutoConfig.for_model(hf.pop("model_type"), **hf)
    torch.manual_seed(int(spec.get("seed", 0)))
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[spec["dtype_on_disk"]]
    model = AutoModelForCausalLM.from_config(config).to(dtype)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    shard = max(1, -(-nbytes // int(spec["shards"])))  # ceil: about `shards` files
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=spec["format"] == "safetensors", max_shard_size=shard)
    if out.exists():  # another process wrote it meanwhile: keep theirs
        shutil.rmtree(tmp)
        return
    os.replace(tmp, out)


if __name__ == "__main__":
    write(Path(sys.argv[1]), json.loads(sys.argv[2]))
