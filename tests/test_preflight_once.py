"""The preflight that needs no per-run fact runs once per campaign, from one place (issue 44 item 1): run/request's
check_scenarios (the machine, the allocator setting per torch of the campaign) and check_all (each distinct cell's
per-run checks). No command, campaign or workflow calls run/preflight.py's checks itself, so a check added there
reaches run, scale, gate, matrix, plan and bisect alike (the hostile campaign's P1 and A1 classes: a check `run`
made that a campaign did not).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rssprobe.config.scenariospec import ScenarioSpec
from rssprobe.errors import UserError
from rssprobe.run import preflight, request

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rssprobe"


def _preflight_calls(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "preflight"]


def test_only_the_run_seam_calls_the_preflight_checks() -> None:
    """run/request.py (once per campaign and per distinct cell) and run/launch.py (THE per-run check) call
    run/preflight.py; nothing above them does."""
    callers = {str(p.relative_to(ROOT)): lines for p in sorted(PACKAGE.rglob("*.py"))
               if (lines := _preflight_calls(p))}
    assert set(callers) == {"rssprobe/run/request.py", "rssprobe/run/launch.py"}, \
        callers


def test_a_model_that_cannot_fit_is_refused_once_for_the_campaign() -> None:
    big = ScenarioSpec("tiny", ("model.params=5e10",)).load()  # ~931 GiB at 20 B/param: no machine here has it
    with pytest.raises(UserError, match="host memory"):
        request.check_scenarios([big])


def test_the_allocator_setting_is_judged_for_every_torch_of_the_campaign_and_only_when_asked() -> None:
    bad = ScenarioSpec("tiny").load().model_copy(update={"torch_alloc_conf": "expandable_segments:maybe"})
    request.check_scenarios([bad])  # `run --env`: judged per run, in the environment's own torch
    with pytest.raises(UserError, match="True or False"):  # a release not built yet: judged from the table
        request.check_scenarios([bad], torches=["2.13.0"])


def test_each_distinct_scenario_and_setting_is_checked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A campaign of many cells over one scenario asks the machine once and judges its setting once per torch
    (counted at the checks themselves; what they decide is tested above)."""
    machine: list[str] = []
    confs: list[tuple[str | None, tuple[str | None, ...]]] = []
    monkeypatch.setattr(preflight, "check_machine", lambda scen, where=None: machine.append(scen.name))
    monkeypatch.setattr(preflight, "check_alloc_conf_for",
                        lambda conf, torches, python=None: confs.append((conf, tuple(torches))))
    one, two = ScenarioSpec("tiny").load(), ScenarioSpec("tiny", ("model.params=2e6",)).load()
    request.check_scenarios([one, one, two, one], torches=["2.13.0", None, "2.13.0"])
    assert sorted(machine) == ["tiny", "tiny"]  # two distinct scenarios
    assert confs == [(None, ("2.13.0", None))]  # one setting (none), each torch once
