"""The declared results (rssprobe/analysis/results.py) are what the producers make. Real outputs (the recorded
demo runs, the H200 machine's size sweep and that sweep against itself, an estimate from the packaged H200
calibration, a gate of the demo's baseline against ceilings; a matrix and a plan with their listings, run by the
campaign engine on synthetic groups as tests/test_shard.py runs them, and the matrix merged) carry exactly the
declared keys (a key added, renamed or dropped fails here, not in a user's script that reads the JSON) and values of the
declared kinds."""

from __future__ import annotations

import json
import tarfile
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rssprobe.analysis import results, sweep
from rssprobe.analysis.compare import Side, compare
from rssprobe.analysis.summary import summarise
from rssprobe.campaign import engine
from rssprobe.cli import main
from rssprobe.config.scenariospec import ScenarioSpec
from rssprobe.store.rundir import RunDir
from rssprobe.workflows import inspect
from rssprobe.workflows.estimate import entry as estimate_entry
from rssprobe.workflows.estimate.request import Request as EstimateRequest

from .test_shard import MATRIX, PLAN, synthetic_group


def _kind_ok(value: Any, hint: Any) -> bool:
    """Whether a value is of its declared type, one level deep (TypedDicts are dicts; Any takes anything)."""
    if hint is Any:
        return True
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) \
        else (hint,)
    for option in options:
        if option is type(None) and value is None:
            return True
        if option is Any:
            return True
        origin = typing.get_origin(option) or option
        if isinstance(origin, type) and typing.is_typeddict(origin):
            origin = dict
        if origin is float and isinstance(value, int) and not isinstance(value, bool):
            return True
        if isinstance(origin, type) and isinstance(value, origin):
            return True
    return False


def _campaigns(root: Path) -> dict[str, dict[str, Any]]:
    """A 2 x 2 matrix and a plan, listed (--dry-run) and run (on synthetic groups: the engine's one seam)."""
    (root / "plan.toml").write_text(PLAN)
    plan = ["matrix", "--plan", str(root / "plan.toml"), "--format", "json"]
    out: dict[str, dict[str, Any]] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "run_group", synthetic_group)
        for kind, args in (("matrix-list", [*MATRIX, "--dry-run"]), ("matrix", MATRIX),
                           ("plan-list", [*plan, "--dry-run"]), ("plan", plan)):
            result = CliRunner().invoke(main, [*args, "--out", str(root / kind.split("-")[0])])
            assert result.exit_code == 0, result.output
            out[kind] = json.loads(result.stdout)
    merged = CliRunner().invoke(main, ["merge", str(root / "matrix"), "--out", str(root / "merged"), "--format",
                                       "json"])
    assert merged.exit_code == 0, merged.output
    out["merge"] = json.loads(merged.stdout)
    return out


def _limits(group: Path, root: Path) -> dict[str, Any]:
    """The gate of a real group against two ceilings."""
    (root / "limits.toml").write_text('[limits]\n"budget.live" = 30.0\n'
                                      '"budget.rss_after_trim_above_baseline" = 500.0\n')
    result = CliRunner().invoke(main, ["gate", "--candidate", str(group), "--limits", str(root / "limits.toml"),
                                       "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def outputs(demo_runs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    h200 = tmp_path_factory.mktemp("h200")  # a real size sweep: the H200 machine's (reports/gpu-check-h200)
    with tarfile.open(Path(__file__).resolve().parent.parent / "reports" / "gpu-check-h200" / "runs.tar.gz") as tar:
        tar.extractall(h200, filter="data")
    comparison = compare(Side.load(str(demo_runs / "baseline")), Side.load(str(demo_runs / "patched"))).as_dict()
    figure = next(iter(comparison["comparisons"].values()))[0]
    return {"run": dict(summarise(RunDir(demo_runs / "baseline" / "run-01"))),
            "group": dict(inspect.view(str(demo_runs / "baseline")).data),
            "scale": dict(sweep.Sweep.load(h200 / "runs0" / "scale-default").as_dict()), "comparison": dict(comparison),
            "side": dict(comparison["a"]), "figure comparison": dict(figure),
            "estimate": dict(estimate_entry.run(EstimateRequest(ScenarioSpec("llama-2-7b"), "model", gpus_per_node=8))),
            "sweep comparison": sweep.compare(str(h200 / "runs0" / "scale-default"),
                                              str(h200 / "runs0" / "scale-default")).as_dict(),
            "limits": _limits(demo_runs / "baseline", tmp_path_factory.mktemp("limits")),
            **_campaigns(tmp_path_factory.mktemp("campaigns"))}


def nested_undeclared(value: Any, hint: Any, where: str) -> list[str]:
    """The keys of `value`'s nested rows and parts (at any depth) that their declared TypedDict lacks
    (analysis/resultparts.py), each named by where it is: 'run.pinned.rows[0].new_key'."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    out: list[str] = []
    for option in options:
        origin, args = typing.get_origin(option), typing.get_args(option)
        if isinstance(value, dict) and typing.is_typeddict(option):
            hints = typing.get_type_hints(option)
            out += [f"{where}.{key}" for key in value if key not in hints]
            for key, item in value.items():
                if key in hints:
                    out += nested_undeclared(item, hints[key], f"{where}.{key}")
        elif isinstance(value, list) and origin is list and args:
            for i, item in enumerate(value):
                out += nested_undeclared(item, args[0], f"{where}[{i}]")
        elif isinstance(value, dict) and origin is dict and len(args) == 2:
            for key, item in value.items():
                out += nested_undeclared(item, args[1], f"{where}[{key!r}]")
    return out


def assert_declared(kind: str, data: dict[str, Any]) -> None:
    """`data` has exactly the keys its kind declares, each value of its declared type, and its nested rows no key
    their declarations lack (tests/test_bisect.py too)."""
    assert results.undeclared(kind, data) == ([], [])
    hints = typing.get_type_hints(results.DECLARED[kind])
    wrong = {key: type(value).__name__ for key, value in data.items() if not _kind_ok(value, hints[key])}
    assert wrong == {}
    assert nested_undeclared(data, results.DECLARED[kind], kind) == []


# a bisect's real outputs need tests/test_bisect.py's fake groups and git history: held there, in the tests that
# make them (one per mode)
HELD_IN_TEST_BISECT = ("bisect versions", "bisect components", "bisect commits")


@pytest.mark.parametrize("kind", [k for k in results.DECLARED if k not in HELD_IN_TEST_BISECT])
def test_each_result_has_exactly_its_declared_keys_and_kinds(outputs: dict[str, dict[str, Any]], kind: str) -> None:
    assert_declared(kind, outputs[kind])


def test_the_bisect_results_are_held_where_they_are_made() -> None:
    text = (Path(__file__).parent / "test_bisect.py").read_text(encoding="utf-8")
    assert all(f'assert_declared("{kind}", data)' in text for kind in HELD_IN_TEST_BISECT)


def test_a_key_a_producer_adds_is_named() -> None:
    assert results.undeclared("side", {"name": "a", "new": 1})[0] == ["new"]


def test_a_key_a_producer_adds_to_a_nested_row_is_named() -> None:
    run = {"pinned": {"rows": [{"role": "x", "new": 1}], "totals": {"alive": 1}}, "events": {"ckpt": {"each": [
        {"step": 1, "later": 2}]}}, "ranks": None}
    assert nested_undeclared(run, results.RunSummary, "run") == ["run.pinned.rows[0].new",
                                                                  "run.events['ckpt'].each[0].later"]
