"""Size sweeps: one run group per model size, run (or resumed, or sharded) by the campaign engine.

A scale directory holds
  scale.json          what the sweep is (scenario, sizes, options, command) and its groups
  params-<N>/         one run group (GroupDir, `rssprobe show` works on it) per model size,
                      N the parameter count the model actually has
  size-<V>/           a script's sweep (`--script train.py --size-arg layers=1,2,4`): one group per value V of
                      the script's own size option; its parameter count is the one the run measured (the
                      index's params: 0 until a run of that size finished)
Re-running the same command reuses every group whose runs all ended (ok, failed, timeout);
an unfinished group (interrupted) is run again whole. The fit (analysis/sweep.py) keeps runs that did
not end ok out, and names them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import kinds
from ..analysis.sweep import NO_FIT, Sweep
from ..config import scenario
from ..config.scenariospec import ScenarioSpec
from ..config.sizes import counts, items
from ..contract.exitcodes import EXIT_INTERRUPTED
from ..errors import UserError
from ..log import say
from ..run import group as groups
from ..run import launch, request
from ..store import layout, reader
from ..store.layout import SCALE_INDEX
from ..store.rundir import GroupDir
from . import engine
from .engine import Campaign, Shard
from .matrix import Outcome

INDEX = SCALE_INDEX
OPTION_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")  # a script's option, as argparse users name them


def parse_sizes(text: str) -> list[float]:
    """'4e6,16M,64e6' -> sizes (config/sizes.py: the one parser of sizes); anything else is one line (UserError)
    before any training starts."""
    try:
        sizes = [float(n) for n in counts(text)]
    except ValueError as e:
        raise UserError(f"--params {text}: {e}") from None
    return check_sizes(sizes, f"--params {text}")


def check_sizes(sizes: list[float], flag: str) -> list[float]:
    """A sweep's sizes: at least 2 distinct (a fit of one size is refused before its runs, not after them)."""
    if len(set(sizes)) < 2:
        raise UserError(f"{flag}: a sweep needs at least 2 distinct sizes")
    return sizes


@dataclass(frozen=True)
class SizeArg:
    """A script's own size option and its values: `layers=1,2,4` runs the script with `--layers 1` and so on,
    after its other arguments (argparse takes the last occurrence)."""

    flag: str
    values: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> SizeArg:
        """NAME=V1,V2,...: the values split by the one list parser --params takes (config/sizes.items: no empty
        value, space, control character or repeat); the name an option's (letters, digits, - and _)."""
        name, sep, values = text.partition("=")
        name = name.strip(" ").lstrip("-")
        if not sep or not OPTION_NAME.fullmatch(name):
            raise UserError(f"--size-arg {text!r}: expected NAME=V1,V2,... (the script's option, e.g. layers=1,2,4)")
        try:
            got = tuple(items(values))
        except ValueError as e:
            raise UserError(f"--size-arg {e}") from None
        twice = next((v for i, v in enumerate(got) if v in got[:i]), None)
        if twice is not None:
            raise UserError(f"--size-arg {text}: {twice} is given twice")
        if len(got) < 2:
            raise UserError(f"--size-arg {text}: a sweep needs at least 2 distinct values")
        return cls(f"--{name}", got)

    def group(self, value: str) -> str:
        return f"size-{layout.slug(value, layout.NAME_PART)}"


def script_scenarios(spec: ScenarioSpec, size: SizeArg) -> list[scenario.Scenario]:
    """One script run configuration per value of the script's size option (its parameter count is measured)."""
    scens = spec.load_each([{"script_args": (*(spec.script_args or ()), size.flag, v)} for v in size.values])
    request.check_scenarios(scens)
    return scens


def size_scenarios(spec: ScenarioSpec, sizes: list[float],
                   read: tuple[str, dict[str, Any]] | None = None) -> list[scenario.Scenario]:
    """One scenario per size (its model.params), sorted; two sizes that build one model are refused. `read`: the
    spec's scenario file as the caller read it (ScenarioSpec.load_each)."""
    scens = spec.load_each([{"params": size} for size in sizes], read)
    request.check_scenarios(scens)  # the largest size must fit before the smallest one runs
    by_params: dict[int, float] = {}
    for size, scen in zip(sizes, scens, strict=True):
        n = scen.model.n_params
        if n in by_params:
            raise UserError(f"--params {by_params[n]:g} and {size:g} both build the same model ({scen.model.n_layers} "
                            f"layers of width {scen.model.width}, {n:,} params); choose sizes further apart")
        by_params[n] = size
    return sorted(scens, key=lambda s: s.model.n_params)


def definition(req: launch.RunRequest, sizes: list[float], repeat: int, spec: ScenarioSpec) -> dict[str, Any]:
    """What makes two scale commands the same sweep (a patch file by its content, not only its name)."""
    files = [f"{p}:{hashlib.sha1(reader.read_bytes(p)).hexdigest()[:12] if p.is_file() else 'missing'}"
             for p in req.patch_files]
    return {**spec.identity(), "sizes": sorted(sizes), "repeat": repeat, "label": req.label,
            "patches": req.patches, "patch_files": files, "allocator": req.allocator, "malloc_env": req.malloc_env,
            "python": req.python}


RunGroup = Callable[..., tuple[GroupDir, list[str]]]  # run/group.run_group(req, repeat, title=...)
Say = Callable[[str], None]


def _measured_params(group: Path) -> int:
    """The parameter count a finished run of the group measured (0: none finished)."""
    if not GroupDir.is_group(group):
        return 0
    for run in GroupDir(group).present():
        try:
            params = run.manifest().params
        except UserError:
            continue
        if isinstance(params, int) and not isinstance(params, bool) and params > 0:
            return params
    return 0


def run(directory: Path, definition: dict[str, Any], base: launch.RunRequest, scens: list[scenario.Scenario],
        repeat: int, run_group: RunGroup, fresh: bool = False, say: Say = print, shard: Shard | None = None,
        size_arg: SizeArg | None = None) -> bool:
    """Run every size (of this shard) not yet finished into directory; True if interrupted (Ctrl-C). A script's
    sweep (`size_arg`) names its groups by the option's values and records the parameter counts its runs measure."""
    c = Campaign.open(directory, kinds.SCALE.name, definition, fresh, shard)
    keys = [size_arg.group(v) for v in size_arg.values] if size_arg else \
        [layout.scale_group(s.model.n_params) for s in scens]
    sizes = [{"params": _measured_params(directory / key) if size_arg else s.model.n_params, "dir": key}
             for key, s in zip(keys, scens, strict=True)]
    c.index.update({"scenario": base.scenario_ref, "scenario_name": base.scenario.name, "label": base.label,
                    "sizes": definition["sizes"], "params": [g["params"] for g in sizes], "repeat": repeat,
                    "options": {k: v for k, v in definition.items() if k not in ("scenario", "sizes", "repeat")},
                    "command": base.command})
    c.set_entries(sizes)
    c.save()

    def cell(k: int, key: str, scen: scenario.Scenario) -> engine.Cell:
        what = f"{size_arg.flag} {size_arg.values[k]}" if size_arg else f"{scen.model.n_params / 1e6:.1f} M params"
        return engine.Cell(key, repeat, f"size {k + 1}/{len(scens)} ({what})",
                           start=lambda group: (dataclasses.replace(base, scenario=scen, out=group), {}),
                           # the script's model: its size is what its runs measured
                           finish=(lambda group: {"params": _measured_params(group)}) if size_arg else None)

    def run_size(req: launch.RunRequest, n: int, text: str) -> list[str]:
        return run_group(req, n, title=f"{req.scenario.name} {base.label}, {text}")[1]

    return c.run_cells([cell(k, key, scen) for k, (key, scen) in enumerate(zip(keys, scens, strict=True))],
                       "sweep", run_group=run_size, say=say)


def preflight_sweep(sizes: list[float] | SizeArg, s: groups.Start
                    ) -> tuple[list[scenario.Scenario], launch.RunRequest]:
    """The sweep's scenarios and its base request, every size's per-run preflight made (the native pin's lock
    limit of the largest included): one line before any directory or run (scale, and estimate's calibration)."""
    if isinstance(sizes, SizeArg):
        scens = script_scenarios(s.spec, sizes)
    else:
        scens = size_scenarios(s.spec, sizes)
    req = groups.build_request(s)
    request.check_all(dataclasses.replace(req, scenario=scen) for scen in scens)
    return scens, req


def sweep(sizes: list[float] | SizeArg, s: groups.Start, out: Path | None, fresh: bool,
          shard_spec: str | None = None) -> Outcome:
    """`rssprobe scale`: run (or resume) the sweep, and its fit; exit 130 interrupted, 1 runs lost, else 0. `sizes`
    is model sizes in parameters (a scenario), or a script's own size option (SizeArg, added to the script's own
    arguments)."""
    shard = Shard.parse(shard_spec)
    size_arg = sizes if isinstance(sizes, SizeArg) else None
    scens, req = preflight_sweep(sizes, s)
    what = definition(req, [] if size_arg else sizes, s.options.runs, s.spec)
    if size_arg is not None:
        what.update(size_arg=[size_arg.flag, list(size_arg.values)])
    directory = out or engine.default_dir(layout.scale_root(), f"{req.scenario.name}-{req.label}", what)
    interrupted = run(directory, what, req, scens, s.options.runs, groups.run_group, fresh, say, shard, size_arg)
    data = Sweep.load(directory).as_dict()
    say(f"scale directory: {directory}")
    lost = [p for p in data["problems"] if not (shard and p == NO_FIT)]  # a shard may hold one size only
    return Outcome(kinds.SCALE.name, data, EXIT_INTERRUPTED if interrupted else 1 if lost else 0)
