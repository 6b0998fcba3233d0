"""The environment of every process rssprobe starts in the worker's Python, built here and nowhere else.

The worker's Python finds this very rssprobe first on its path (PACKAGE_PARENT), whatever is installed in
it; its bin directory comes first on PATH (ninja for JIT-compiled ops lives there in a venv). A worker also
gets its compiled-ops cache, the orchestrator's pid for its lifeline, rendezvous variables, the allocator
(LD_PRELOAD), ccache behind op builds, the run's glibc knobs and torch's allocator setting
(PYTORCH_CUDA_ALLOC_CONF, from --torch-alloc-conf or the scenario); a transformers model's worker the Hugging
Face hubs switched off (it builds from a config: nothing is ever downloaded). A short probe of the worker's Python
(preflight's site check, doctor's self-check, make bench's import cost) gets the same path and the CPU
accelerator unless told otherwise.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from ..contract.environment import ORCHESTRATOR_ENV, SHARED_OPS_ENV, TORCH_ALLOC_CONF_ENV, TORCH_ALLOC_CONF_NEWER_ENV
from . import compilecache, host

PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])  # the directory that holds this rssprobe package
# read when huggingface_hub and transformers are imported: no download, no hub request, from any rank
HUB_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base(python: str) -> dict[str, str]:
    """This process's environment with this rssprobe first on the path of `python`."""
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": os.pathsep.join([PACKAGE_PARENT, *filter(None, [env.get("PYTHONPATH")])]),
        "PYTHONUNBUFFERED": "1",
        "PATH": os.pathsep.join([str(Path(python).parent), env.get("PATH", "")]),
    })
    return env


def probe(python: str) -> dict[str, str]:
    """For a short subprocess of the worker's Python that imports the worker's modules, not a training."""
    return {**base(python), "DS_ACCELERATOR": os.environ.get("DS_ACCELERATOR", "cpu")}


def alloc_conf_probe(python: str) -> dict[str, str]:
    """A probe that asks the worker's torch about an allocator setting: the setting under test is its argument,
    never one this process inherited (torch would parse that at import)."""
    return {k: v for k, v in probe(python).items() if k not in (TORCH_ALLOC_CONF_ENV, TORCH_ALLOC_CONF_NEWER_ENV)}


LAUNCHED_HOOK = str(Path(__file__).resolve().parents[1] / "worker" / "launched")  # its sitecustomize.py


def launched(env: dict[str, str], run_dir: Path, script: str) -> dict[str, str]:
    """A run the user's own launcher starts (rssprobe run -- deepspeed ... train.py): the worker's environment
    (its one-process rendezvous is what `python train.py` needs; a launcher sets each rank's own over it) less
    LOCAL_SIZE (the launcher's: the worker takes torchrun's LOCAL_WORLD_SIZE), and the hook that makes every
    process running `script` a probed rank of `run_dir` (worker/launched/sitecustomize.py). The run travels in
    PYTHON-prefixed variables, which DeepSpeed's launcher forwards to other nodes with PYTHONPATH."""
    out = {k: v for k, v in env.items() if k != "LOCAL_SIZE"}
    out["PYTHONPATH"] = os.pathsep.join([LAUNCHED_HOOK, out["PYTHONPATH"]])
    out.update({"PYTHON_RSSPROBE_RUN": str(run_dir.resolve()), "PYTHON_RSSPROBE_SCRIPT": str(Path(script).resolve()),
                "PYTHON_RSSPROBE_OPS": out["TORCH_EXTENSIONS_DIR"]})
    return out


def worker(python: str, world_size: int, allocator: str, malloc_env: dict[str, str], torch_version: str,
           ds_version: str, torch_alloc_conf: str | None = None, hub_offline: bool = False) -> dict[str, str]:
    """Everything one run's worker (or torchrun and its ranks) gets; `hub_offline` for a transformers model."""
    env = base(python)
    env["TORCH_EXTENSIONS_DIR"] = str(host.ops_cache_dir(python, torch_version, ds_version))
    env.setdefault(SHARED_OPS_ENV, str(host.shared_ops_dir()))  # set empty by the user: no reuse
    env[ORCHESTRATOR_ENV] = str(os.getpid())  # the worker's parent-death check (contract.die_with_parent)
    # ranks on this node, as DeepSpeed's own launcher exports it: without it DeepSpeed 0.15.x's CPU accelerator
    # counts devices by running `numactl` (often absent); torchrun passes it on to every rank
    env["LOCAL_SIZE"] = str(world_size)
    env["MASTER_PORT"] = str(free_port())  # with more ranks torchrun is given it (--master-port) and sets it per rank
    if world_size == 1:  # with more ranks torchrun sets these per rank
        env.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"})
    library = host.allocator_library(allocator)
    if library:
        env["LD_PRELOAD"] = library
    env.update(compilecache.worker_env(python))
    if hub_offline:
        env.update(HUB_OFFLINE)
    env.update(malloc_env)
    if torch_alloc_conf is not None:  # torch >= 2.9 would read PYTORCH_ALLOC_CONF first: not inherited
        env.pop(TORCH_ALLOC_CONF_NEWER_ENV, None)
        env[TORCH_ALLOC_CONF_ENV] = torch_alloc_conf
    return env
