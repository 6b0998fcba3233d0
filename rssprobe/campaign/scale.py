"""Size sweeps: one run group per model size, run (or resumed, or sharded) by the campaign engine.

A scale directory holds
  scale.json          what the sweep is (scenario, sizes, options, command) and its groups
  params-<N>/         one run group (GroupDir, `rssprobe show` works on it) per model size,
                      N the parameter count the model actually has
Re-running the same command reuses every group whose runs all ended (ok, failed, timeout);
an unfinished group (interrupted) is run again whole. The fit (analysis/sweep.py) keeps runs that did
not end ok out, and names them.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..analysis.sweep import NO_FIT, Sweep
from ..config import scenario
from ..config.sizes import counts
from ..contract import EXIT_INTERRUPTED
from ..errors import UserError
from ..log import say
from ..run import group as groups
from ..run import launch, preflight
from ..store import layout, reader
from ..store.layout import SCALE_INDEX
from ..store.rundir import GroupDir
from . import engine
from .engine import Campaign, Shard
from .matrix import Outcome

INDEX = SCALE_INDEX


def parse_sizes(text: str) -> list[float]:
    """'4e6,16M,64e6' -> sizes (config/sizes.py: the one parser of sizes); anything else is one line (UserError)
    before any training starts."""
    try:
        sizes = [float(n) for n in counts(text)]
    except ValueError as e:
        raise UserError(f"--params {text}: {e}") from None
    if len(set(sizes)) < 2:
        raise UserError(f"--params {text}: a sweep needs at least 2 distinct sizes")
    return sizes


def size_scenarios(ref: str, sets: list[str], sizes: list[float]) -> list[scenario.Scenario]:
    """One scenario per size (--set model.params=N), sorted; two sizes that build one model are refused."""
    scens = [scenario.load(ref, [*sets, f"model.params={size!r}"]) for size in sizes]
    for scen in scens:  # the largest size must fit before the smallest one runs
        preflight.check_machine(scen)
    by_params: dict[int, float] = {}
    for size, scen in zip(sizes, scens, strict=True):
        n = scen.model.n_params
        if n in by_params:
            raise UserError(f"--params {by_params[n]:g} and {size:g} both build the same model ({scen.model.n_layers} "
                            f"layers of width {scen.model.width}, {n:,} params); choose sizes further apart")
        by_params[n] = size
    return sorted(scens, key=lambda s: s.model.n_params)


def definition(req: launch.RunRequest, sizes: list[float], repeat: int, sets: list[str]) -> dict[str, Any]:
    """What makes two scale commands the same sweep (a patch file by its content, not only its name)."""
    files = [f"{p}:{hashlib.sha1(reader.read_bytes(p)).hexdigest()[:12] if p.is_file() else 'missing'}"
             for p in req.patch_files]
    return {"scenario": req.scenario_ref, "sizes": sorted(sizes), "repeat": repeat, "sets": sets, "label": req.label,
            "patches": req.patches, "patch_files": files, "allocator": req.allocator, "malloc_env": req.malloc_env,
            "python": req.python}


RunGroup = Callable[..., tuple[GroupDir, list[str]]]  # run/group.run_group(req, repeat, title=...)
Say = Callable[[str], None]


def run(directory: Path, definition: dict[str, Any], base: launch.RunRequest, scens: list[scenario.Scenario],
        repeat: int, run_group: RunGroup, fresh: bool = False, say: Say = print, shard: Shard | None = None) -> bool:
    """Run every size (of this shard) not yet finished into directory; True if interrupted (Ctrl-C)."""
    c = Campaign.open(directory, "scale", definition, fresh, shard)
    sizes = [{"params": s.model.n_params, "dir": layout.scale_group(s.model.n_params)} for s in scens]
    c.index.update({"scenario": base.scenario_ref, "scenario_name": base.scenario.name, "label": base.label,
                    "sizes": definition["sizes"], "params": [g["params"] for g in sizes], "repeat": repeat,
                    "options": {k: v for k, v in definition.items() if k not in ("scenario", "sizes", "repeat")},
                    "command": base.command})
    c.set_entries(sizes)
    c.save()
    total = len(scens) * repeat
    for k, scen in enumerate(scens):
        key = layout.scale_group(scen.model.n_params)
        if not c.owns(key):
            continue
        where = f"size {k + 1}/{len(scens)} ({scen.model.n_params / 1e6:.1f} M params)"
        first, last = k * repeat + 1, (k + 1) * repeat

        def run_size(group: Path, scen: scenario.Scenario = scen, where: str = where, first: int = first,
                     last: int = last) -> list[str]:
            say(f"sweep {directory.name}: {where}, " + (f"run {first}" if first == last else f"runs {first}-{last}")
                + f" of {total}")
            req = dataclasses.replace(base, scenario=scen, out=group)
            return run_group(req, repeat, title=f"{scen.name} {base.label}, {where}")[1]

        got = c.ensure(key, repeat, run_size)
        if got.reused:
            say(f"sweep {directory.name}: {where} already finished, reused")
        elif got.status == "interrupted":
            return True
    return False


def sweep(sizes: list[float], s: groups.Start, out: Path | None, fresh: bool, shard_spec: str | None = None
          ) -> Outcome:
    """`rssprobe scale`: run (or resume) the sweep, and its fit; exit 130 interrupted, 1 runs lost, else 0."""
    shard = Shard.parse(shard_spec)
    scens = size_scenarios(s.scenario_ref, s.sets, sizes)
    req = groups.build_request(s)
    what = definition(req, sizes, s.repeat, s.sets)
    directory = out or engine.default_dir(layout.scale_root(), f"{req.scenario.name}-{req.label}", what)
    interrupted = run(directory, what, req, scens, s.repeat, groups.run_group, fresh, say, shard)
    data = Sweep.load(directory).as_dict()
    say(f"scale directory: {directory}")
    lost = [p for p in data["problems"] if not (shard and p == NO_FIT)]  # a shard may hold one size only
    return Outcome("scale", data, EXIT_INTERRUPTED if interrupted else 1 if lost else 0)
