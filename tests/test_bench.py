"""make bench's paired A/B: probes on and off on alternate steps of one real run (probes.alternate)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rssprobe.analysis.summary import Summary
from rssprobe.store.rundir import RunDir
from tools.bench import census_cost, pairs

from .conftest import rssprobe

pytestmark = pytest.mark.worker  # every test here trains (or reads a run trained for it)


def test_alternate_steps_switch_every_per_step_probe_off_and_the_bench_pairs_them(runs_dir: Path) -> None:
    out = runs_dir / "tiny-alternate"
    rssprobe("run", "tiny", "--steps", "6", "--set", "probes.alternate=true", "--out", str(out), check=True)
    steps = [e for e in map(json.loads, (out / "events.jsonl").read_text().splitlines()) if e["event"] == "step"]
    assert [e["probes_on"] for e in steps] == [True, False] * 3
    for e in steps:
        if e["probes_on"]:  # the default sites fire in every step (DeepSpeedZeroOptimizer.step at least)
            assert e["sites"] and e["parts"] and "smaps" in e and e["probe_s"] > 0
        else:
            assert e["sites"] == {} and e["parts"] == {} and "smaps" not in e and e["probe_s"] == 0
    on, off = pairs(steps)
    assert on == [steps[2]["time_s"], steps[4]["time_s"]] and off == [steps[3]["time_s"], steps[5]["time_s"]]


def test_the_census_cost_is_per_gib_of_the_rss_each_partition_named(tiny_baseline: Path) -> None:
    """make bench's census cost: each point after the baseline, its partition's seconds over the GiB of RSS it
    named (both as the run recorded them), and the whole census's, which includes the partition."""
    s = Summary(RunDir(tiny_baseline))
    got = census_cost(s)
    points = [p for p in s.census_times() if p["at"] != "pre_model"]
    assert got["points"] == len(points) == 3
    expected = [p["partition_time_s"] * 2**30 / p["partition_rss_bytes"] for p in points]
    assert got["partition_per_gib"] == pytest.approx(expected)
    assert all(c > p > 0 for c, p in zip(got["census_per_gib"], got["partition_per_gib"], strict=True))
    old = census_cost(Summary(RunDir(Path(__file__).parent / "data" / "format-0" / "tiny-run")))
    assert old["points"] == 3 and old["census_per_gib"] == []  # made before census_time_s: n/a, not 0
