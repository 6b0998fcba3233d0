"""In-run event tables and growth figures without a run: schema, one-line refusals, metric names, intervals."""

from __future__ import annotations

from pathlib import Path

import pytest
from scipy import stats as sps

from rssprobe.analysis import inrun, metrics
from rssprobe.analysis.stats import mean_interval, slope_interval
from rssprobe.config import scenario
from rssprobe.config.sites import for_scenario
from rssprobe.errors import UserError

from .conftest import rssprobe


def test_set_reaches_the_event_tables() -> None:
    s = scenario.load("tiny", ["checkpoint.every=2", "eval.every=1", "eval.forwards=3", "reinit.every=4"])
    assert (s.checkpoint.every, s.checkpoint.keep, s.checkpoint.consolidate_16bit) == (2, 1, False)
    assert (s.eval.every, s.eval.forwards, s.reinit.every) == (1, 3, 4)
    assert scenario.load("tiny").checkpoint is None  # no table, no event


@pytest.mark.parametrize("overrides, fragment", [
    (["checkpoint.every=0"], "checkpoint.every: Input should be greater than 0"),
    (["eval.every=-1"], "eval.every: Input should be greater than 0"),
    (["reinit.every=5"], "reinit.every (5) exceeds steps (4)"),
    (["eval.every=1", "eval.forwards=0"], "eval.forwards: Input should be greater than 0"),
    (["checkpoint.every=1", "checkpoint.keep=-1"], "checkpoint.keep"),
    (["checkpoint.every=1", "checkpoint.consolidate_16bit=true"], "consolidate_16bit is for ZeRO stage 3"),
    (["checkpoint.every=1", "checkpoint.evry=2"], "checkpoint.evry: unknown key"),
    (["reinit.every=x"], "reinit.every: Input should be a valid integer"),
])
def test_bad_event_values_are_refused(overrides: list[str], fragment: str) -> None:
    with pytest.raises(UserError, match=None) as err:
        scenario.load("tiny", overrides)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_cli_refuses_in_one_line_before_training(tmp_path: Path) -> None:
    proc = rssprobe("run", "tiny", "--set", "checkpoint.every=0", "--out", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "checkpoint.every" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "r").exists()


def test_event_sites_and_metric_names_follow_the_declared_events() -> None:
    plain, with_events = scenario.load("tiny"), scenario.load("tiny", ["checkpoint.every=1", "eval.every=1"])
    save = "deepspeed.runtime.engine.DeepSpeedEngine.save_checkpoint"
    assert save not in dict(for_scenario(plain)) and dict(for_scenario(with_events))[save] is False
    names = metrics.known(with_events)
    assert {"event.checkpoint.retained", "event.eval.peak", "growth.per_step"} <= set(names)
    assert "event.reinit.retained" not in names
    metrics.check("--metric", "growth.per_step", plain)  # gate-able on any run


def test_intervals_are_students_t() -> None:
    values = [4.0, 4.2, 3.9, 4.1]
    e = mean_interval(values)
    half = sps.t.ppf(0.975, 3) * sps.tstd(values) / 2
    assert e.value == pytest.approx(4.05) and e.high - e.value == pytest.approx(half)
    assert mean_interval([1.0]).low is None  # one sample: no interval, not a zero-width one
    x, y = [2, 3, 4, 5], [10.0, 14.0, 18.5, 21.5]
    fit, ref = slope_interval(x, y), sps.linregress(x, y)
    assert fit.value == pytest.approx(ref.slope)
    assert fit.high - fit.value == pytest.approx(sps.t.ppf(0.975, 2) * ref.stderr)
    assert slope_interval([2, 3], [1.0, 2.0]).low is None


def test_growth_starts_at_step_2_and_events_are_grouped() -> None:
    steps = [{"step": s, "rss": 100 + (50 if s == 1 else 0) + 10 * s} for s in range(1, 6)]
    g = inrun.growth(steps, params=10)
    assert (g["from_step"], g["to_step"]) == (2, 5)
    assert g["bytes_per_step"]["value"] == pytest.approx(10) and g["bytes_per_param_per_step"]["value"] == 1
    occ = [{"event": "inrun", "name": "checkpoint", "step": s, "entry_rss": 0, "rss": 8, "peak": 9, "time_s": 0.1,
            "sites": {"a.B.c": {"calls": 1, "retained": 8, "retained_excl": 8, "peak_above_entry": 9}}}
           for s in (1, 2)]
    figures = inrun.events({"inrun": occ}, params=4)
    assert figures["checkpoint"]["retained_bytes_per_param"]["value"] == 2
    assert figures["checkpoint"]["sites"][0]["name"] == "B.c"
    assert inrun.metrics(figures, g)["event.checkpoint.retained"] == 2
