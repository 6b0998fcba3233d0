"""Drive `git bisect run` over a local checkout without touching the user's checkout at all.

The bisection runs in a temporary clone of the checkout that borrows its objects (`git clone --shared`:
nothing is written into the user's repository, not even the worktree records or a packed-refs file that
a worktree of it would leave), removed afterwards, bisect state included; the user's branch, index, refs and
files stay as they were. The step
command follows git's exit codes: 0 good, 1-127 bad except 125 skip, 128 and above abort.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...config.scenariospec import ScenarioSpec
from ...errors import UserError
from ...store import outputs

FIRST_BAD = re.compile(r"^([0-9a-f]{40}) is the first bad commit", re.M)
LOGGED = re.compile(r"^# (good|bad|skip): \[([0-9a-f]{40})\]", re.M)


@dataclass
class Outcome:
    culprit: str | None  # the first bad commit, when git could name one
    candidates: list[str]  # skipped commits git could not tell apart (culprit None)
    verdicts: list[tuple[str, str]] = field(default_factory=list)  # (commit, good|bad|skip) in bisect order
    output: str = ""
    returncode: int = 0


def git(repo: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise UserError(f"{repo}: git {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip()


def commit(repo: Path, rev: str) -> str:
    out = git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if not out:
        raise UserError(f"{repo}: {rev} is not a revision of a git checkout there")
    return out


def run(repo: Path, good: str, bad: str, step: list[str], log: Callable[[str], None] = lambda s: None) -> Outcome:
    """git bisect start BAD GOOD; git bisect run STEP..., in a throwaway worktree of repo."""
    good_c, bad_c = commit(repo, good), commit(repo, bad)
    with tempfile.TemporaryDirectory(prefix="rssprobe-bisect-") as tmp:
        tree = Path(tmp) / "tree"
        clone = subprocess.run(["git", "clone", "--quiet", "--shared", "--no-checkout", str(repo), str(tree)],
                               capture_output=True, text=True)
        if clone.returncode != 0:
            raise UserError(f"{repo}: git clone --shared failed: {clone.stderr.strip() or clone.stdout.strip()}")
        git(tree, "checkout", "--quiet", "--detach", bad_c)
        try:
            git(tree, "bisect", "start", bad_c, good_c)
            lines = []
            with subprocess.Popen(["git", "-C", str(tree), "bisect", "run", *step], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) as proc:
                assert proc.stdout is not None
                for line in proc.stdout:
                    lines.append(line)
                    log(line.rstrip())
            output = "".join(lines)
            verdicts = [(c, v) for v, c in LOGGED.findall(git(tree, "bisect", "log", check=False))]
        finally:
            git(tree, "bisect", "reset", check=False)  # the clone goes with the temporary directory
    found = FIRST_BAD.search(output)
    candidates = []
    if not found and "could be any of" in output:
        candidates = re.findall(r"^([0-9a-f]{40})$", output.split("could be any of", 1)[1], re.M)
    return Outcome(found.group(1) if found else None, candidates, verdicts, output, proc.returncode)


STEP = """#!/bin/sh
# One `git bisect run` step, written by rssprobe bisect. Exit: 0 good, 1 bad, 125 skip, 128 abort
# (the gate's exit code is its verdict's, from rssprobe.verdicts: "~" and undecided skip).
rev=${{1:-$(git rev-parse HEAD)}}
out={runs}/$rev
cd {cwd} || exit 128
{rssprobe} env create {torch} {source}"@$rev" {pip} >&2 || exit 125  # cannot build it: skip
rm -rf "$out"
{rssprobe} run {scenario} --repeat {repeat} --out "$out" --env {torch}" "{source}"@$rev" \\
    {malloc} {tail} >&2
case $? in 130|143) exit 128;; esac  # Ctrl-C or SIGTERM: stop bisecting
{rssprobe} gate --candidate "$out" {check}
code=$?
[ $code -eq 2 ] && exit 128  # a usage error is not a bad commit: stop
exit $code
"""


def step_script(path: Path, *, rssprobe: list[str], cwd: Path, runs: Path, torch: str, source: Path,
                spec: ScenarioSpec, repeat: int, check: list[str], pip: tuple[str, ...],
                malloc_env: dict[str, str] | None = None) -> Path:
    """Write the per-commit script (build an env for the revision, run, gate) and make it executable."""
    q = shlex.quote
    words, tail = spec.with_(trim_at_end=True).words()
    outputs.replace(path, STEP.format(
        runs=q(str(runs)), cwd=q(str(cwd)), rssprobe=" ".join(q(a) for a in rssprobe), torch=q(f"torch=={torch}"),
        source=q(f"deepspeed={source}"), pip=" ".join(q(a) for a in pip),
        scenario=" ".join(q(w) for w in words), tail=" ".join(q(w) for w in tail), repeat=repeat,
        check=" ".join(q(a) for a in check),
        malloc=" ".join(f"--malloc-env {q(f'{k}={v}')}" for k, v in (malloc_env or {}).items())))
    path.chmod(0o755)
    return path
