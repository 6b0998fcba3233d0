"""Bad input gives one line naming the file, the key and the reason; exit code 2; no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from rssprobe.config import scenario
from rssprobe.errors import UserError

from .conftest import rssprobe

GOOD = """
name = "t"
steps = 3
[model]
layers = 2
width = 64
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text,key,reason", [
    ("colour = 'red'\n" + GOOD, "colour", "unknown key"),
    (GOOD.replace("steps = 3", "steps = 'three'"), "steps", "valid integer"),
    (GOOD.replace("steps = 3", "steps = -2"), "steps", "greater than 0"),
    (GOOD + "[zero]\nstage = 4\n", "zero.stage", "ZeRO stage 4 does not exist"),
    (GOOD + "[zero]\nstage = 2\noffload_param = 'cpu'\n", "zero.offload_param", "stage 3 only"),
    (GOOD + "[zero]\nstage = 1\nstage3_max_live_parameters = 1000\n", "zero.stage3_max_live_parameters",
     "stage 3 only (this scenario is stage 1)"),
    (GOOD + "[zero]\nstage = 3\noffload_param = 'nvme'\n", "zero.offload_param", "'cpu'"),
    (GOOD.replace("width = 64", "width = 64\nactivation_checkpointing = true"), "model.activation_checkpointing",
     "'non_reentrant', 'reentrant' or False"),
    (GOOD.replace("width = 64", "width = 64\nactivation = 'swish'"), "model.activation", "'gelu'"),
    (GOOD.replace("layers = 2", "layers = 2\nparams = 5e6"), "model", "exactly one"),
    (GOOD.replace('name = "t"', ""), "name", "required key is missing"),
    ("precision = 'fp8'\n" + GOOD, "precision", "bf16"),
])
def test_bad_scenarios_name_file_key_and_reason(tmp_path: Path, text: str, key: str, reason: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(UserError) as e:
        scenario.load(str(path))
    message = str(e.value)
    assert message.startswith(f"{path}: {key}:"), message
    assert reason in message


def test_overrides_are_typed_and_validated(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    s = scenario.load(str(path), ["steps=7", "model.width=128", "precision=fp32", "zero.overlap_comm=true"])
    assert (s.steps, s.model.width, s.precision, s.zero.overlap_comm) == (7, 128, "fp32", True)
    resized = scenario.load(str(path), ["model.params=50e3"])  # params on the command line replaces layers
    assert resized.model.layers is None and resized.model.n_layers == 12
    with pytest.raises(UserError, match=r"s.toml: model.widht: unknown key"):
        scenario.load(str(path), ["model.widht=128"])
    with pytest.raises(UserError, match="expected key=value"):
        scenario.load(str(path), ["steps"])



def test_packaged_scenarios_all_validate() -> None:
    names = scenario.packaged_names()
    assert {"default", "tiny", "issue7693", "issue7693-cpu"} <= set(names)
    for name in names:
        assert scenario.load(name).name == name


def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    cases = [
        (["run", str(tmp_path / "missing.toml")], "missing.toml: no such file"),
        (["run", str(write(tmp_path, GOOD + "[zero]\nstage = 4\n"))], "zero.stage"),
        (["run", "tiny", "--set", 'zero.offload_param="cpu"'], "zero.offload_param: applies to ZeRO stage 3 only"),
        (["run", "tiny", "--set", "zero.stage3_prefetch_bucket_size=5e7"], "zero.stage3_prefetch_bucket_size"),
        (["run", "tiny", "--set", "steps=-1"], "steps"),
        (["run", "tiny", "--patch", "no-such-patch"], "unknown intervention"),
        (["run", "tiny", "--baseline", "--patched"], "--baseline applies nothing"),
        (["show", str(tmp_path)], "not a run directory"),
    ]
    for args, expected in cases:
        proc = rssprobe(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], (args, proc.stderr)
        assert "Traceback" not in proc.stderr


def test_each_stage_gets_its_own_deepspeed_config(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    one = scenario.load(str(path), ["zero.stage=1"]).deepspeed_config()["zero_optimization"]
    assert one["stage"] == 1 and "offload_param" not in one and one["offload_optimizer"]["device"] == "cpu"
    knobs = ["zero.stage3_max_live_parameters=1e6", "zero.stage3_prefetch_bucket_size=5e5",
             "zero.stage3_max_reuse_distance=0", "zero.stage3_param_persistence_threshold=2048"]
    three = scenario.load(str(path), ["zero.stage=3", 'zero.offload_param="cpu"', *knobs]).deepspeed_config()
    z = three["zero_optimization"]
    # pin_memory not given: left to DeepSpeed's own default, not restated (packaged scenarios set it)
    assert z["stage"] == 3 and z["offload_param"] == {"device": "cpu"}
    assert (z["stage3_max_live_parameters"], z["stage3_prefetch_bucket_size"], z["stage3_max_reuse_distance"],
            z["stage3_param_persistence_threshold"]) == (1_000_000, 500_000, 0, 2048)
    # knobs not given are left to DeepSpeed's own defaults, not restated here
    assert "stage3_max_live_parameters" not in scenario.load(str(path), ["zero.stage=3"]).deepspeed_config()[
        "zero_optimization"]


def test_model_sized_by_params_rounds_to_layers() -> None:
    m = scenario.Model(params=50e6, width=2048)
    assert m.n_layers == 12 and abs(m.n_params - 50e6) / 50e6 < 0.02
