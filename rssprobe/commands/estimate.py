"""rssprobe estimate: host RAM per rank and per node for a run nobody has made yet, from measured calibration."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..reporters import estimateviews
from ..workflows import estimate
from . import common_args


@click.command("estimate", epilog=common_args.examples(
    "rssprobe estimate issue7693-cpu --params 1.3e9 --ranks-per-node 8",
    "rssprobe estimate tiny --calibrate --ranks-per-node 2"))
@click.argument("scenario_ref", metavar="SCENARIO")
@common_args.scenario_sets
@click.option("--params", type=common_args.FiniteRange(min=0, min_open=True), metavar="N",
              help="Target parameter count (sets model.params; default: the scenario's own size).")
@click.option("--ranks-per-node", type=click.IntRange(min=1), metavar="R", help="Ranks (GPUs) on one node.")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True, metavar="K",
              help="Nodes of --ranks-per-node ranks each (the node's figures are per node).")
@click.option("--accelerator", type=click.Choice(estimate.ACCELERATORS), default="cpu", show_default=True,
              help="Where the model runs: cpu (every buffer in host RAM) or cuda (pinned slack predicted).")
@click.option("--calibration", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="A scale directory to calibrate from instead of this machine's cached one (--accelerator cuda: "
                   "one measured on a GPU).")
@click.option("--calibrate", is_flag=True, help="Calibrate now if this machine's calibration is not cached (as the "
              "first estimate does); without --ranks-per-node the estimate is for one rank.")
@common_args.fresh_option
@common_args.allocator_option
@common_args.malloc_env_option()
@common_args.patch_option("Estimate with")
@click.option("--torch-alloc-conf", "torch_alloc_conf", metavar="KEY:VALUE,...",
              help="PYTORCH_CUDA_ALLOC_CONF the CUDA run would have, e.g. pinned_max_round_threshold_mb:1 (the pinned "
                   "slack is predicted under it, for the calibration's torch).")
@common_args.repeat_option(1, "per calibration size")
@click.option("--calibration-ranks", default=1, show_default=True, type=click.IntRange(1),
              help="Ranks of each calibration run (2: a multi-rank process's own costs, e.g. ZeRO-3's gathers).")
@click.option("--calibration-steps", default=estimate.CALIBRATION_STEPS, show_default=True, type=click.IntRange(2),
              help="Steps of each calibration run (the target's step count: a steady mean over as many steps as "
                   "the run it estimates).")
@common_args.python_options
@common_args.format_option(["terminal", "json", "markdown"])
def command(scenario_ref: str, overrides: tuple[str, ...], steps: int | None, params: float | None,
            ranks_per_node: int | None, nodes: int, accelerator: str, calibration: Path | None, calibrate: bool,
            fresh: bool, allocator: str, malloc_env: tuple[str, ...], patches: tuple[str, ...],
            torch_alloc_conf: str | None, repeat: int, calibration_ranks: int, calibration_steps: int,
            env_ref: str | None, python: str | None, fmt: str) -> None:
    """Host RAM per rank and per node for SCENARIO at --params on --ranks-per-node ranks (estimated)."""
    data = estimate.run(estimate.Request(
        scenario_ref=scenario_ref, sets=common_args.sets_of(overrides, steps), params=params,
        ranks_per_node=ranks_per_node, nodes=nodes, accelerator=accelerator, calibration=calibration,
        calibrate=calibrate, fresh=fresh, allocator=allocator, malloc_env=common_args.malloc_env(malloc_env),
        patches=list(patches), torch_alloc_conf=torch_alloc_conf, repeat=repeat,
        calibration_ranks=calibration_ranks, calibration_steps=calibration_steps, env_ref=env_ref, python=python,
        argv=list(sys.argv)))
    estimateviews.show(data, fmt)
