"""The scenario the worker reads is typed in the contract and filled by the orchestrator (issue 44 item 4).

contract/workerscenario.py declares what worker.json's scenario holds; mypy checks the worker's reads against it
(tests/test_types.py). These tests hold the declaration to what the orchestrator really writes, so that neither
side can gain a key the other does not know, and hold the ZeRO stage default to one written place.
"""

from __future__ import annotations

import ast
import json
import typing
from pathlib import Path
from typing import Any

import pytest

from rssprobe.config import scenario as scenario_config
from rssprobe.config.runoptions import RunOptions
from rssprobe.config.scenariospec import ScenarioSpec
from rssprobe.contract import workerscenario as ws
from rssprobe.contract.manifest import WorkerSpec, worker_spec_problem
from rssprobe.run import launch, request

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rssprobe"
LINEAR_SCRIPT = ROOT / "examples" / "train_linear.py"

# declared TypedDict -> the pydantic model whose dump fills it (its keys exactly)
MATCHING = [(ws.WorkerScenario, scenario_config.Scenario), (ws.ZeroSpec, scenario_config.Zero),
            (ws.ProbesSpec, scenario_config.Probes), (ws.ScriptSpec, scenario_config.Script),
            (ws.CheckpointSpec, scenario_config.Checkpoint), (ws.EvalSpec, scenario_config.Eval),
            (ws.ReinitSpec, scenario_config.Reinit), (ws.SaveSpec, scenario_config.Save),
            (ws.LinearModelSpec, scenario_config.Model), (ws.TransformersModelSpec, scenario_config.Model)]


@pytest.mark.parametrize(("typed", "model"), MATCHING, ids=[t.__name__ for t, _m in MATCHING])
def test_each_declared_key_is_a_field_of_the_scenario_model_and_back(typed: Any, model: Any) -> None:
    assert set(typing.get_type_hints(typed)) == set(model.model_fields)


def test_from_pretrained_declares_the_path_the_orchestrator_adds() -> None:
    keys = set(typing.get_type_hints(ws.FromPretrainedSpec))
    assert keys == set(scenario_config.FromPretrained.model_fields) | {"path"}


def _spec(ref: str, tmp_path: Path) -> WorkerSpec:
    spec = ScenarioSpec(ref)
    req = request.make(spec, RunOptions(), label="t", out=tmp_path)
    return launch.worker_spec(req, checkpoint=tmp_path / "ckpt" if req.scenario.model.load == "checkpoint" else None)


def _required_present(value: Any, typed: Any, where: str) -> list[str]:
    """Keys a TypedDict requires that `value` lacks, recursively into nested TypedDicts (unions by their kind)."""
    missing = [f"{where}.{k}" for k in typed.__required_keys__ if k not in value]
    for key, hint in typing.get_type_hints(typed).items():
        sub = value.get(key)
        options = [a for a in typing.get_args(hint) if typing.is_typeddict(a)] or \
            ([hint] if typing.is_typeddict(hint) else [])
        if isinstance(sub, dict) and options:
            kinds = [o for o in options if "kind" not in typing.get_type_hints(o)
                     or typing.get_args(typing.get_type_hints(o)["kind"]) == (sub.get("kind"),)]
            missing += _required_present(sub, kinds[0], f"{where}.{key}")
    return missing


@pytest.mark.parametrize("ref", ["tiny", "llama-small", "ds7370-checkpoint", "default"])
def test_the_orchestrator_writes_every_key_the_worker_reads(ref: str, tmp_path: Path) -> None:
    spec = _spec(ref, tmp_path)
    written = json.loads(json.dumps(spec.as_dict()))  # as worker.json holds it
    assert worker_spec_problem(written) is None
    assert _required_present(written["scenario"], ws.WorkerScenario, "scenario") == []
    assert written["zero_stage"] == written["scenario"]["zero"]["stage"]
    back = WorkerSpec.read(written)
    assert back.scenario == written["scenario"] and back.zero_stage == spec.zero_stage


def test_a_script_run_gets_the_default_stage_and_no_engine_decided_keys(tmp_path: Path) -> None:
    spec = _spec(str(LINEAR_SCRIPT), tmp_path)
    written = json.loads(json.dumps(spec.as_dict()))
    assert written["scenario"]["zero"] == {} and written["scenario"]["model"] == {"kind": "script"}
    assert written["zero_stage"] == ws.DEFAULT_ZERO_STAGE  # what its census names until its engine decides
    assert _required_present(written["scenario"], ws.WorkerScenario, "scenario") == []
    assert written["scenario"]["script"]["args"] == [] and "stop_after" in written["scenario"]["script"]


def test_worker_json_without_its_stage_is_refused() -> None:
    written = {"format": 1, "scenario": {}, "deepspeed_config": None, "patches": [], "sites": [], "overlay": None}
    assert worker_spec_problem(written) == "zero_stage missing"


def _stage_defaults(tree: ast.AST) -> list[int]:
    """Lines that supply a ZeRO stage default as a number: a parameter or field `stage` with a numeric default,
    or `.get("stage", <number>)`."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arguments):
            named = [*node.posonlyargs, *node.args]
            pairs = list(zip(named[len(named) - len(node.defaults):], node.defaults, strict=True)) + \
                [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if d is not None]
            lines += [d.lineno for a, d in pairs if a.arg == "stage" and isinstance(d, ast.Constant)
                      and isinstance(d.value, int)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "stage" \
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int):
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and len(node.args) == 2 and isinstance(node.args[0], ast.Constant) and node.args[0].value == "stage" \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, int):
            lines.append(node.lineno)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "DEFAULT_ZERO_STAGE"
                                                  for t in node.targets):
            lines.append(node.lineno)
    return lines


def test_the_zero_stage_default_is_written_once() -> None:
    found = {str(p.relative_to(ROOT)): lines for p in sorted(PACKAGE.rglob("*.py"))
             if (lines := _stage_defaults(ast.parse(p.read_text(encoding="utf-8"))))}
    assert found == {"rssprobe/contract/workerscenario.py": [found.get("rssprobe/contract/workerscenario.py",
                                                                       [0])[0]]}, found
