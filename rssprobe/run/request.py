"""THE constructor of a run request, the command line that reruns one, and the checks of a campaign's runs made once,
before its first cell.

Every command that runs something (run, scale, gate, matrix, plan, bisect, prepare, estimate's calibration) builds
its requests with `make`, from the ScenarioSpec it was asked for and the RunOptions bundle: what a campaign cell
varies (its patches, allocator, glibc knobs, repeat) is a changed copy of the options, never a field filled by
hand. `rerun_argv` derives the `rssprobe run` command line a campaign's group records from the request itself.
`check_scenarios` runs what needs no per-run fact (the machine, the allocator setting per torch) once per campaign;
`check_all` runs the per-run preflight (run/launch.check: sites, alloc conf, versions, the native pin's DeepSpeed
and lock limit, the launcher) of every cell of a campaign before its first cell runs or any directory is made; a
cell whose environment is built only when it starts gets the checks that need no Python of its own (the pin's
pair, its DeepSpeed and lock limit), and the rest when it starts.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..config.runoptions import RunOptions
from ..config.scenario import Scenario
from ..config.scenariospec import ScenarioSpec
from . import launch, preflight


def make(spec: ScenarioSpec, options: RunOptions, *, label: str, scen: Scenario | None = None,
         out: Path | None = None, python: str | None = None, memray: bool = False,
         argv: list[str] | None = None, env_name: str | None = None) -> launch.RunRequest:
    """One run's request: `spec` loaded (or `scen`, the spec's scenario as the caller loaded it), run as `options`
    say (their patches expanded to component specs: patchsets.resolve's), in `python` (default this one). `argv`:
    the command line the run records (default: the `rssprobe run` line that reproduces it, rerun_argv, with
    `env_name` the environment it runs in)."""
    req = launch.RunRequest(
        scenario=scen if scen is not None else spec.load(), scenario_ref=spec.ref, label=label,
        patches=list(options.patches), allocator=options.allocator, malloc_env=dict(options.malloc_env), out=out,
        python=python or sys.executable, patch_files=list(options.patch_files), memray=memray, spec=spec)
    req.command = list(argv) if argv is not None else rerun_argv(req, options.runs, env_name)
    return req


def rerun_argv(req: launch.RunRequest, repeat: int, env_name: str | None = None) -> list[str]:
    """The `rssprobe run` command line that reproduces one group of this request (every campaign run ends with
    malloc_trim(0): RSS after it is a low-noise figure)."""
    spec = req.spec or ScenarioSpec(req.scenario_ref)
    options = ["--allocator", req.allocator, "--repeat", str(repeat),
               *(["--out", str(req.out)] if req.out is not None else []),
               *[a for p in req.patches for a in ("--patch", p)],
               *[a for p in req.patch_files for a in ("--patch-file", str(p))],
               *[a for k, v in req.malloc_env.items() for a in ("--malloc-env", f"{k}={v}")],
               *(["--env", env_name] if env_name else ["--python", req.python])]
    return ["rssprobe", "run", *spec.with_(trim_at_end=True).argv(*options)]


def varied(options: RunOptions, **changes: object) -> RunOptions:
    """What one cell varies, as a changed copy of the campaign's options (patches as a tuple)."""
    if "patches" in changes:
        changes["patches"] = tuple(changes["patches"])  # type: ignore[arg-type]
    return dataclasses.replace(options, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Planned:
    """A campaign cell's request before it runs. `built`: req.python is the Python it runs in (else an environment
    made when the cell starts, with `deepspeed` its DeepSpeed release where the cell names one)."""

    req: launch.RunRequest
    built: bool = True
    deepspeed: str | None = None


def check_scenarios(scens: Iterable[Scenario], where: Path | None = None,
                    torches: Iterable[str | None] | None = None, python: str | None = None) -> None:
    """THE preflight that needs no per-run fact, once per campaign (each distinct scenario once), before any
    environment, directory or run: the machine (memory, ranks, time, the disk under `where`, the cache roots) and,
    given `torches` (every torch the campaign's cells run; None in it: this Python's, or `python`'s), the torch
    allocator setting for each (a release whose environment is not built yet is judged from the table, and asked
    again when its cell starts). `torches` None: the setting is checked per run, in the run's own Python
    (launch.check), as for `run --env` before its environment exists. Every command that runs something calls it
    first (run, scale, gate, matrix, plan, bisect); the per-run rest is check_all's."""
    versions = None if torches is None else list(dict.fromkeys(torches)) or [None]
    seen_confs: set[str | None] = set()
    for scen in {id(s): s for s in scens}.values():
        preflight.check_machine(scen, where)
        if versions is not None and scen.torch_alloc_conf not in seen_confs:
            seen_confs.add(scen.torch_alloc_conf)
            preflight.check_alloc_conf_for(scen.torch_alloc_conf, versions, python)


def check_asked(patches: Iterable[str], torch_alloc_conf: str | None, python: str) -> None:
    """What `run` refuses of a request before anything else, for a command that asks it of its own (estimate, whose
    calibration is a campaign of its own: check_scenarios and check_all run there): two interventions that replace
    one another, and the torch allocator setting as `python`'s torch reads it."""
    preflight.check_patch_pair(list(patches))
    preflight.check_alloc_conf(torch_alloc_conf, python)


def check_all(cells: Iterable[Planned | launch.RunRequest], libraries: bool = True) -> None:
    """The per-run preflight of every cell, each distinct configuration once, before the first cell runs: one line
    (UserError) for the first that would be refused, before any directory or worker. `libraries` False: an
    allocator library that is not installed fails only its own cells when they start (a matrix's other cells go
    on)."""
    seen: set[tuple[object, ...]] = set()
    for cell in cells:
        planned = cell if isinstance(cell, Planned) else Planned(cell)
        req = planned.req
        key = (id(req.scenario), tuple(req.patches), tuple(req.patch_files), req.allocator,
               req.python if planned.built else None, planned.deepspeed)
        if key in seen:
            continue
        seen.add(key)
        if planned.built:
            launch.check(req if libraries else dataclasses.replace(req, allocator="glibc"))
            continue
        # its environment's bin directory is not there yet (a launcher may be installed in it): the launcher, like
        # the sites and the alloc conf of its torch, is checked when the cell starts
        ds = planned.deepspeed if planned.deepspeed and "/" not in planned.deepspeed else None
        preflight.check_native_pin(req.scenario, req.patches, dict(os.environ), ds)
