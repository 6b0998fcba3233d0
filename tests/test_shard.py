"""Sharded campaigns (--shard K/N) and `rssprobe merge`.

The claim: the shards of a campaign, merged, read as if it had run on one machine. Table equality is
tested on synthetic run groups (tests/fakes_rundir.py, through the campaign engine's group runner, its one
seam): the same 2 x 2 matrix run whole and as two shards gives the same table (figures and effects, cell
by cell), and so do a plan (the verdict report too) and a size sweep. Real runs could not show equality
(identical real runs differ by their noise) and would cost 12 runs here; one real sharded 2-cell matrix
(2 runs of 2 steps, ~1 min) shows the real path: each shard runs its cell, the patch's effect, which neither
shard can compute alone, appears once merged. The refusals (different campaigns, shards that disagree, a
damaged index, an existing --out) are cheap: synthetic shards, no training.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rssprobe.campaign import engine, scale
from rssprobe.campaign.engine import Shard
from rssprobe.cli import main
from rssprobe.config.scenariospec import ScenarioSpec
from rssprobe.run import launch
from rssprobe.store.rundir import GroupDir

from .conftest import rssprobe
from .fakes_rundir import FakeRun, Step, make_run
from .test_plan import GOOD

MATRIX = ["matrix", "tiny", "--patch", "baseline,pr8132", "--allocator", "glibc,jemalloc", "--repeat", "3",
          "--python", sys.executable, "--format", "json"]


def _figure(req: launch.RunRequest, i: int) -> float:
    """Steady RSS of run i of a cell: the patch saves 1 B/param, jemalloc costs 2; repeats differ by 0.01."""
    return 10.0 - (1.0 if req.patches else 0.0) + (2.0 if req.allocator == "jemalloc" else 0.0) + 0.01 * i


def synthetic_group(req: launch.RunRequest, repeat: int) -> list[str]:
    """A group of `repeat` synthetic runs of the request (figures from _figure), as the engine's runner makes."""
    group = GroupDir.create(req.out, req.scenario.name, req.label, repeat)
    for i in range(1, repeat + 1):
        rss = _figure(req, i)
        make_run(group.path, FakeRun(run_id=f"run-{i:02d}", label=req.label, patches=req.patches,
                                     effects={"pr8132.float-scale": {"float_conversions": 1},
                                              "pr8132.malloc-trim": {"trims": 1}} if req.patches else {},
                                     steps=[Step(rss=rss, peak=rss + 1)] * 3))
    return ["ok"] * repeat


@pytest.fixture
def fake_groups(monkeypatch: pytest.MonkeyPatch) -> list[launch.RunRequest]:
    """The engine's group runner replaced by synthetic groups (figures from _figure); the requests it got."""
    requests: list[launch.RunRequest] = []

    def run_group(req: launch.RunRequest, repeat: int) -> list[str]:
        requests.append(req)
        return synthetic_group(req, repeat)

    monkeypatch.setattr(engine, "run_group", run_group)
    return requests


def cli(*args: str) -> Any:
    result = CliRunner().invoke(main, list(args))
    return result


def _json(*args: str) -> dict[str, Any]:
    result = cli(*args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _cells(table: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each cell as the table has it, without what names a directory or a sitting (where its group lies, which
    shard ran it, how long a plan's cell took on that machine)."""
    return {c["id"]: {k: v for k, v in c.items() if k not in ("group", "shard", "wall_s")} for c in table["cells"]}


def test_two_shards_of_a_2x2_matrix_merged_give_the_unsharded_table(tmp_path: Path, fake_groups: list) -> None:
    whole = _json(*MATRIX, "--out", str(tmp_path / "whole"))
    first = _json(*MATRIX, "--out", str(tmp_path / "s1"), "--shard", "1/2")
    second = _json(*MATRIX, "--out", str(tmp_path / "s2"), "--shard", "2/2")
    assert len(fake_groups) == 4 + 2 + 2  # each shard ran its two cells, once
    ran = [{c["id"] for c in t["cells"] if c["status"] == "done"} for t in (first, second)]
    assert ran[0] | ran[1] == set(_cells(whole)) and not ran[0] & ran[1] and len(ran[0]) == len(ran[1]) == 2
    # contiguous shares: shard 1 has the baselines, shard 2 the patched cells, whose effects it cannot compute
    assert all(not c["effects"] for c in second["cells"])
    before = {name: _digest(tmp_path / name) for name in ("s1", "s2")}
    merged = cli("merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m"))
    assert merged.exit_code == 0, merged.output
    assert {name: _digest(tmp_path / name) for name in ("s1", "s2")} == before  # inputs untouched
    table = _json("show", str(tmp_path / "m"), "--format", "json")
    assert _cells(table) == _cells(whole)  # every figure, every effect, every status, cell by cell
    patched = _cells(table)["pr8132-glibc"]
    assert patched["effects"]["steady.rss"]["verdict"] == "improvement"  # a known answer: -1 B/param
    assert patched["effects"]["steady.rss"]["delta"] == pytest.approx(-1.0)
    text = rssprobe("show", str(tmp_path / "m"), check=True).stdout
    assert "Matrix m" in text and "-1.00 (improvement)" in text and "4 cells, 4 done" in text


def test_a_shard_is_stable_and_refused_when_it_is_not_k_of_n(tmp_path: Path, fake_groups: list) -> None:
    owners = [Shard(1, 3).owner(i, 7) for i in range(7)]
    assert owners == sorted(owners) and set(owners) == {1, 2, 3} and max(map(owners.count, {1, 2, 3})) == 3
    listed = _json(*MATRIX, "--out", str(tmp_path / "s1"), "--shard", "1/2", "--dry-run")
    assert [c["shard"] for c in listed["cells"]] == [1, 1, 2, 2]
    _json(*MATRIX, "--out", str(tmp_path / "s1"), "--shard", "1/2")
    again = _json(*MATRIX, "--out", str(tmp_path / "s1"), "--shard", "1/2", "--dry-run")
    assert [c["shard"] for c in again["cells"]] == [1, 1, 2, 2]  # what has run does not move a cell
    for bad in ("3/2", "0/2", "x", "1/0"):
        result = cli(*MATRIX, "--out", str(tmp_path / "never"), "--shard", bad)
        assert result.exit_code == 2 and "--shard" in result.output and "K/N" in result.output, result.output
    assert not (tmp_path / "never").exists()


def test_merge_refusals_are_one_line_exit_2_and_leave_the_inputs_alone(tmp_path: Path, fake_groups: list) -> None:
    for k in (1, 2):
        _json(*MATRIX, "--out", str(tmp_path / f"s{k}"), "--shard", f"{k}/2")
    _json(*MATRIX[:-2], "--repeat", "2", "--format", "json", "--out", str(tmp_path / "other"), "--shard", "2/2")
    shutil.copytree(tmp_path / "s1", tmp_path / "s1-copy")
    shutil.copytree(tmp_path / "s1", tmp_path / "s1-changed")
    run = next((tmp_path / "s1-changed").glob("*/run-01"))
    (run / "events.jsonl").write_text((run / "events.jsonl").read_text().replace('"loss":0.001', '"loss":0.002'))
    shutil.copytree(tmp_path / "s2", tmp_path / "s2-damaged")
    (tmp_path / "s2-damaged" / "matrix.json").write_text("{not json")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "precious").write_text("x")
    before = _digest(tmp_path)
    for shards, out, fragment in [
        (["s1", "other"], "m1", "a different campaign"),
        (["s1", "s1-changed", "s2"], "m2", "with different runs"),
        (["s1", "s2-damaged"], "m3", "damaged matrix index"),
        (["s1", "s2"], "full", "exists and is not empty"),
        (["s1", "s2"], "s1/inside", "overlaps the input"),
    ]:
        proc = rssprobe("merge", *[str(tmp_path / s) for s in shards], "--out", str(tmp_path / out))
        assert proc.returncode == 2, (shards, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in proc.stderr, (shards, proc.stderr)
    assert _digest(tmp_path) == before  # nothing written anywhere, inputs untouched
    assert not any((tmp_path / m).exists() for m in ("m1", "m2", "m3"))
    same = rssprobe("merge", str(tmp_path / "s1"), str(tmp_path / "s1-copy"), str(tmp_path / "s2"), "--out",
                    str(tmp_path / "ok"))  # a shard given twice, byte for byte the same: taken once
    assert same.returncode == 0, same.stderr
    missing = rssprobe("merge", str(tmp_path / "s1"), "--out", str(tmp_path / "half"))
    assert missing.returncode == 0 and missing.stdout.count("in no shard; to run") == 2, missing.stdout


# test_plan's small plan (a base and one allocator value), with 3 repeats and the patch set as well
PLAN = GOOD.replace("repeat = 1", "repeat = 3").replace('patches = ["baseline"]', 'patches = ["baseline", "pr8132"]')


def _verdict(plan: Path, runs: Path, out: Path) -> list[str]:
    proc = rssprobe("verdict", str(plan), "--runs", str(runs), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    keep = [line.replace(str(out), "OUT").replace(str(runs), "RUNS") for line in out.read_text().splitlines()
            if not line.startswith(("Generated ", "Wall time"))]
    return keep


def test_a_sharded_plan_merged_gives_the_same_table_and_verdict_report(tmp_path: Path, fake_groups: list) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    args = ["matrix", "--plan", str(plan), "--format", "json"]
    whole = _json(*args, "--out", str(tmp_path / "whole"))
    for k in (1, 2):
        _json(*args, "--out", str(tmp_path / f"s{k}"), "--shard", f"{k}/2")
    assert cli("merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m")).exit_code == 0
    assert _cells(_json("show", str(tmp_path / "m"), "--format", "json")) == _cells(whole)
    report = _verdict(plan, tmp_path / "m", tmp_path / "merged.md")
    assert report == _verdict(plan, tmp_path / "whole", tmp_path / "merged.md")
    assert any("| reproduced |" in line for line in report)


def test_a_sharded_scale_sweep_merged_fits_as_the_whole(tmp_path: Path) -> None:
    def run_group(req: launch.RunRequest, repeat: int, title: str = "") -> Any:
        group = GroupDir.create(req.out, req.scenario.name, req.label, repeat)
        params = req.scenario.model.n_params
        for i in range(1, repeat + 1):
            bpp = 20 + (64 * 2**20 + 1000 * i) / params
            make_run(group.path, FakeRun(run_id=f"run-{i:02d}", params=params, steps=[Step(rss=bpp, peak=bpp)] * 3))
        return group, ["ok"] * repeat

    spec = ScenarioSpec("tiny", trim_at_end=True)
    scens = scale.size_scenarios(spec, [1e6, 2e6, 4e6])
    base = launch.RunRequest(scenario=spec.load(), scenario_ref="tiny", label="baseline")
    definition = {"scenario": "tiny", "sizes": [1e6, 2e6, 4e6], "repeat": 2}
    quiet = {"say": lambda _t: None}
    scale.run(tmp_path / "whole", definition, base, scens, 2, run_group, **quiet)
    for k in (1, 2):
        scale.run(tmp_path / f"s{k}", definition, base, scens, 2, run_group, shard=Shard(k, 2), **quiet)
    shard = json.loads(rssprobe("show", str(tmp_path / "s2"), "--format", "json", check=True).stdout)
    assert (shard["other_shards"] and not shard["problems"]) or shard["problems"] == [
        "fewer than 2 sizes have a finished run: nothing to fit"]
    rssprobe("merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m"), check=True)
    merged, whole = (json.loads(rssprobe("show", str(tmp_path / d), "--format", "json", check=True).stdout)
                     for d in ("m", "whole"))
    assert merged["fit"] == whole["fit"] and merged["runs_in_fit"] == whole["runs_in_fit"] == 6
    assert not merged["problems"] and not merged["other_shards"]


@pytest.mark.slow  # make test-slow: a real environment or campaign, minutes
@pytest.mark.worker
def test_a_real_two_cell_matrix_in_two_shards_merges(tmp_path: Path) -> None:
    """Two real tiny runs (baseline and pr8132, 2 steps each), one per shard, on this machine one after the
    other as N machines would run them; merged, the patched cell's effect against the baseline appears."""
    args = ["matrix", "tiny", "--steps", "2", "--repeat", "1", "--patch", "baseline,pr8132", "--python",
            sys.executable, "--format", "json"]
    shards = [json.loads(rssprobe(*args, "--shard", f"{k}/2", "--out", str(tmp_path / f"s{k}"), check=True).stdout)
              for k in (1, 2)]
    assert [[c["status"] for c in s["cells"]] for s in shards] == [["done", "other shard"], ["other shard", "done"]]
    assert not shards[1]["cells"][1]["effects"]  # its baseline ran in the other shard
    rssprobe("merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m"), check=True)
    table = json.loads(rssprobe("show", str(tmp_path / "m"), "--format", "json", check=True).stdout)
    base, patched = table["cells"]
    assert [base["status"], patched["status"]] == ["done", "done"] and not table["failed"]
    assert set(patched["effects"]) == {"steady.rss", "budget.rss_after_trim_above_baseline"}
    assert patched["effects"]["steady.rss"]["delta"] == pytest.approx(patched["figures"]["steady.rss"]
                                                                      - base["figures"]["steady.rss"])
    assert base["figures"] == shards[0]["cells"][0]["figures"]  # the same runs, read from the merged copy
    page = tmp_path / "r.html"
    rssprobe("report", str(tmp_path / "m"), "--html", str(page), check=True)
    assert page.read_text().count('<details class="run') == 2
    diff = rssprobe("diff", str(tmp_path / "m" / base["id"]), str(tmp_path / "m" / patched["id"]), "--format", "json")
    assert diff.returncode in (0, 125) and json.loads(diff.stdout)["a"]["runs"] == 1
