"""rssprobe matrix: one run group per cell of torch x deepspeed x patch x allocator (or a plan's cells), resumable
and shardable (--shard K/N runs the K-th share; `rssprobe merge` joins the shards)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..campaign import matrix, plan
from ..config.allocators import ALLOCATORS
from ..config.plan import load
from ..contract.glibc import STEADY_MALLOC_ENV
from ..reporters import show
from . import common_args
from .common_args import format_option, fresh_option, malloc_env_option, pip_flags, scenario_sets


@click.command("matrix", epilog=common_args.examples(
    "rssprobe matrix default --deepspeed 0.18.2,0.19.8 --patch baseline,pr8132 --repeat 3",
    "rssprobe matrix --plan reports/issue7693/plan.toml --shard 1/4 --out shard-1"))
@common_args.script_options
@click.option("--plan", "plan_file", type=click.Path(path_type=Path),
              help="A run plan (TOML): a base and axes varied one at a time from it (instead of SCENARIO).")
@click.option("--optional", "with_optional", multiple=True, is_flag=False, flag_value="all", metavar="[AXIS=VALUE]",
              help="With --plan: run the values marked optional too (alone: all of them; AXIS=VALUE: that one, "
                   "repeatable).")
@click.option("--torch", "torch_versions", multiple=True, metavar="V[,V...]",
              help="torch versions (default: the worker Python's own).")
@click.option("--deepspeed", "ds_versions", multiple=True, metavar="V[,V...]",
              help="DeepSpeed versions, or source paths PATH[@REV] (default: the worker Python's own).")
@click.option("--transformers", "tf_versions", multiple=True, metavar="V[,V...]",
              help="transformers releases, or a local clone PATH[@REV] (an environment per value).")
@click.option("--accelerate", "acc_versions", multiple=True, metavar="V[,V...]",
              help="accelerate releases, or a local clone PATH[@REV] (an environment per value).")
@click.option("--patch", "patches", multiple=True, metavar="P[,P...]",
              help="The patch axis: each value is one cell's patches (baseline, patched, an intervention or set, "
                   "or a+b for two at once; default: baseline).")
@click.option("--allocator", "allocators", multiple=True, metavar="A[,A...]",
              help=f"The allocator axis: {', '.join(ALLOCATORS)} (default: glibc).")
@common_args.repeat_option(3, "per cell")
@scenario_sets
@common_args.alloc_conf_option
@click.option("--out", type=click.Path(path_type=Path), help="Matrix directory (default reports/matrix/<name>).")
@click.option("--dry-run", is_flag=True, help="List the cells and what is already done; run nothing.")
@click.option("--retry-failed", is_flag=True, help="Run again the cells in which a run failed.")
@fresh_option
@click.option("--python", metavar="PATH", help="The worker's Python (must have torch and deepspeed installed): one "
              "for every cell, instead of --torch/--deepspeed.")
@common_args.shard_option
@malloc_env_option(common_args.STEADY_HELP)
@pip_flags
@format_option()
def command(args: tuple[str, ...], script: Path | None, plan_file: Path | None, with_optional: tuple[str, ...],
            torch_versions: tuple[str, ...], ds_versions: tuple[str, ...], tf_versions: tuple[str, ...],
            acc_versions: tuple[str, ...], patches: tuple[str, ...], allocators: tuple[str, ...], repeat: int,
            steps: int | None,
            overrides: tuple[str, ...], out: Path | None, dry_run: bool, retry_failed: bool, fresh: bool,
            python: str | None, shard: str | None, malloc_env: tuple[str, ...], find_links: tuple[str, ...],
            index_url: str | None, fmt: str, torch_alloc_conf: str | None) -> None:
    """Run SCENARIO over the cartesian product of versions, patches and allocators; one table at the end.

    With --plan, run a plan file's base and its axes one at a time instead (docs in rssprobe/config/plan.py)."""
    spec = common_args.scenario_spec(args, script, overrides, default=None, steps=steps,
                                     torch_alloc_conf=torch_alloc_conf)
    if plan_file is not None:
        if spec or torch_versions or ds_versions or tf_versions or acc_versions or patches or allocators \
                or steps or overrides or python or torch_alloc_conf:
            raise click.UsageError("--plan declares the scenario, versions, patches and allocators; give only "
                                   "--out, --dry-run, --optional, --retry-failed, --fresh, --shard, --format and "
                                   "pip options")
        outcome = plan.run(load(plan_file), out, frozenset(with_optional), dry_run, retry_failed, fresh,
                           common_args.pip_options(find_links, index_url), shard)
    elif spec is None:
        raise click.UsageError("give SCENARIO or --plan FILE")
    else:
        outcome = matrix.run(matrix.MatrixRequest(
            spec=spec,
            torch=list(torch_versions), deepspeed=list(ds_versions), transformers=list(tf_versions),
            accelerate=list(acc_versions), patches=list(patches),
            allocators=list(allocators), out=out, dry_run=dry_run, retry_failed=retry_failed, fresh=fresh,
            options=common_args.run_options(malloc_env=malloc_env, malloc_default=STEADY_MALLOC_ENV, repeat=repeat,
                                            python=python),
            pip=common_args.pip_options(find_links, index_url), shard=shard))
    show.view(outcome.kind, outcome.data, fmt)
    sys.exit(outcome.exit_code)
