"""A launch rssprobe does not control (several nodes): prepare a shared run directory, say how to start it.

Writes worker.json and the manifest into a directory every node can reach; each rank then
writes its own event stream there, and run/launch.collect concludes the run. The variables every rank needs are
exported by hand on each node (torchrun) or listed in a file DeepSpeed's launcher forwards (it passes on only
PYTHON-prefixed variables by itself).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from ..config import patchsets
from ..config.runoptions import RunOptions
from ..config.scenariospec import ScenarioSpec
from ..contract.environment import SHARED_OPS_ENV, TORCH_ALLOC_CONF_ENV
from ..store import outputs
from . import environment, launch, request

DEEPSPEED_ENV_FILE = "deepspeed_env"  # in the run directory: NAME=VALUE lines, DeepSpeed's launcher's DS_ENV_FILE


def forwarded(env: dict[str, str]) -> dict[str, str]:
    """The variables every rank on every node needs: the package, the ops (own build directory and the shared one,
    so other nodes reuse the ops built once), torch's allocator settings, the hub kept offline."""
    names = ("PYTHONPATH", "TORCH_EXTENSIONS_DIR", SHARED_OPS_ENV, TORCH_ALLOC_CONF_ENV, *environment.HUB_OFFLINE)
    return {k: env[k] for k in names if k in env}


def prepare(spec: ScenarioSpec, out: Path, patched: bool, patches: list[str]) -> str:
    """Prepare the run directory (spec.world_size: the ranks over all nodes); how to start them on every node."""
    scen = spec.load()
    world_size = scen.world_size
    label, specs = patchsets.resolve(scen, False, patched, patches)
    prepared = launch.prepare(request.make(spec, RunOptions(patches=tuple(specs)), scen=scen, label=label, out=out,
                                           argv=list(sys.argv)))
    env = forwarded(prepared.env)
    path = prepared.run_dir.path.resolve()
    run_dir = shlex.quote(str(path))
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    env_file = path / DEEPSPEED_ENV_FILE
    outputs.replace(env_file, "".join(f"{k}={v}\n" for k, v in env.items()))
    return (f"prepared {run_dir} for {world_size} ranks. On every node (same torch and DeepSpeed):\n\n"
            f"  export {exports}\n"
            f"  torchrun --nnodes NODES --nproc-per-node RANKS_PER_NODE --rdzv-backend c10d \\\n"
            f"      --rdzv-endpoint FIRST_NODE:29500 -m rssprobe.worker {run_dir}\n\n"
            f"or, with DeepSpeed's launcher and a hostfile:\n\n"
            f"  DS_ENV_FILE={shlex.quote(str(env_file))} deepspeed --hostfile HOSTFILE \\\n"
            f"      --module rssprobe.worker {run_dir}\n\n"
            f"then, from any node:  rssprobe collect {run_dir}")
