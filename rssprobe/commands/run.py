"""rssprobe run: one real ZeRO-2 CPU-offload training process, probed step by step."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..reporters import show
from ..workflows import run
from . import common_args


@click.command("run", epilog=common_args.examples(
    "rssprobe run --baseline --repeat 3 --trim-at-end --out runs/base",
    "rssprobe run --patched --repeat 3 --trim-at-end --out runs/pr8132",
    "rssprobe run --script train.py --steps 4 -- --deepspeed_config ds.json",
    "rssprobe run llama-small --world-size 2"))
@common_args.script_options
@common_args.configuration_options
@click.option("--out", type=click.Path(path_type=Path), help="Run directory (default reports/runs/<time>-...).")
@click.option("--trim-at-end", is_flag=True, help="malloc_trim(0) after the final census; record what it frees.")
@click.option("--memray", "use_memray", is_flag=True,
              help="Also capture native stacks with memray, per phase (costs time and RSS of its own).")
def command(args: tuple[str, ...], script: Path | None, steps: int | None, overrides: tuple[str, ...],
            world_size: int | None, out: Path | None, baseline: bool, patched: bool, patches: tuple[str, ...],
            patch_files: tuple[Path, ...], allocator: str, malloc_env: tuple[str, ...], trim_at_end: bool,
            label: str | None, use_memray: bool, repeat: int, env_ref: str | None, python: str | None,
            torch_alloc_conf: str | None) -> None:
    """Run SCENARIO (a .toml file or a packaged name; default: default) in a fresh worker, or a DeepSpeed
    training script: --script train.py -- ARGS (its optimizer steps are the run's steps), or your own launch
    command: -- deepspeed|torchrun|accelerate launch|python ... train.py ARGS (every rank probed)."""
    spec = common_args.scenario_spec(args, script, overrides, launcher=True, steps=steps, world_size=world_size,
                                     trim_at_end=trim_at_end, torch_alloc_conf=torch_alloc_conf)
    assert spec is not None
    options = common_args.run_options(patches=patches, patch_files=patch_files, allocator=allocator,
                                      malloc_env=malloc_env, repeat=repeat, env_ref=env_ref, python=python)
    started = run.start(run.Start(spec=spec, options=options, out=out, baseline=baseline, patched=patched,
                                  label=label, memray=use_memray, argv=list(sys.argv)))
    show.view(started.view.kind, started.view.data, "terminal", log_tail=started.view.log_tail)
    click.echo(f"{started.view.kind} directory: {started.found.path}", err=True)
    sys.exit(started.exit_code)
