"""Bisect over commits of a DeepSpeed checkout with `git bisect run`, the gate as its test.

Each step builds an environment for the revision, runs a group and asks `rssprobe gate`
(against --limits/--limit ceilings, else against the good revision's group); the gate's
exit code is its verdict's (rssprobe.verdicts), which git reads as good, bad or skip.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from ...analysis import stats
from ...analysis.compare import Side
from ...log import say
from ...run import envs, host
from ...store import outputs
from ...store.rundir import GroupDir
from ..matrix import Outcome
from . import git, rounds
from .rounds import Runner, bpp


def _side_mean(group: Path, metric: str) -> float | None:
    if not GroupDir.is_group(group):
        return None
    return stats.mean_sd(Side.load(str(group)).samples(metric))[0]


def bisect_commits(runner: Runner, src: Path, good: str, bad: str, torch: str | None, limits: Path | None,
                   limit: float | None, keep_envs: bool, pip: tuple[str, ...]) -> Outcome:
    metric, spec, repeat = runner.metric, runner.spec, runner.repeat
    good_c, bad_c = git.commit(src, good), git.commit(src, bad)
    torch = torch or host.package_version("torch")
    runs = runner.root / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    before_envs = {e.name for e in envs.list_envs()}
    if limits is not None:
        check = ["--limits", str(limits.resolve())]
    elif limit is not None:
        outputs.replace(runner.root / "limits.toml", f'[limits]\n"{metric}" = {limit}\n')
        check = ["--limits", str(runner.root / "limits.toml")]
    else:  # against the good revision's figure: a significant increase is bad
        env = envs.create(envs.EnvSpec.parse([f"torch=={torch}", f"deepspeed={src}@{good_c}"]), pip, say)
        if not GroupDir.is_group(runs / good_c):
            rounds.run_group(runner.request(good_c[:10], [], env.python, runs / good_c, env.name), repeat)
        check = ["--reference", str(runs / good_c), "--metric", metric, "--threshold", str(runner.threshold),
                 "--alpha", str(runner.alpha)]
    script = git.step_script(runner.root / "step.sh", rssprobe=[sys.executable, "-m", "rssprobe"], cwd=Path.cwd(),
                             runs=runs, torch=torch, source=src, spec=spec, repeat=repeat,
                             check=check, pip=pip, malloc_env=runner.malloc_env)
    say(f"git bisect run {script} in a temporary worktree of {src}")
    outcome = git.run(src, good_c, bad_c, [str(script)], log=say)
    tested = [{"commit": c, "subject": git.git(src, "log", "-1", "--format=%s", c, check=False)[:60],
               "verdict": verdict, "mean": _side_mean(runs / c, metric)} for c, verdict in outcome.verdicts]
    lines = [f"bisect {src} {good_c[:10]}..{bad_c[:10]} on {runner.scen.name}: {' '.join(check)}"]
    data: dict[str, Any] = {"mode": "commits", "good": good_c, "bad": bad_c, "culprit": outcome.culprit,
                            "candidates": outcome.candidates, "verdicts": outcome.verdicts, "commits": tested}
    before = after = None
    if outcome.culprit:
        parent = git.git(src, "rev-parse", f"{outcome.culprit}^")
        for rev in (parent, outcome.culprit):
            if not GroupDir.is_group(runs / rev):
                subprocess.run([str(script), rev], stdout=2)  # its gate table goes to stderr, like bisect's log
        runner.groups = {rev[:10]: [runs / rev] for rev in (parent, outcome.culprit)
                         if GroupDir.is_group(runs / rev)}
        if len(runner.groups) == 2:
            before, after = parent[:10], outcome.culprit[:10]
        subject = git.git(src, "log", "-1", "--format=%s", outcome.culprit)
        lines.append(f"CULPRIT: {outcome.culprit} {subject}: {metric} {bpp(_side_mean(runs / parent, metric))} "
                     f"-> {bpp(_side_mean(runs / outcome.culprit, metric))} B/param")
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
    result = runner.report(lines, "the good revision", before, after, data)
    result.exit_code = 0 if outcome.culprit else 125 if outcome.candidates else 1
    return result
