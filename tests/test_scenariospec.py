"""The scenario spec (config/scenariospec.py): typed options reach the scenario as typed values, and the command line a
campaign records for a group reproduces the scenario that group ran (issue 32)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rssprobe.commands import run as run_command
from rssprobe.commands.common_args import scenario_spec
from rssprobe.config import scenario
from rssprobe.config.runoptions import RunOptions
from rssprobe.config.scenariospec import ScenarioSpec
from rssprobe.errors import UserError
from rssprobe.run import request

LINEAR = Path(__file__).resolve().parent.parent / "examples" / "train_linear.py"


def test_typed_options_land_at_their_keys_as_given() -> None:
    spec = ScenarioSpec("tiny", ("zero.stage=1",), steps=3, world_size=2, params=3e6, stage=3, offload_param="cpu",
                        torch_alloc_conf="backend:native,pinned_use_background_threads:True", trim_at_end=True)
    scen = spec.load()
    assert (scen.steps, scen.world_size, scen.zero.stage, scen.zero.offload_param) == (3, 2, 3, "cpu")
    assert scen.torch_alloc_conf == "backend:native,pinned_use_background_threads:True"  # commas, colons: as typed
    assert scen.probes.trim_at_end and scen.model.params == 3e6 and scen.model.layers is None
    assert spec.values()["zero.stage"] == 3  # the typed --stage comes after the user's --set zero.stage=1


def test_a_typed_value_is_never_parsed_as_toml() -> None:
    """A --set value is one TOML value; a typed one is not text at all: a string that TOML would refuse (or read
    as something else) is set as it is, and the scenario's own validation judges it."""
    spec = ScenarioSpec("tiny", torch_alloc_conf='x"y')
    with pytest.raises(UserError, match="torch_alloc_conf"):  # refused by the schema (not KEY:VALUE), not by TOML
        spec.load()
    assert scenario.load("tiny", [], {"description": "a = [1, 2]"}).description == "a = [1, 2]"


def test_a_scripts_steps_stop_it_and_its_arguments_travel_exactly() -> None:
    args = ("--name", 'with "quotes"', "back\\slash", "tab\there", "caf\u00e9 \U0001f600", "del\x7f", "", "--x=1")
    scen = ScenarioSpec(str(LINEAR), script_args=args, steps=2).load()
    assert scen.script is not None and scen.script.args == list(args) and scen.script.stop_after == 2
    assert scen.steps is None


def _reparsed(words: list[str]) -> ScenarioSpec:
    """`rssprobe run WORDS` as its own command line parser reads them, built into a spec as the command does."""
    ctx = run_command.command.make_context("run", list(words))
    p = ctx.params
    with ctx:
        ctx.meta["rssprobe.argv"] = list(words)
        spec = scenario_spec(p["args"], p["script"], p["overrides"], launcher=True, steps=p["steps"],
                             world_size=p["world_size"], trim_at_end=p["trim_at_end"],
                             torch_alloc_conf=p["torch_alloc_conf"])
    assert spec is not None
    return spec


@pytest.mark.parametrize("spec", [
    ScenarioSpec("tiny", ("zero.stage=1", 'description="two words"'), steps=3, world_size=2, params=2e6,
                 torch_alloc_conf="backend:native"),
    ScenarioSpec("llama-small", stage=3, offload_param="cpu", steps=2),
    ScenarioSpec(str(LINEAR), ("timeout_s=60",), steps=2, script_args=("--width", "64", "", "a b")),
], ids=["scenario", "zero3", "script"])
def test_the_recorded_rerun_command_line_loads_the_same_scenario(spec: ScenarioSpec, tmp_path: Path) -> None:
    """What a campaign records for a group (run/request.rerun_argv) is a command line that, given to `rssprobe run`,
    builds the scenario the group ran: every typed option and --set word, the script's arguments after `--`."""
    argv = request.make(spec, RunOptions(patches=("pr8132",), repeat=3), label="pr8132", out=tmp_path / "g",
                        python="/usr/bin/python3").command
    assert argv[:2] == ["rssprobe", "run"] and "--trim-at-end" in argv
    again = _reparsed(argv[2:])
    assert again.load().model_dump() == spec.with_(trim_at_end=True).load().model_dump()
    if spec.script_args is not None:
        assert argv[-len(spec.script_args) - 1:] == ["--", *spec.script_args]  # nothing after the script's words
