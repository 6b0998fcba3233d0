"""One verdict, one meaning: each verdict walked through gate, JUnit, version bisect and commit bisect
(synthetic run groups, a real `git bisect run` on a small repository; no training here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from rssprobe import verdicts
from rssprobe.analysis import stats
from rssprobe.campaign.bisect import git as gitbisect
from rssprobe.campaign.bisect import rounds as bisect_rounds
from rssprobe.cli import main
from rssprobe.run import envs
from rssprobe.run import launch as launcher
from rssprobe.store import rundir as storage

from .fakes_rundir import Step, make_run

# steady.rss samples (B/param) of A and B that give each figure verdict
SAMPLES = {
    "regression": ([20.0, 20.01, 20.02], [22.0, 22.01, 22.02]),
    "improvement": ([20.0, 20.01, 20.02], [18.0, 18.01, 18.02]),
    "same": ([20.0, 20.01, 20.02], [20.05, 20.0, 20.03]),
    "~": ([20.0, 21.0, 20.0], [21.0, 20.0, 21.5]),
    "undecided": ([20.0], [22.0]),
}
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def _group(path: Path, values: list[float]) -> Path:
    group = storage.GroupDir.create(path, "tiny", path.name, len(values))
    for i, v in enumerate(values, start=1):
        make_run(group.path, run_id=f"run-{i:02d}", label=path.name, steps=[Step(rss=v)] * 3)
    return group.path


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


def test_the_table_covers_every_verdict_stats_can_give() -> None:
    assert set(SAMPLES) | {"pass"} == set(verdicts.TABLE)
    for v, (a, b) in SAMPLES.items():
        assert stats.compare("steady.rss", a, b).verdict == v
    # an answer for a sought decrease swaps the two directions and nothing else
    assert verdicts.answer("improvement", "down") == "moved" and verdicts.answer("regression", "down") == "same"
    assert verdicts.answer("~", "down") == verdicts.answer("~") == "undecided"


@pytest.mark.integration
@pytest.mark.parametrize("verdict", list(SAMPLES))
def test_gate_junit_version_bisect_and_commit_bisect_agree(verdict: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    meaning = verdicts.meaning(verdict)
    a_values, b_values = SAMPLES[verdict]
    a, b = _group(tmp_path / "A", a_values), _group(tmp_path / "B", b_values)

    # gate: its exit code and the JUnit state of the deciding figure
    junit = tmp_path / "gate.xml"
    proc = CliRunner().invoke(main, ["gate", "--reference", str(a), "--candidate", str(b), "--metric", "steady.rss",
                                     "--junit", str(junit), "--format", "json"])
    assert proc.exit_code == meaning.exit_code, proc.output
    overall = json.loads(proc.stdout)["verdict"]
    assert verdicts.exit_code(overall) == meaning.exit_code
    case = next(c for c in ET.parse(junit).getroot() if c.get("name") == "steady.rss")
    state = "failure" if case.find("failure") is not None else "skipped" if case.find("skipped") is not None \
        else "passed"
    assert state == meaning.junit

    # version bisect over [A, B]: the answer of B's probe decides the outcome
    def run_group(req: launcher.RunRequest, repeat: int) -> Path:
        values = a_values if req.label.endswith("0.1") else b_values
        return _group(req.out, values)

    monkeypatch.setattr(bisect_rounds, "run_group", run_group)
    monkeypatch.setattr(envs, "for_versions", lambda torch, ds, pip=(), log=None: (sys.executable, f"fake-ds{ds}"))
    proc = CliRunner().invoke(main, ["bisect", "tiny", "--deepspeed", "0.1,0.2", "--metric", "steady.rss", "--repeat",
                                     str(len(a_values)), "--retries", "0", "--out", str(tmp_path / "bisect"),
                                     "--format", "json"])
    data = json.loads(proc.stdout)
    expected = {"moved": "found", "same": "unchanged", "undecided": "ambiguous"}[meaning.bisect]
    assert data["status"] == expected, proc.output
    assert proc.exit_code == (125 if meaning.bisect == "undecided" else 0)
    assert data["probes"][-1]["verdict"] == verdict and data["probes"][-1]["answer"] == meaning.bisect

    # commit bisect: git reads the gate's exit code as good, bad or skip of the one commit between
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "-c", "init.defaultBranch=main", "init", "-q")
    commits = []
    for i in range(3):
        (repo / "n.txt").write_text(f"{i}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"commit {i}")
        commits.append(_git(repo, "rev-parse", "HEAD"))
    step = tmp_path / "step.sh"
    step.write_text(f"#!/bin/sh\n{sys.executable} -m rssprobe gate --reference {a} --candidate {b} "
                    "--metric steady.rss >/dev/null 2>&1\n")
    step.chmod(0o755)
    outcome = gitbisect.run(repo, commits[0], commits[2], [str(step)])
    git_word = {"moved": "bad", "same": "good", "undecided": "skip"}[meaning.bisect]
    assert (commits[1], git_word) in outcome.verdicts
    if meaning.bisect == "moved":
        assert outcome.culprit == commits[1]
    elif meaning.bisect == "same":
        assert outcome.culprit == commits[2]
    else:
        assert outcome.culprit is None and set(outcome.candidates) == {commits[1], commits[2]}
