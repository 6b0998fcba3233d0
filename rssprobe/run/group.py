"""Running one configuration: a single run with a progress bar, or a group of N fresh runs.

The group runner that run, gate, matrix, plan, scale and bisect share (their requests: run/request.py).
Nothing here prints a result: the workflows return what ran, the commands show it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..config import overlay, patchsets
from ..config.runoptions import RunOptions
from ..config.scenario import Scenario
from ..config.scenariospec import ScenarioSpec
from ..contract.exitcodes import EXIT_INTERRUPTED
from ..contract.glibc import STEADY_MALLOC_ENV
from ..contract.status import Status
from ..errors import UserError
from ..log import say
from ..store.layout import runs_root
from ..store.rundir import GroupDir
from . import envs, launch, request
from .progress import RunProgress

__all__ = ["STEADY_MALLOC_ENV", "Start", "build_request", "exit_code", "order", "run_group", "run_groups",
           "run_one"]

def exit_code(status: str) -> int:
    return {Status.OK: 0, Status.INTERRUPTED: EXIT_INTERRUPTED}.get(status, 1)


def run_one(req: launch.RunRequest, title: str = "") -> launch.RunResult:
    """One run with a progress bar."""
    prepared = launch.prepare(req)
    script = req.scenario.script  # a script's loop decides its steps: --steps N caps them, else it may say
    total = req.scenario.steps if script is None else script.stop_after
    with RunProgress(total, title or f"{req.scenario.name} [{req.label}]",
                     ranks=req.scenario.world_size) as progress:
        # a script's own output (its loss lines) goes to the terminal as it comes, and stays in the log
        return launch.run(prepared, progress, progress.output if script is not None else None)


def run_group(req: launch.RunRequest, repeat: int, title: str = "") -> tuple[GroupDir, list[str]]:
    """N fresh runs of one configuration into a group directory; stops early on Ctrl-C."""
    [(group, statuses)] = run_groups([req], repeat, title=title)
    return group, statuses


# runs one request into its member directory, given a progress title
Execute = Callable[[launch.RunRequest, str], launch.RunResult]


def order(n_groups: int, round_no: int) -> list[int]:
    """The groups' order in round `round_no` (1-based): forwards in odd rounds, backwards in even ones."""
    forwards = list(range(n_groups))
    return forwards if round_no % 2 else forwards[::-1]


def run_groups(reqs: list[launch.RunRequest], repeat: int, execute: Execute | None = None,
               title: str = "") -> list[tuple[GroupDir, list[str]]]:
    """`repeat` fresh runs of each request, measured alternately member by member; stops after an interruption.

    Running all of one group before another turns any drift of the machine (other load, page cache, a
    compile elsewhere) into a perfect separation that a rank test reads as significant; alternating
    spreads it over both, and the order of each round alternates too (A B, then B A, ...), so a steady
    drift does not favour the group that goes first. Returns each request's group and its runs' statuses.
    """
    run = execute or (lambda req, text: run_one(req, title=text))
    request.check_all(reqs)  # every request's per-run preflight before its group's directory (run --repeat, gate)
    made = [GroupDir.create(req.out, req.scenario.name, req.label, repeat) for req in reqs]
    statuses: list[list[str]] = [[] for _ in reqs]
    try:
        for i in range(1, repeat + 1):
            for j in order(len(reqs), i):
                req = reqs[j]
                result = run(dataclasses.replace(req, out=made[j].member(i)),
                             f"{title or f'{req.scenario.name} [{req.label}]'} {i}/{repeat}")
                statuses[j].append(result.status)
                if result.status == Status.INTERRUPTED:
                    return list(zip(made, statuses, strict=True))
        return list(zip(made, statuses, strict=True))
    finally:
        for group in made:
            group.release()


@dataclass
class Start:
    """What `rssprobe run` (and `scale`, per size) was asked for: the scenario, the bundle of run options, and
    what only a run has (its directory, label, patch-set switches, memray, the command line)."""

    spec: ScenarioSpec
    options: RunOptions = field(default_factory=RunOptions)
    out: Path | None = None
    baseline: bool = False
    patched: bool = False
    label: str | None = None
    memray: bool = False
    argv: list[str] = field(default_factory=list)


def default_label(s: Start, scen: Scenario, patch_label: str) -> str:
    """A scenario run's patch label (baseline, patched, the patch names); a script run's is its script's name,
    and the side when --baseline, --patched or a patch chose one (a diff of two scripts then names both)."""
    if scen.script is None:
        return patch_label
    name = Path(scen.script.path).stem
    return name if patch_label == patchsets.BASELINE and not s.baseline else f"{name}-{patch_label}"


def build_request(s: Start) -> launch.RunRequest:
    """The run request of what `run` (and `scale`, per size) was asked for; bad input is a UserError."""
    scen = s.spec.load()
    request.check_scenarios([scen], s.out or runs_root())  # before an environment is built for it
    o = s.options
    patch_label, specs = patchsets.resolve(scen, s.baseline, s.patched, list(o.patches))
    overlay.read_diffs(list(o.patch_files))  # a diff that cannot be used fails before a run directory exists
    if o.patch_files:
        if s.baseline:
            raise UserError("--baseline applies nothing; it cannot be combined with --patch-file")
        names = "+".join(p.stem for p in o.patch_files)
        patch_label = names if patch_label == patchsets.BASELINE else f"{patch_label}+{names}"
    worker_python, env_name = envs.resolve_python(o.env_ref, o.python, log=say)
    argv = [*s.argv, "--env", env_name] if env_name and env_name not in s.argv else list(s.argv)
    return request.make(s.spec, request.varied(o, patches=specs), scen=scen,
                        label=s.label or default_label(s, scen, patch_label), out=s.out,
                        python=worker_python, memray=s.memray, argv=argv)
