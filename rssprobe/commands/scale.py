"""rssprobe scale: the scenario at several model sizes; every figure fitted as fixed + slope x params."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .. import scale
from . import run
from .env import say
from .run import build_request, execute_group
from .show import FORMATS, print_scale


@click.command("scale")
@click.argument("scenario_ref", metavar="SCENARIO")
@click.option("--params", "params_text", required=True, metavar="N,N[,N...]",
              help="Model sizes in parameters, e.g. 4e6,16e6,64e6 (sets model.params; at least 2 distinct).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Scale directory (default reports/scale/<scenario>-<label>-<hash>); rerunning resumes it.")
@click.option("--fresh", is_flag=True, help="Start the scale directory over instead of reusing finished sizes.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="terminal", help="Format of the final fit.")
def command(scenario_ref: str, params_text: str, repeat: int, steps: int | None, world_size: int | None,
            overrides: tuple[str, ...], baseline: bool, patched: bool, patches: tuple[str, ...],
            patch_files: tuple[Path, ...], allocator: str, malloc_env: tuple[str, ...], label: str | None,
            out: Path | None, fresh: bool, fmt: str, env_ref: str | None, python: str | None) -> None:
    """Run SCENARIO at each size of --params (fresh processes) and fit bytes = fixed + slope x params."""
    sizes = scale.parse_sizes(params_text)
    sets = [*overrides, *([f"steps={steps}"] if steps is not None else []),
            *([f"world_size={world_size}"] if world_size is not None else []), "probes.trim_at_end=true"]
    scens = scale.size_scenarios(scenario_ref, sets, sizes)
    req = build_request(scenario_ref, sets, baseline, patched, patches, patch_files, allocator, malloc_env, label,
                        env_ref, python)
    definition = scale.definition(req, sizes, repeat, sets)
    directory = out or scale.default_dir(req.scenario.name, req.label, definition)
    interrupted = scale.run(directory, definition, req, scens, repeat, execute_group, fresh, say)
    problems = print_scale(str(directory), fmt)["problems"]
    say(f"scale directory: {directory}")
    sys.exit(130 if interrupted else 1 if problems else 0)


# The options `run` takes, taken from it (one definition): model and probe settings, patches,
# allocator, glibc knobs, label, repeats (per size), worker Python.
SHARED = ("steps", "world_size", "overrides", "baseline", "patched", "patches", "patch_files", "allocator",
          "malloc_env", "label", "repeat", "env_ref", "python")
_after = next(i for i, p in enumerate(command.params) if p.name == "params_text") + 1
command.params[_after:_after] = [p for p in run.command.params if p.name in SHARED]
