"""Which bisect a command line asks for, and where its runs go: the one entry point of bisect."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ...analysis import metrics, stats
from ...config.limits import load_limits
from ...config.runoptions import RunOptions
from ...config.scenariospec import ScenarioSpec
from ...contract.glibc import STEADY_MALLOC_ENV
from ...errors import UserError
from ...log import say
from ...run import envs, host, request
from ...store import layout, outputs
from ..matrix import Outcome
from . import git
from .commits import bisect_commits
from .components import bisect_components, components
from .rounds import DEFAULT_METRIC, Runner
from .versions import bisect_versions


@dataclass
class BisectRequest:
    spec: ScenarioSpec = field(default_factory=lambda: ScenarioSpec("default"))
    deepspeed: list[str] = field(default_factory=list)
    torch: list[str] = field(default_factory=list)
    transformers: list[str] = field(default_factory=list)  # releases, or a local clone's PATH[@REV]
    accelerate: list[str] = field(default_factory=list)
    components: str | None = None
    deepspeed_src: Path | None = None
    good: str | None = None
    bad: str | None = None
    limits: Path | None = None
    limit: float | None = None
    metric: str = DEFAULT_METRIC
    direction: str = "up"  # up, down, or auto (the bad endpoint says)
    retries: int = 3
    threshold: float = stats.THRESHOLD
    alpha: float = stats.ALPHA
    out: Path | None = None
    fresh: bool = False
    keep_envs: bool = False
    # repeat, environment or python (a components bisect) and glibc knobs of every round
    options: RunOptions = field(default_factory=lambda: RunOptions(repeat=3, malloc_env=dict(STEADY_MALLOC_ENV)))
    pip: tuple[str, ...] = ()


def bisect(b: BisectRequest) -> Outcome:
    """Validate everything that can be checked without a run, then run the chosen bisect; its exit code."""
    if b.deepspeed_src is not None:  # the user's checkout: nothing this bisect writes lands in it
        outputs.note(b.deepspeed_src)
    scen = b.spec.with_(trim_at_end=True).load()
    ds, torch = envs.axis_values("--deepspeed", b.deepspeed), envs.axis_values("--torch", b.torch)
    libraries = {name: envs.axis_values(f"--{name}", getattr(b, name)) for name in envs.LIBRARIES}
    if b.components is not None and any(libraries.values()):
        given = next(name for name, values in libraries.items() if values)
        raise UserError(f"--{given} beside --components: a components bisect runs one environment (--env or "
                        "--python); bisect the versions on their own")
    # as run does: a model that cannot fit, or an allocator setting no torch of the bisect takes, is refused before
    # any environment or run
    request.check_scenarios([scen], torches=list(torch) or [None], python=b.options.python)
    if b.components is not None:
        components(b.components)  # an empty or unknown set fails before any note or run
    if b.limits is not None:  # read now, not by the first step's gate after minutes of runs
        if b.deepspeed_src is None:
            raise UserError(f"--limits {b.limits}: ceilings decide a commit bisect (--deepspeed-src); a version or "
                            "component bisect compares against the reference's runs")
        if b.limit is not None:
            raise UserError(f"--limits {b.limits} and --limit {b.limit:g}: give one ceiling source")
        for name in load_limits(b.limits):
            metrics.check(f"{b.limits}:", name, scen)

    # every round's per-run preflight that needs no Python of its own (each round's environment is built when it
    # starts): the native pin's pair, DeepSpeed release and lock limit, with every component applied
    applied = tuple(components(b.components)) if b.components else ()
    base = request.make(b.spec, RunOptions(patches=applied), scen=scen, label="bisect")
    request.check_all(request.Planned(base, built=False, deepspeed=v) for v in (ds or [None]))

    def runner(root: Path) -> Runner:
        return Runner(root, scen, b.spec, b.options.runs, b.metric, b.threshold, b.alpha,
                      dict(b.options.malloc_env),
                      None if b.direction == "auto" else "down" if b.direction == "down" else "up")

    if b.deepspeed_src is not None:
        if not (b.good and b.bad):
            raise UserError("--deepspeed-src needs --good REV and --bad REV")
        src = b.deepspeed_src.resolve()
        good_c, bad_c = git.commit(src, b.good), git.commit(src, b.bad)
        if good_c == bad_c:
            raise UserError(f"--good {b.good} and --bad {b.bad} are the same commit ({good_c[:10]}): nothing to bisect")
        r = runner((b.out or layout.bisect_root() / f"git-{good_c[:10]}-{bad_c[:10]}").resolve())
        r.open({"mode": "commits", "source": str(src), "good": good_c, "bad": bad_c, "torch": torch[:1]}, b.fresh)
        return bisect_commits(r, src, good_c, bad_c, torch[0] if torch else None, b.limits, b.limit, b.keep_envs,
                              b.pip)
    if b.components:
        worker = envs.resolve_python(b.options.env_ref, b.options.python, b.pip, say)
        name = f"{layout.slug(scen.name, 60)}-components-{layout.slug(b.components, 60)}"
        r = runner(b.out or layout.bisect_root() / name)
        r.open({"mode": "components", "components": b.components, "python": worker[0]}, b.fresh)
        return bisect_components(r, b.components, worker, b.retries)
    lists = [name for name, given in (("deepspeed", ds), ("torch", torch), *libraries.items()) if len(given) > 1]
    if lists:
        if len(lists) > 1:
            raise UserError(f"bisect one axis at a time: a list for one of --{', --'.join(lists)}, not several")
        if b.options.env_ref or b.options.python:
            raise UserError("--env/--python fix the versions; a version bisect builds one env per version")
        axis = lists[0]
        values = {"deepspeed": ds, "torch": torch, **libraries}[axis]
        fixed: str | tuple[str | None, str | None, tuple[str, ...]] | None
        if axis in libraries:  # torch and DeepSpeed fixed (given or this Python's), the other library as given
            name = next(n for n in libraries if n != axis)
            given = libraries[name][0] if libraries[name] else None
            others: tuple[str, ...] = (envs.library_requirement(name, given),) if given else ()
            if axis == "transformers" and not given:  # transformers' DeepSpeed integration needs accelerate
                mine = host.package_version("accelerate")
                others = (f"accelerate=={mine}" if mine else "accelerate",)
            fixed = (torch[0] if torch else None, ds[0] if ds else None, others)
        else:
            fixed = torch[0] if axis == "deepspeed" and torch else ds[0] if axis == "torch" and ds else None
        name = f"{layout.slug(scen.name, 60)}-{axis}-{layout.slug(values[0], 60)}-{layout.slug(values[-1], 60)}"
        r = runner(b.out or layout.bisect_root() / name)
        r.open({"mode": "versions", "axis": axis, "values": values, "fixed": fixed}, b.fresh)
        return bisect_versions(r, axis, values, fixed, b.retries, b.pip)
    raise UserError("bisect needs two or more versions (--deepspeed, --torch, --transformers or --accelerate "
                    "V1,V2,...), "
                    "--components SET, or --deepspeed-src PATH --good REV --bad REV")
