"""A launch rssprobe does not control (several nodes): prepare a shared run directory, say how to start it.

Writes worker.json and the manifest into a directory every node can reach; each rank then
writes its own event stream there, and run/launch.collect concludes the run.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from ..config import patchsets
from ..config.runoptions import RunOptions
from ..config.scenariospec import ScenarioSpec
from ..contract.environment import TORCH_ALLOC_CONF_ENV
from . import environment, launch, request


def prepare(spec: ScenarioSpec, out: Path, patched: bool, patches: list[str]) -> str:
    """Prepare the run directory (spec.world_size: the ranks over all nodes); how to start them on every node."""
    scen = spec.load()
    world_size = scen.world_size
    label, specs = patchsets.resolve(scen, False, patched, patches)
    prepared = launch.prepare(request.make(spec, RunOptions(patches=tuple(specs)), scen=scen, label=label, out=out,
                                           argv=list(sys.argv)))
    env = prepared.env
    run_dir = shlex.quote(str(prepared.run_dir.path.resolve()))
    exports = " ".join(f"{k}={shlex.quote(env[k])}" for k in ("PYTHONPATH", "TORCH_EXTENSIONS_DIR",
                                                              TORCH_ALLOC_CONF_ENV, *environment.HUB_OFFLINE)
                                                              if k in env)
    return (f"prepared {run_dir} for {world_size} ranks. On every node (same torch and DeepSpeed):\n\n"
            f"  export {exports}\n"
            f"  torchrun --nnodes NODES --nproc-per-node RANKS_PER_NODE --rdzv-backend c10d \\\n"
            f"      --rdzv-endpoint FIRST_NODE:29500 -m rssprobe.worker {run_dir}\n\n"
            f"or, with DeepSpeed's launcher and a hostfile:\n\n"
            f"  deepspeed --hostfile HOSTFILE --module rssprobe.worker {run_dir}\n\n"
            f"then, from any node:  rssprobe collect {run_dir}")
