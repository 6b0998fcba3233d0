"""make bench's paired A/B: probes on and off on alternate steps of one real run (probes.alternate)."""

from __future__ import annotations

import json
from pathlib import Path

from tools.bench import pairs

from .conftest import rssprobe


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
