"""rssprobe bisect: which version, which patch component, or which commit moved a figure.

  bisect SCENARIO --deepspeed V1,V2,... [--torch T] --metric M   binary search over ordered versions
  bisect SCENARIO --components SET --metric M                    delta debugging over a patch set
  bisect SCENARIO --deepspeed-src PATH --good REV --bad REV      `git bisect run` over commits

Each probe is a run group compared with the reference group (the first version, or the
unpatched baseline) by analysis.stats.compare; an undecided probe gets more repeats, up
to --retries rounds, and is then skipped, never guessed. The result names the culprit,
its figure before and after, and the per-role and per-site differences between the two.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from .. import bisect, envs, gitbisect, host, launcher, scenario, storage
from ..analysis import stats
from ..analysis.compare import Side, compare
from ..analysis.summary import Summary
from ..errors import UserError
from ..reporters import diffviews, views
from ..worker.interventions import expand
from .argv import run_argv
from .env import pip_flags, python_options, say
from .run import execute_group
from .show import FORMATS, emit

ANSWER: dict[str, bisect.Answer] = {"regression": "moved", "improvement": "moved", "same": "same",
                                    "~": "undecided", "undecided": "undecided"}
DEFAULT_METRIC = "budget.rss_after_trim_above_baseline"


def bisect_root() -> Path:
    return Path(os.environ.get("RSSPROBE_BISECT", "reports/bisect"))


def run_group(req: launcher.RunRequest, repeat: int) -> Path:
    """One round of runs (a seam: tests replace it with synthetic groups)."""
    group, _statuses = execute_group(req, repeat, show=False)
    return group.path


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", text)[:60]


@dataclass
class Runner:
    """Rounds of run groups per configuration tried, and the log of every comparison."""

    root: Path
    scen: scenario.Scenario
    ref: str
    sets: list[str]
    repeat: int
    metric: str
    threshold: float
    alpha: float
    groups: dict[str, list[Path]] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)

    def round(self, key: str, label: str, python: tuple[str, str | None], patches: list[str]) -> None:
        rounds = self.groups.setdefault(key, [])
        out = self.root / key / f"round-{len(rounds) + 1}"
        argv = run_argv(self.ref, self.sets, patches, self.repeat, out, python[1], python[0])
        req = launcher.RunRequest(scenario=self.scen, scenario_ref=self.ref, label=label, patches=patches,
                                  python=python[0], out=out, command=argv)
        rounds.append(run_group(req, self.repeat))

    def side(self, key: str) -> Side:
        runs = [r for g in self.groups[key] for r in storage.GroupDir(g).runs()]
        return Side(key, runs, [Summary(r).as_dict() for r in runs])

    def reference(self, key: str) -> Side:
        side = self.side(key)
        if not side.samples(self.metric):
            known = sorted({m for s in side.ok for m in s["metrics"] if not m.startswith("site.")})
            why = "no run finished" if not side.ok else f"known figures: {', '.join(known)}"
            raise UserError(f"--metric {self.metric}: not measured in the reference runs ({why})")
        return side

    def judge(self, ref_key: str, key: str, what: str) -> bisect.Answer:
        a, b = self.side(ref_key), self.side(key)
        xa, xb = a.samples(self.metric), b.samples(self.metric)
        row = {"key": key, "what": what, "round": len(self.groups[key]), "runs": f"{len(b.ok)}/{len(b.summaries)}"}
        if not xb:
            self.log.append({**row, "verdict": "undecided", "reason": "no finished run"})
            say(f"probe {len(self.log)}: {what} (round {row['round']}): undecided, no finished run")
            return "undecided"
        c = stats.compare(self.metric, xa, xb, self.threshold, self.alpha)
        self.log.append({**row, "a": c.mean_a, "b": c.mean_b, "delta": c.delta, "verdict": c.verdict,
                         "reason": c.reason})
        say(f"probe {len(self.log)}: {what} (round {row['round']}): {c.verdict}, {c.reason}")
        return ANSWER[c.verdict]

    def note(self, key: str, what: str, reason: str) -> None:
        self.log.append({"key": key, "what": what, "round": 0, "runs": "0/0", "verdict": "skip", "reason": reason})
        say(f"probe {len(self.log)}: {what}: skipped, {reason}")

    def table(self, reference: str) -> views.Table:
        rows = [[i + 1, r["what"], r["round"], r["runs"], views.bpp(r.get("a")), views.bpp(r.get("b")),
                 views.bpp(r.get("delta"), True), r["verdict"]] for i, r in enumerate(self.log)]
        return views.Table(f"Probes ({self.metric}, bytes per parameter; A = {reference})",
                           ["probe", "tried", "round", "runs ok", "A", "B", "B - A", "verdict"], rows,
                           note=f"a change counts at >= {self.threshold} B/param and p <= {self.alpha}; "
                                "undecided probes get another round of repeats")


@click.command("bisect")
@click.argument("scenario_ref", metavar="[SCENARIO]", default="default")
@click.option("--deepspeed", "ds_list", metavar="V,V,...", help="Ordered DeepSpeed versions to search.")
@click.option("--torch", "torch_list", metavar="V[,V...]", help="Ordered torch versions, or the one torch to use.")
@click.option("--components", metavar="SET|A,B,...", help="Delta-debug the components of a patch set.")
@click.option("--deepspeed-src", type=click.Path(path_type=Path, file_okay=False), help="A DeepSpeed git checkout.")
@click.option("--good", help="With --deepspeed-src: a revision without the change.")
@click.option("--bad", help="With --deepspeed-src: a revision with the change.")
@click.option("--limits", type=click.Path(path_type=Path, dir_okay=False), help="With --deepspeed-src: ceilings TOML.")
@click.option("--limit", type=float, help="With --deepspeed-src: a ceiling for --metric (B/param).")
@click.option("--metric", default=DEFAULT_METRIC, show_default=True, help="The figure (a name from Summary.metrics).")
@click.option("--repeat", default=3, show_default=True, type=click.IntRange(1), help="Runs per probe and round.")
@click.option("--retries", default=3, show_default=True, type=click.IntRange(0),
              help="Extra rounds for an undecided probe before it is skipped.")
@click.option("--threshold", default=stats.THRESHOLD, show_default=True, type=float)
@click.option("--alpha", default=stats.ALPHA, show_default=True, type=float)
@click.option("--steps", type=int, help="Shortcut for --set steps=N.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a scenario field.")
@click.option("--out", type=click.Path(path_type=Path), help="Directory for the runs (default reports/bisect/...).")
@click.option("--keep-envs", is_flag=True, help="With --deepspeed-src: keep the per-revision environments.")
@python_options
@pip_flags
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="terminal")
def command(scenario_ref: str, ds_list: str | None, torch_list: str | None, components: str | None,
            deepspeed_src: Path | None, good: str | None, bad: str | None, limits: Path | None, limit: float | None,
            metric: str, repeat: int, retries: int, threshold: float, alpha: float, steps: int | None,
            overrides: tuple[str, ...], out: Path | None, keep_envs: bool, env_ref: str | None, python: str | None,
            find_links: tuple[str, ...], index_url: str | None, fmt: str) -> None:
    """Find what moved METRIC: a version, a patch component, or a commit."""
    sets = [*overrides, *([f"steps={steps}"] if steps is not None else [])]
    scen = scenario.load(scenario_ref, [*sets, "probes.trim_at_end=true"])
    pip = envs.pip_options(find_links, index_url)
    ds, torch = [v.strip() for v in (ds_list or "").split(",") if v.strip()], \
        [v.strip() for v in (torch_list or "").split(",") if v.strip()]
    if deepspeed_src is not None:
        if not (good and bad):
            raise UserError("--deepspeed-src needs --good REV and --bad REV")
        code = _commits(scen, scenario_ref, sets, deepspeed_src, good, bad, torch[0] if torch else None, limits,
                        limit, metric, repeat, threshold, alpha, out, keep_envs, pip, fmt)
    elif components:
        worker = envs.resolve_python(env_ref, python, pip, say)
        runner = Runner(out or bisect_root() / f"{scen.name}-components-{_slug(components)}", scen, scenario_ref,
                        sets, repeat, metric, threshold, alpha)
        code = _components(runner, components, worker, retries, fmt)
    elif len(ds) > 1 or len(torch) > 1:
        if len(ds) > 1 and len(torch) > 1:
            raise UserError("bisect one axis at a time: a list for --deepspeed or for --torch, not both")
        if env_ref or python:
            raise UserError("--env/--python fix the versions; a version bisect builds one env per version")
        axis, values = ("deepspeed", ds) if len(ds) > 1 else ("torch", torch)
        fixed = torch[0] if axis == "deepspeed" and torch else ds[0] if axis == "torch" and ds else None
        runner = Runner(out or bisect_root() / f"{scen.name}-{axis}-{_slug(values[0])}-{_slug(values[-1])}", scen,
                        scenario_ref, sets, repeat, metric, threshold, alpha)
        code = _versions(runner, axis, values, fixed, retries, pip, fmt)
    else:
        raise UserError("bisect needs two or more versions (--deepspeed V1,V2,... or --torch V1,V2,...), "
                        "--components SET, or --deepspeed-src PATH --good REV --bad REV")
    sys.exit(code)


def _versions(runner: Runner, axis: str, values: list[str], fixed: str | None, retries: int,
              pip: tuple[str, ...], fmt: str) -> int:
    pythons: dict[int, tuple[str, str | None] | UserError] = {}

    def python_for(i: int) -> tuple[str, str | None]:
        if i not in pythons:
            pair = (fixed, values[i]) if axis == "deepspeed" else (values[i], fixed)
            try:
                pythons[i] = envs.for_versions(*pair, pip, say)
            except UserError as e:
                pythons[i] = e
        got = pythons[i]
        if isinstance(got, UserError):
            raise got
        return got

    keys = [f"{i:02d}-{axis}{_slug(v)}" for i, v in enumerate(values)]
    runner.round(keys[0], f"{axis}{values[0]}", python_for(0), [])
    runner.reference(keys[0])

    def probe(i: int) -> bisect.Answer:
        try:
            worker = python_for(i)
        except UserError as e:
            runner.note(keys[i], f"{axis} {values[i]}", str(e))
            return "skip"
        runner.round(keys[i], f"{axis}{values[i]}", worker, [])
        return runner.judge(keys[0], keys[i], f"{axis} {values[i]}")

    result = bisect.search(len(values), probe, retries)
    mean = {k: _mean(runner, k) for k in runner.groups}
    name = {i: f"{axis} {v}" for i, v in enumerate(values)}
    lines = [f"bisect {axis} {', '.join(values)} on {runner.scen.name}: {runner.metric}, threshold "
             f"{runner.threshold} B/param against {name[0]} ({views.bpp(mean[keys[0]])})"]
    before = after = None
    if result.status == "found" and result.first_moved is not None:
        before, after = keys[result.last_same], keys[result.first_moved]
        lines.append(f"FIRST MOVED: {name[result.first_moved]}: {runner.metric} {views.bpp(mean[before])} "
                     f"({name[result.last_same]}) -> {views.bpp(mean[after])} B/param")
    elif result.status == "unchanged":
        lines.append(f"no version moved {runner.metric} by {runner.threshold} B/param or more against {name[0]}")
    else:
        lines.append("UNDECIDED: the change came with one of " + ", ".join(name[i] for i in result.candidates)
                     + f" (last same: {name[result.last_same]}; undecided or untestable: "
                     + ", ".join(name[i] for i in result.skipped) + ")")
    data = {"mode": "versions", "axis": axis, "values": values, "status": result.status,
            "first_moved": None if result.first_moved is None else values[result.first_moved],
            "last_same": values[result.last_same], "candidates": [values[i] for i in result.candidates],
            "probes": runner.log}
    _report(runner, lines, runner.table(name[0]), before, after, data, fmt)
    return 125 if result.status == "ambiguous" else 0


def _components(runner: Runner, components: str, worker: tuple[str, str | None], retries: int, fmt: str) -> int:
    try:
        items = expand([c.strip() for c in components.split(",") if c.strip()])
    except KeyError as e:
        raise UserError(f"--components {components}: unknown intervention {e} (see `rssprobe patches`)") from None
    runner.round("00-baseline", "baseline", worker, [])
    runner.reference("00-baseline")
    keys: dict[tuple[str, ...], str] = {}

    def test(subset: list[str]) -> bool:
        key = keys.setdefault(tuple(subset), f"{len(keys) + 1:02d}-{_slug('+'.join(subset))}")
        for _ in range(retries + 1):
            runner.round(key, "+".join(subset), worker, subset)
            answer = runner.judge("00-baseline", key, " + ".join(subset))
            if answer != "undecided":
                return answer == "moved"
        return False

    lines = [f"bisect components {', '.join(items)} on {runner.scen.name}: {runner.metric}, threshold "
             f"{runner.threshold} B/param against the unpatched baseline"]
    try:
        result = bisect.ddmin(items, test)
    except ValueError:
        lines.append(f"the full set does not move {runner.metric}: nothing to narrow down")
        _report(runner, lines, runner.table("baseline"), None, None, {"mode": "components", "status": "unchanged",
                                                                      "probes": runner.log}, fmt)
        return 0
    after = keys[tuple(result.minimal)]
    lines.append(f"CULPRIT: {' + '.join(result.minimal)} ({len(result.tests)} subsets tested): {runner.metric} "
                 f"{views.bpp(_mean(runner, '00-baseline'))} -> {views.bpp(_mean(runner, after))} B/param")
    data = {"mode": "components", "status": "found", "components": items, "minimal": result.minimal,
            "tests": [{"subset": s, "shows_change": v} for s, v in result.tests], "probes": runner.log}
    _report(runner, lines, runner.table("baseline"), "00-baseline", after, data, fmt)
    return 0


def _mean(runner: Runner, key: str) -> float | None:
    values = runner.side(key).samples(runner.metric)
    return sum(values) / len(values) if values else None


def _report(runner: Runner, lines: list[str], probes: views.Table, before: str | None, after: str | None,
            data: dict[str, Any], fmt: str) -> None:
    tables = [probes]
    if before and after:
        result = compare(runner.side(before), runner.side(after), runner.threshold, runner.alpha, force=True,
                         gated=(runner.metric,)).as_dict()
        tables += diffviews.tables(result)
        data["comparison"] = result
    runner.root.mkdir(parents=True, exist_ok=True)
    storage.write_json_atomic(runner.root / "bisect.json", data)
    emit(fmt, data, [*lines, f"runs under {runner.root}"], tables, alarm=data.get("status") != "unchanged")


def _commits(scen: scenario.Scenario, ref: str, sets: list[str], src: Path, good: str, bad: str, torch: str | None,
             limits: Path | None, limit: float | None, metric: str, repeat: int, threshold: float, alpha: float,
             out: Path | None, keep_envs: bool, pip: tuple[str, ...], fmt: str) -> int:
    src = src.resolve()
    good_c, bad_c = gitbisect.commit(src, good), gitbisect.commit(src, bad)
    torch = torch or host.package_version("torch")
    root = (out or bisect_root() / f"git-{good_c[:10]}-{bad_c[:10]}").resolve()
    runs = root / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    runner = Runner(root, scen, ref, sets, repeat, metric, threshold, alpha)
    before_envs = {e.name for e in envs.list_envs()}
    if limits is not None:
        check = ["--limits", str(limits.resolve())]
    elif limit is not None:
        (root / "limits.toml").write_text(f'[limits]\n"{metric}" = {limit}\n')
        check = ["--limits", str(root / "limits.toml")]
    else:  # against the good revision's figure: a significant increase is bad
        env = envs.create(envs.EnvSpec.parse([f"torch=={torch}", f"deepspeed={src}@{good_c}"]), pip, say)
        if not (runs / good_c / storage.GROUP).is_file():
            req = launcher.RunRequest(scenario=scen, scenario_ref=ref, label=good_c[:10], python=env.python,
                                      out=runs / good_c,
                                      command=run_argv(ref, sets, [], repeat, runs / good_c, env.name, env.python))
            run_group(req, repeat)
        check = ["--reference", str(runs / good_c), "--metric", metric, "--threshold", str(threshold),
                 "--alpha", str(alpha)]
    script = gitbisect.step_script(root / "step.sh", rssprobe=[sys.executable, "-m", "rssprobe"], cwd=Path.cwd(),
                                   runs=runs, torch=torch, source=src, scenario=ref, sets=sets, repeat=repeat,
                                   check=check, pip=pip)
    say(f"git bisect run {script} in a temporary worktree of {src}")
    outcome = gitbisect.run(src, good_c, bad_c, [str(script)], log=say)
    rows = []
    for c, verdict in outcome.verdicts:
        group = runs / c
        figure = _side_mean(group, metric)
        rows.append([c[:10], gitbisect.git(src, "log", "-1", "--format=%s", c, check=False)[:60], verdict,
                     views.bpp(figure)])
    table = views.Table(f"Commits tested ({metric}, bytes per parameter)", ["commit", "subject", "verdict", metric],
                        rows)
    lines = [f"bisect {src} {good_c[:10]}..{bad_c[:10]} on {scen.name}: {' '.join(check)}"]
    data: dict[str, Any] = {"mode": "commits", "good": good_c, "bad": bad_c, "culprit": outcome.culprit,
                            "candidates": outcome.candidates, "verdicts": outcome.verdicts}
    before = after = None
    if outcome.culprit:
        parent = gitbisect.git(src, "rev-parse", f"{outcome.culprit}^")
        for rev in (parent, outcome.culprit):
            if not (runs / rev / storage.GROUP).is_file():
                subprocess.run([str(script), rev], stdout=2)  # its gate table goes to stderr, like bisect's log
        runner.groups = {rev[:10]: [runs / rev] for rev in (parent, outcome.culprit)
                         if (runs / rev / storage.GROUP).is_file()}
        if len(runner.groups) == 2:
            before, after = parent[:10], outcome.culprit[:10]
        subject = gitbisect.git(src, "log", "-1", "--format=%s", outcome.culprit)
        lines.append(f"CULPRIT: {outcome.culprit} {subject}: {metric} {views.bpp(_side_mean(runs / parent, metric))} "
                     f"-> {views.bpp(_side_mean(runs / outcome.culprit, metric))} B/param")
    elif outcome.candidates:
        lines.append("UNDECIDED: only skipped commits left; the first bad one is one of "
                     + ", ".join(c[:10] for c in outcome.candidates))
    else:
        lines.append(f"git bisect run did not finish (exit {outcome.returncode}); see its output above")
    data["status"] = "found" if outcome.culprit else "ambiguous" if outcome.candidates else "failed"
    if not keep_envs:
        for env in envs.list_envs():
            if env.name not in before_envs and any(s.startswith(f"deepspeed={src}@") for s in env.info()["spec"]):
                envs.remove(env.name)
    _report(runner, lines, table, before, after, data, fmt)
    return 0 if outcome.culprit else 125 if outcome.candidates else 1


def _side_mean(group: Path, metric: str) -> float | None:
    if not (group / storage.GROUP).is_file():
        return None
    values = Side.load(str(group)).samples(metric)
    return sum(values) / len(values) if values else None
