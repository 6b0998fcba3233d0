"""bisect: the binary search and ddmin on synthetic answers, `git bisect run` with gate's exit codes
on a small synthetic repository, and the CLI over synthetic run groups (no training anywhere here)."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rssprobe import verdicts
from rssprobe.analysis import stats
from rssprobe.campaign.bisect import git as gitbisect
from rssprobe.campaign.bisect import rounds as bisect_rounds
from rssprobe.campaign.bisect import search as bisect
from rssprobe.cli import main
from rssprobe.config.scenariospec import ScenarioSpec
from rssprobe.reporters import output, show
from rssprobe.reporters.view import View
from rssprobe.run import envs
from rssprobe.run import launch as launcher
from rssprobe.store import rundir as storage

from .fakes_rundir import Step, make_run
from .test_results import assert_declared

ANSWER = {v: verdicts.answer(v) for v in verdicts.VERDICTS}  # a sought increase


def _noisy_probe(n: int, step: int, rng: random.Random, undecided: dict[int, int]):
    """A probe over a figure that jumps by 2 B/param at `step`, with Gaussian noise, judged by stats.compare
    on 3 vs 3 samples; index i first answers "undecided" undecided[i] times."""
    def figure(i: int) -> list[float]:
        return [30.0 + (2.0 if i >= step else 0.0) + rng.gauss(0, 0.05) for _ in range(3)]

    reference = figure(0)
    asked: dict[int, int] = {}

    def probe(i: int) -> bisect.Answer:
        asked[i] = asked.get(i, 0) + 1
        if asked[i] <= undecided.get(i, 0):
            return "undecided"
        return ANSWER[stats.compare("steady.rss", reference, figure(i)).verdict]

    return probe


@pytest.mark.parametrize("n", [8, 13, 32, 50, 64])
def test_search_finds_a_noisy_step_in_about_log2_n_probes(n: int) -> None:
    rng = random.Random(n)
    for step in sorted({1, n // 3, n // 2, n - 1, rng.randrange(1, n)}):
        undecided = {i: rng.choice([0, 0, 1, 2]) for i in range(n)}  # up to 2 retries each, fewer than the cap
        result = bisect.search(n, _noisy_probe(n, step, rng, undecided), retries=3)
        retries = sum(1 for p in result.probes if p.answer == "undecided")
        assert result.status == "found" and result.first_moved == step and result.last_same == step - 1
        assert len(result.probes) <= math.ceil(math.log2(n)) + retries
        assert not result.skipped


def test_search_reports_no_change_when_nothing_moved() -> None:
    result = bisect.search(16, lambda i: "same")
    assert result.status == "unchanged" and result.first_moved is None and result.last_same == 15
    assert len(result.probes) == 4


def test_an_index_undecided_twice_is_asked_again_and_then_trusted() -> None:
    asked: list[int] = []

    def probe(i: int) -> bisect.Answer:
        asked.append(i)
        if i == 4 and asked.count(4) <= 2:
            return "undecided"
        return "moved" if i >= 5 else "same"

    result = bisect.search(8, probe, retries=3)
    assert result.status == "found" and result.first_moved == 5
    assert [(p.index, p.attempt, p.answer) for p in result.probes if p.index == 4] == \
        [(4, 1, "undecided"), (4, 2, "undecided"), (4, 3, "same")]
    assert len(result.probes) == 3 + 2


def test_an_index_that_stays_undecided_is_reported_not_guessed() -> None:
    def probe(i: int) -> bisect.Answer:
        if i == 4:
            return "undecided"
        return "moved" if i >= 4 else "same"

    result = bisect.search(8, probe, retries=3)
    assert result.status == "ambiguous" and result.skipped == [4]
    assert result.last_same == 3 and result.candidates == [4, 5]  # it came with 4 or with 5: not decided
    assert sum(1 for p in result.probes if p.index == 4) == 4  # 1 + 3 retries, then skipped


def test_a_skip_is_not_retried_and_the_search_goes_around_it() -> None:
    asked: list[int] = []

    def probe(i: int) -> bisect.Answer:
        asked.append(i)
        return "skip" if i == 4 else "moved" if i >= 6 else "same"

    result = bisect.search(8, probe)
    assert result.status == "found" and result.first_moved == 6 and asked.count(4) == 1


def test_ddmin_finds_one_leaking_component_among_six_harmless_ones() -> None:
    items = ["a", "b", "c", "leak", "d", "e", "f"]
    result = bisect.ddmin(items, lambda subset: "leak" in subset)
    assert result.minimal == ["leak"]
    assert len(result.tests) <= 2 * math.ceil(math.log2(len(items))) + 1
    assert len({tuple(s) for s, _ in result.tests}) == len(result.tests)  # no subset run twice


def test_ddmin_finds_a_pair_that_only_leaks_together() -> None:
    items = ["a", "b", "x", "c", "d", "y", "e"]
    result = bisect.ddmin(items, lambda subset: "x" in subset and "y" in subset)
    assert result.minimal == ["x", "y"]
    assert len({tuple(s) for s, _ in result.tests}) == len(result.tests)


def test_ddmin_refuses_a_set_that_does_not_show_the_change() -> None:
    with pytest.raises(ValueError):
        bisect.ddmin(["a", "b"], lambda subset: False)


# ---- git bisect run with gate's exit codes -------------------------------------------------------

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid"}
# figure.txt per commit: crosses the limit of 30 at commit 7 (and 27 at commit 6); commits 4 and 5 cannot be
# tested (exit 125), and one of them is git's first midpoint
FIGURES = [26.0, 26.1, 26.0, 26.2, 26.1, 26.0, 28.0, 31.5, 31.4, 31.6]
BROKEN = {4, 5}
CHECK = """import pathlib, sys
# mimics `rssprobe gate --limits`: 0 pass, 1 regression, 125 undecided (this revision cannot be run)
if pathlib.Path("BROKEN").exists():
    sys.exit(125)
sys.exit(1 if float(pathlib.Path("figure.txt").read_text()) > 30.0 else 0)
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, list[str], Path]:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "-c", "init.defaultBranch=main", "init", "-q")
    commits = []
    for i, figure in enumerate(FIGURES):
        (repo / "figure.txt").write_text(f"{figure}\n")
        broken = repo / "BROKEN"
        if i in BROKEN:
            broken.write_text("does not build\n")
        elif broken.exists():
            broken.unlink()
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"commit {i}")
        commits.append(_git(repo, "rev-parse", "HEAD"))
    check = tmp_path / "check.py"
    check.write_text(CHECK)
    return repo, commits, check


def test_git_bisect_run_recipe_names_the_commit_that_crossed_the_limit(history) -> None:
    repo, commits, check = history
    _git(repo, "bisect", "start", commits[-1], commits[0])
    out = _git(repo, "bisect", "run", sys.executable, str(check))
    log = _git(repo, "bisect", "log")
    _git(repo, "bisect", "reset")
    assert f"{commits[7]} is the first bad commit" in out
    assert "# skip:" in log  # the midpoint was untestable, and git went around it


def test_the_driver_bisects_in_a_throwaway_clone(history) -> None:
    repo, commits, check = history
    head = _git(repo, "rev-parse", "HEAD")
    outcome = gitbisect.run(repo, commits[0], commits[-1], [sys.executable, str(check)])
    assert outcome.culprit == commits[7]
    assert ("skip" in {v for _c, v in outcome.verdicts}) and not outcome.candidates
    assert _git(repo, "rev-parse", "HEAD") == head and _git(repo, "status", "--porcelain") == ""
    assert len(_git(repo, "worktree", "list").splitlines()) == 1  # no worktree of the checkout (a clone, gone)


def test_the_driver_lists_candidates_when_only_skipped_commits_are_left(history, tmp_path: Path) -> None:
    repo, commits, _check = history
    check = tmp_path / "check-27.py"  # crossed at commit 6, right after the untestable 4 and 5: git cannot tell
    check.write_text(CHECK.replace("30.0", "27.0"))
    outcome = gitbisect.run(repo, commits[0], commits[-1], [sys.executable, str(check)])
    assert outcome.culprit is None and outcome.candidates
    assert set(outcome.candidates) == {commits[4], commits[5], commits[6]}


FAKE_RSSPROBE = """#!/bin/sh
# stands in for rssprobe: records its arguments, exits with the code the test chose per subcommand
printf '%s|' "$@" >> "$LOG"; echo >> "$LOG"
case "$1" in env) exit "$ENV_CODE";; run) exit "$RUN_CODE";; gate) exit "$GATE_CODE";; esac
"""


@pytest.mark.parametrize(("env_code", "run_code", "gate_code", "expected"), [
    (0, 0, 0, 0), (0, 0, 1, 1), (0, 1, 125, 125), (2, 0, 0, 125), (0, 0, 2, 128), (0, 130, 0, 128), (0, 143, 0, 128)])
def test_the_step_script_maps_rssprobe_exit_codes_to_git_bisect(tmp_path: Path, env_code: int, run_code: int,
                                                                 gate_code: int, expected: int) -> None:
    fake = tmp_path / "rssprobe"
    fake.write_text(FAKE_RSSPROBE)
    fake.chmod(0o755)
    script = gitbisect.step_script(tmp_path / "step.sh", rssprobe=[str(fake)], cwd=tmp_path, runs=tmp_path / "runs",
                                   torch="2.13.0", source=Path("/src/Deep Speed"),
                                   spec=ScenarioSpec("tiny", ("zero.stage=1",), steps=2), repeat=3,
                                   check=["--limits", "/l.toml"], pip=())
    log = tmp_path / "log"
    env = {**os.environ, "LOG": str(log), "ENV_CODE": str(env_code), "RUN_CODE": str(run_code),
           "GATE_CODE": str(gate_code)}
    assert subprocess.run([str(script), "abc123"], env=env, capture_output=True).returncode == expected
    calls = [line.rstrip("|").split("|") for line in log.read_text().splitlines()]
    assert calls[0] == ["env", "create", "torch==2.13.0", "deepspeed=/src/Deep Speed@abc123"]
    if env_code == 0:
        assert calls[1] == ["run", "tiny", "--set", "zero.stage=1", "--steps", "2", "--trim-at-end", "--repeat", "3",
                            "--out",
                            f"{tmp_path}/runs/abc123", "--env", "torch==2.13.0 deepspeed=/src/Deep Speed@abc123"]
    if env_code == 0 and run_code not in (130, 143):  # Ctrl-C or SIGTERM (CI cancel): stop, no gate
        assert calls[2] == ["gate", "--candidate", f"{tmp_path}/runs/abc123", "--limits", "/l.toml"]


# ---- the CLI over synthetic run groups ----------------------------------------------------------

def _fake_groups(monkeypatch: pytest.MonkeyPatch, figure) -> list[launcher.RunRequest]:
    """Replace real runs by synthetic groups whose steady RSS is figure(request, run number)."""
    requests = []

    def run_group(req: launcher.RunRequest, repeat: int) -> Path:
        requests.append(req)
        group = storage.GroupDir.create(req.out, req.scenario.name, req.label, repeat)
        for i in range(1, repeat + 1):
            rss = figure(req, len(requests) * 10 + i)
            make_run(group.path, run_id=f"run-{i:02d}", label=req.label,
                     steps=[Step(rss=rss), Step(rss=rss), Step(rss=rss)])
        return group.path

    monkeypatch.setattr(bisect_rounds, "run_group", run_group)
    monkeypatch.setattr(envs, "for_versions",
                        lambda torch, ds, pip=(), log=None: (sys.executable, f"fake-ds{ds}"))
    return requests


def test_version_bisect_cli_names_the_first_version_that_moved(monkeypatch, tmp_path: Path) -> None:
    versions = ["0.17.0", "0.17.2", "0.17.5", "0.18.0", "0.18.2", "0.18.4", "0.19.0", "0.19.8"]
    moved = {f"deepspeed{v}" for v in versions[4:]}
    rng = random.Random(1)
    requests = _fake_groups(monkeypatch, lambda req, k: 20.0 + (1.5 if req.label in moved else 0)
                            + rng.gauss(0, 0.02))
    proc = CliRunner().invoke(main, ["bisect", "tiny", "--deepspeed", ",".join(versions), "--metric", "steady.rss",
                                     "--out", str(tmp_path / "b"), "--format", "json"])
    assert proc.exit_code == 0, proc.output
    data = json.loads(proc.stdout)
    assert_declared("bisect versions", data)
    assert data["status"] == "found" and data["first_moved"] == "0.18.2" and data["last_same"] == "0.18.0"
    assert data["answer"][0].startswith("deepspeed 0.18.2 is the first version that moves steady RSS")
    assert len(requests) == 1 + 3  # the reference, then ceil(log2(8)) probes
    assert all(r.command[:2] == ["rssprobe", "run"] and "--env" in r.command for r in requests)
    comparison = data["comparison"]
    steady = next(c for c in comparison["comparisons"]["phases"] if c["metric"] == "steady.rss")
    assert steady["verdict"] == "regression" and steady["delta"] == pytest.approx(1.5, abs=0.1)
    assert "roles" in comparison["comparisons"] and "sites" in comparison["comparisons"]
    assert json.loads((tmp_path / "b" / "bisect.json").read_text())["first_moved"] == "0.18.2"


def test_version_bisect_cli_adds_repeats_to_an_undecided_probe(monkeypatch, tmp_path: Path) -> None:
    # one run per round cannot be significant: every probe that moved needs more rounds, then decides
    _fake_groups(monkeypatch, lambda req, k: 20.0 + (1.5 if req.label.endswith("0.3") else 0) + k * 1e-4)
    proc = CliRunner().invoke(main, ["bisect", "tiny", "--deepspeed", "0.1,0.2,0.3", "--metric", "steady.rss",
                                     "--repeat", "1", "--out", str(tmp_path / "b"), "--format", "json"])
    assert proc.exit_code == 125, proc.output
    data = json.loads(proc.stdout)
    rounds = [p["round"] for p in data["probes"] if p["what"] == "deepspeed 0.3"]
    assert rounds == [1, 2, 3, 4]  # 1 vs 1..4 runs never reaches p <= 0.05 (reference has one run)
    assert data["status"] == "ambiguous" and "0.3" in data["candidates"]


def test_component_bisect_cli_finds_the_component_that_moves_the_figure(monkeypatch, tmp_path: Path) -> None:
    rng = random.Random(2)
    _fake_groups(monkeypatch, lambda req, k: 25.0 - (2.0 if "pr8132.malloc-trim" in req.patches else 0)
                 + rng.gauss(0, 0.02))
    proc = CliRunner().invoke(main, ["bisect", "tiny", "--components", "pr8132", "--metric", "steady.rss",
                                     "--out", str(tmp_path / "c"), "--format", "json"])
    assert proc.exit_code == 0, proc.output
    data = json.loads(proc.stdout)
    assert_declared("bisect components", data)
    assert data["minimal"] == ["pr8132.malloc-trim"]
    assert [t["shows_change"] for t in data["tests"]] == [True, False, True]


def test_bisect_usage_errors() -> None:
    proc = CliRunner().invoke(main, ["bisect", "tiny", "--deepspeed", "0.17.0"])
    assert proc.exit_code == 2 and "two or more versions" in proc.output
    proc = CliRunner().invoke(main, ["bisect", "tiny", "--deepspeed-src", "/", "--good", "a"])
    assert proc.exit_code == 2 and "--bad" in proc.output


FAKE_STEP = """#!{python}
# stands in for the per-commit step: a synthetic run group from figure.txt, judged against a limit of 30
import pathlib, subprocess, sys
sys.path.insert(0, {root!r})
from rssprobe.store import rundir as storage
from tests.fakes_rundir import Step, make_run
rev = sys.argv[1] if len(sys.argv) > 1 else subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                                            text=True).stdout.strip()
show = lambda f: subprocess.run(["git", "-C", {repo!r}, "show", f"{{rev}}:{{f}}"], capture_output=True, text=True)
if show("BROKEN").returncode == 0:
    sys.exit(125)
figure = float(show("figure.txt").stdout)
group = storage.GroupDir.create(pathlib.Path({runs!r}) / rev, "tiny", rev[:10], 3)
for i in (1, 2, 3):
    make_run(group.path, run_id=f"run-{{i:02d}}", steps=[Step(rss=figure + i * 0.01)] * 3)
sys.exit(1 if figure > 30.0 else 0)
"""


@pytest.mark.integration
def test_commit_bisect_cli_names_the_culprit_and_compares_it_with_its_parent(history, monkeypatch,
                                                                             tmp_path: Path) -> None:
    repo, commits, _check = history
    monkeypatch.setenv("RSSPROBE_ENVS", str(tmp_path / "envs"))

    def step_script(path: Path, **kw) -> Path:
        path.write_text(FAKE_STEP.format(python=sys.executable, root=str(Path(__file__).parent.parent),
                                         repo=str(repo), runs=str(kw["runs"])))
        path.chmod(0o755)
        return path

    monkeypatch.setattr(gitbisect, "step_script", step_script)
    proc = CliRunner().invoke(main, ["bisect", "tiny", "--deepspeed-src", str(repo), "--good", commits[0],
                                     "--bad", commits[-1], "--metric", "steady.rss", "--limit", "30",
                                     "--out", str(tmp_path / "g"), "--format", "json"])
    assert proc.exit_code == 0, proc.output
    data = json.loads(proc.stdout)
    assert_declared("bisect commits", data)
    assert all(isinstance(show.bisect(data, fmt), View) for fmt in output.FORMATS)  # its view (tests/test_views.py)
    assert data["status"] == "found" and data["culprit"] == commits[7]
    assert {v for _c, v in data["verdicts"]} == {"good", "bad", "skip"}
    steady = next(c for c in data["comparison"]["comparisons"]["phases"] if c["metric"] == "steady.rss")
    assert steady["mean_a"] == pytest.approx(28.02) and steady["mean_b"] == pytest.approx(31.52)
    assert (tmp_path / "g" / "limits.toml").read_text() == '[limits]\n"steady.rss" = 30.0\n'


# ---- direction, noise, resuming, metric names -------------------------------------------------

README_EXAMPLE = {"deepspeed0.16.5": [12.83, 12.83, 12.33], "deepspeed0.16.9": [12.30, 12.30, 12.30],
                  "deepspeed0.17.0": [14.32, 14.33, 14.31], "deepspeed0.18.2": [14.30, 14.32, 14.33]}


def _fixed_groups(monkeypatch: pytest.MonkeyPatch, figures: dict[str, list[float]]) -> list[launcher.RunRequest]:
    """Synthetic groups whose steady RSS per run is figures[label] (the same every round)."""
    requests = []

    def run_group(req: launcher.RunRequest, repeat: int) -> Path:
        requests.append(req)
        group = storage.GroupDir.create(req.out, req.scenario.name, req.label, repeat)
        for i, rss in enumerate(figures[req.label][:repeat], start=1):
            make_run(group.path, run_id=f"run-{i:02d}", label=req.label, steps=[Step(rss=rss)] * 3)
        return group.path

    monkeypatch.setattr(bisect_rounds, "run_group", run_group)
    monkeypatch.setattr(envs, "for_versions", lambda torch, ds, pip=(), log=None: (sys.executable, f"fake-ds{ds}"))
    return requests


def test_a_noisy_unchanged_version_in_the_middle_does_not_stop_the_search(monkeypatch, tmp_path: Path) -> None:
    """The README example as measured: 0.16.9 reads 0.36 B/param *lower* (significant at p = 0.05); the
    change sought (2 B/param more) came with 0.17.0."""
    _fixed_groups(monkeypatch, README_EXAMPLE)
    args = ["bisect", "tiny", "--deepspeed", "0.16.5,0.16.9,0.17.0,0.18.2", "--metric", "steady.rss",
            "--format", "json"]
    for extra in ([], ["--direction", "auto"]):
        proc = CliRunner().invoke(main, [*args, *extra, "--out", str(tmp_path / f"b{len(extra)}")])
        assert proc.exit_code == 0, proc.output
        data = json.loads(proc.stdout)
        assert data["status"] == "found" and data["first_moved"] == "0.17.0", data["probes"]
        noisy = [p for p in data["probes"] if p["what"] == "deepspeed 0.16.9"]
        assert noisy and noisy[0]["verdict"] == "improvement" and noisy[0]["answer"] == "same"
        assert data["direction"] == "up"


def test_auto_direction_follows_the_bad_endpoint_downwards(monkeypatch, tmp_path: Path) -> None:
    figures = {"deepspeed0.1": [20.0, 20.01, 20.02], "deepspeed0.2": [22.0, 22.01, 22.02],
               "deepspeed0.3": [18.0, 18.01, 18.02], "deepspeed0.4": [18.0, 18.02, 18.01]}
    _fixed_groups(monkeypatch, figures)
    proc = CliRunner().invoke(main, ["bisect", "tiny", "--deepspeed", "0.1,0.2,0.3,0.4", "--metric", "steady.rss",
                                     "--direction", "auto", "--out", str(tmp_path / "b"), "--format", "json"])
    assert proc.exit_code == 0, proc.output
    data = json.loads(proc.stdout)
    assert data["direction"] == "down" and data["first_moved"] == "0.3"  # 0.2 went up: not the change sought
    assert data["probes"][0]["what"] == "deepspeed 0.4"  # the bad endpoint was asked first


def test_an_unknown_metric_fails_before_any_run_with_the_close_names(monkeypatch, tmp_path: Path) -> None:
    requests = _fixed_groups(monkeypatch, README_EXAMPLE)
    proc = CliRunner().invoke(main, ["bisect", "tiny", "--deepspeed", "0.16.5,0.16.9,0.17.0,0.18.2", "--metric",
                                     "init.live", "--out", str(tmp_path / "b")])
    assert proc.exit_code == 2 and not requests
    assert "init.live" in proc.output and "budget.live" in proc.output and "Traceback" not in proc.output
    assert not (tmp_path / "b").exists()


def test_a_rerun_bisect_reuses_finished_rounds_and_fresh_starts_over(monkeypatch, tmp_path: Path) -> None:
    requests = _fixed_groups(monkeypatch, README_EXAMPLE)
    args = ["bisect", "tiny", "--deepspeed", "0.16.5,0.16.9,0.17.0,0.18.2", "--metric", "steady.rss",
            "--out", str(tmp_path / "b"), "--format", "json"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    ran = len(requests)
    assert ran >= 3
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    assert len(requests) == ran  # nothing ran again
    assert json.loads(again.stdout)["first_moved"] == json.loads(first.stdout)["first_moved"] == "0.17.0"
    fresh = CliRunner().invoke(main, [*args, "--fresh"])
    assert fresh.exit_code == 0 and len(requests) == 2 * ran
    other = CliRunner().invoke(main, [*args[:-2], "--repeat", "2", "--format", "json"])
    assert other.exit_code == 2 and "different bisect command" in other.output


def test_bisect_runs_fix_the_mmap_threshold_unless_told_otherwise(monkeypatch, tmp_path: Path) -> None:
    requests = _fixed_groups(monkeypatch, README_EXAMPLE)
    base = ["bisect", "tiny", "--deepspeed", "0.16.5,0.18.2", "--metric", "steady.rss", "--format", "json"]
    proc = CliRunner().invoke(main, [*base, "--out", str(tmp_path / "a")])
    assert proc.exit_code == 0 and "MALLOC_MMAP_THRESHOLD_=65536" in proc.stderr
    assert requests[0].malloc_env == {"MALLOC_MMAP_THRESHOLD_": "65536"}
    assert requests[0].command[-4:-2] == ["--malloc-env", "MALLOC_MMAP_THRESHOLD_=65536"]
    CliRunner().invoke(main, [*base, "--malloc-env", "MALLOC_ARENA_MAX=2", "--out", str(tmp_path / "b")])
    assert requests[-1].malloc_env == {"MALLOC_ARENA_MAX": "2"}


def test_a_reference_whose_own_repeats_disagree_is_warned_about(monkeypatch, tmp_path: Path) -> None:
    _fixed_groups(monkeypatch, README_EXAMPLE)
    proc = CliRunner().invoke(main, ["bisect", "tiny", "--deepspeed", "0.16.5,0.18.2", "--metric", "steady.rss",
                                     "--out", str(tmp_path / "b"), "--format", "json"])
    data = json.loads(proc.stdout)
    assert data["warnings"] and "0.50 B/param" in data["warnings"][0]  # 12.83 vs 12.33


def test_every_figure_a_run_has_is_a_known_name(tmp_path: Path) -> None:
    from rssprobe.analysis import metrics
    from rssprobe.analysis.summary import Summary
    from rssprobe.config import scenario

    run = storage.RunDir(make_run(tmp_path))
    known = set(metrics.known(scenario.load("tiny", [])))
    assert set(Summary(run).metrics()) <= known


def test_a_loaded_runs_figures_are_known_names_so_bisect_can_follow_the_load(tmp_path: Path) -> None:
    """A run that loads its checkpoint has load.* figures and, at 2 ranks, node.model_peak: every one of them is a
    name `--metric` accepts before any run for a scenario that loads (bisect --metric load.peak was refused: "no
    such figure"), and load.* stays refused for a scenario that builds its model. The run: a 2-rank ZeRO-3 load
    of reports/your-job/runs.tar.gz."""
    import tarfile

    from rssprobe.analysis import metrics
    from rssprobe.analysis.summary import Summary
    from rssprobe.config import scenario
    from rssprobe.errors import UserError

    with tarfile.open(Path(__file__).parents[1] / "reports" / "your-job" / "runs.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data",
                       members=[m for m in tar.getmembers() if m.name.startswith("runs/load-z3-2r-before/")])
    run = storage.RunDir(tmp_path / "runs" / "load-z3-2r-before")
    s = Summary(run)
    loaded = scenario.load("llama-small-zero3", ['model.load="checkpoint"', "world_size=2"])  # as that run was
    have = set(s.metrics())
    assert {"load.peak", "node.model_peak"} <= have and have <= set(metrics.known(loaded))
    metrics.check("--metric", "load.peak", loaded)
    with pytest.raises(UserError, match="no such figure"):
        metrics.check("--metric", "load.peak", scenario.load("llama-small-zero3"))
