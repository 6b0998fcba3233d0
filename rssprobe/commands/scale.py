"""rssprobe scale: the scenario (or a training script) at several model sizes; every figure fitted as
fixed + slope x params."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..campaign import scale
from ..errors import UserError
from ..log import say
from ..reporters import output, show
from ..workflows.run import Start
from . import common_args


@click.command("scale", epilog=common_args.examples(
    "rssprobe scale default --params 4e6,16e6,64e6 --repeat 2",
    "rssprobe scale tiny --params 1e6,4e6 --patched",
    "rssprobe scale --script train.py --size-arg layers=1,2,4 -- --deepspeed_config ds.json"))
@common_args.script_options
@click.option("--params", "params_text", metavar="N,N[,N...]",
              help="Model sizes in parameters, e.g. 4e6,16e6,64e6 (sets model.params; at least 2 distinct).")
@click.option("--size-arg", "size_args", multiple=True, metavar="NAME=V,V[,V...]",
              help="A script's own size option and its values, e.g. layers=1,2,4: each size runs the script with "
                   "--layers 1 (and so on) after its arguments; the parameter counts are measured.")
@common_args.configuration_options
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Scale directory (default reports/scale/<scenario>-<label>-<hash>); rerunning resumes it.")
@click.option("--trim-at-end", is_flag=True, help="Accepted as `run` takes it; scale always ends every run with "
              "malloc_trim(0) (its RSS after the trim is the low-noise figure it fits).")
@common_args.fresh_option
@common_args.shard_option
@common_args.format_option()
def command(args: tuple[str, ...], script: Path | None, params_text: str | None, size_args: tuple[str, ...],
            steps: int | None, overrides: tuple[str, ...],
            world_size: int | None, baseline: bool, patched: bool, patches: tuple[str, ...],
            patch_files: tuple[Path, ...], allocator: str, malloc_env: tuple[str, ...], label: str | None,
            repeat: int, env_ref: str | None, python: str | None, out: Path | None, trim_at_end: bool, fresh: bool,
            shard: str | None, fmt: str, torch_alloc_conf: str | None) -> None:
    """Run SCENARIO at each size of --params (fresh processes) and fit bytes = fixed + slope x params; or a
    training script at each value of its own size option: --script train.py --size-arg layers=1,2,4 -- ARGS."""
    spec = common_args.scenario_spec(args, script, overrides, default=None, steps=steps, world_size=world_size,
                                     trim_at_end=True, torch_alloc_conf=torch_alloc_conf)
    if spec is None:
        raise UserError("scale: name a SCENARIO, or --script train.py")
    is_script = spec.ref.endswith(".py")
    if len(size_args) > 1:  # click would keep the last one silently
        raise UserError(f"--size-arg given {len(size_args)} times: a sweep varies one option of the script")
    size_arg = size_args[0] if size_args else None
    if (params_text is None) == (size_arg is None) or (size_arg is not None) != is_script:
        raise UserError("scale: give --params N,N,... (a scenario's sizes) or, for a script, --size-arg NAME=V,V,... "
                        "(its own size option); one of them")
    sizes = scale.SizeArg.parse(size_arg) if size_arg is not None else scale.parse_sizes(params_text or "")
    options = common_args.run_options(patches=patches, patch_files=patch_files, allocator=allocator,
                                      malloc_env=malloc_env, repeat=repeat, env_ref=env_ref, python=python)
    outcome = scale.sweep(sizes, Start(spec=spec, options=options, baseline=baseline, patched=patched, label=label,
                                       argv=list(sys.argv)), out, fresh, shard)
    output.render(fmt, show.scale(outcome.data, fmt))
    if trim_at_end:  # said once the sweep is done, so that no note stands before an error
        say("--trim-at-end: scale always ends every run with malloc_trim(0); nothing more to do")
    sys.exit(outcome.exit_code)
