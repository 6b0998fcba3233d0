"""rssprobe prepare: a run directory for a launch rssprobe does not control (several nodes).

Writes worker.json and the manifest into a directory every node can reach, and prints the
command to start the ranks with torchrun's rendezvous or DeepSpeed's launcher; each rank
then writes its own event stream there, and `rssprobe collect DIR` concludes the run.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from .. import launcher, patchset, scenario


@click.command("prepare")
@click.argument("scenario_ref", metavar="[SCENARIO]", default="default")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="A directory shared by all nodes.")
@click.option("--world-size", type=int, required=True, help="Total ranks over all nodes.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE")
@click.option("--patched", is_flag=True)
@click.option("--patch", "patches", multiple=True, metavar="NAME")
def command(scenario_ref: str, out: Path, world_size: int, overrides: tuple[str, ...], patched: bool,
            patches: tuple[str, ...]) -> None:
    """Prepare SCENARIO for an external multi-node launch into a shared directory."""
    scen = scenario.load(scenario_ref, [*overrides, f"world_size={world_size}"])
    label, specs = patchset.resolve(scen, False, patched, list(patches))
    prepared = launcher.prepare(launcher.RunRequest(scenario=scen, scenario_ref=scenario_ref, label=label,
                                                    patches=specs, out=out))
    env = prepared.env
    run_dir = shlex.quote(str(prepared.run_dir.path.resolve()))
    exports = " ".join(f"{k}={shlex.quote(env[k])}" for k in ("PYTHONPATH", "TORCH_EXTENSIONS_DIR"))
    click.echo(f"prepared {run_dir} for {world_size} ranks. On every node (same torch and DeepSpeed):\n\n"
               f"  export {exports}\n"
               f"  torchrun --nnodes NODES --nproc-per-node RANKS_PER_NODE --rdzv-backend c10d \\\n"
               f"      --rdzv-endpoint FIRST_NODE:29500 -m rssprobe.worker {run_dir}\n\n"
               f"or, with DeepSpeed's launcher and a hostfile:\n\n"
               f"  deepspeed --hostfile HOSTFILE --module rssprobe.worker {run_dir}\n\n"
               f"then, from any node:  rssprobe collect {run_dir}")
