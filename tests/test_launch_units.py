"""The pieces of script runs and launcher runs that need no training process (issue 31): the time-out's clock
(op builds not counted), the log tail that streams a script's output, the step total a script declares, `show
latest` for runs made with --out, the user's own launch command and the hook that makes its ranks probed."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from rssprobe.campaign.scale import SizeArg
from rssprobe.commands.common_args import launch_command, scenario_spec
from rssprobe.config.script import split_command
from rssprobe.errors import UserError
from rssprobe.run import environment
from rssprobe.run.deadline import Deadline, LogTail
from rssprobe.worker import steptotal
from rssprobe.worker.launched import sitecustomize

from .conftest import rssprobe

ROOT = Path(__file__).resolve().parent.parent
LINEAR = ROOT / "examples" / "train_linear.py"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_timeout_does_not_count_an_announced_op_build() -> None:
    clock = Clock()
    d = Deadline(10, None, clock=clock)
    d.watch({"event": "compiling", "rank": 0, "op": "cpu_adam"})
    clock.now = 500  # a first build on a busy machine: minutes
    assert d.expired() is None and d.counted_s() == 0
    d.watch({"event": "phase", "rank": 0, "name": "ops_loaded"})
    clock.now = 509
    assert d.expired() is None
    d.watch({"event": "step", "rank": 0, "step": 2})
    clock.now = 511
    why = d.expired()
    assert why is not None and "timeout_s (10 s, not counting 500 s of DeepSpeed op builds)" in why
    assert "during step 2" in why and "--set timeout_s=N" in why


def test_the_timeout_does_not_count_a_build_seen_by_its_lock(tmp_path: Path) -> None:
    """An op a script's config builds inside deepspeed.initialize announces nothing: torch's build lock says it."""
    clock = Clock()
    d = Deadline(10, tmp_path, clock=clock)
    (tmp_path / "fused_adam").mkdir()
    (tmp_path / "fused_adam" / "lock").write_text("")
    clock.now = 1.0
    assert d.expired() is None and d.building()
    clock.now = 300.0
    assert d.expired() is None
    (tmp_path / "fused_adam" / "lock").unlink()
    clock.now = 302.0  # the lock is looked for once a second
    assert d.expired() is None and not d.building()
    clock.now = 312.0
    assert d.expired() is not None


def test_a_build_has_a_bound_of_its_own() -> None:
    clock = Clock()
    d = Deadline(10, None, build_limit_s=100, clock=clock)
    d.watch({"event": "compiling", "rank": 1, "op": "cpu_adam"})
    clock.now = 101
    assert "ran past 100 s" in (d.expired() or "")


def test_the_log_tail_gives_complete_lines_of_every_log(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []
    logs = [tmp_path / "worker.log", tmp_path / "worker.rank1.log"]
    tail = LogTail(lambda: [p for p in logs if p.exists()], lambda name, line: seen.append((name, line)))
    logs[0].write_bytes(b"step 1: loss 1.0\nstep 2: lo")
    tail.poll()
    assert seen == [("worker.log", "step 1: loss 1.0")]
    with open(logs[0], "ab") as f:
        f.write(b"ss 0.5\r\nno newline at the end")
    logs[1].write_bytes(b"caf\xe9\n")
    tail.poll()
    assert seen[1:] == [("worker.log", "step 2: loss 0.5"), ("worker.rank1.log", "caf\ufffd")]
    tail.poll(final=True)
    assert seen[-1] == ("worker.log", "no newline at the end")


def _trainer_like(max_steps: int) -> Any:
    """A frame like transformers.Trainer._inner_training_loop's, with its max_steps local."""
    def _inner_training_loop() -> Any:
        return sys._getframe()

    frame = _inner_training_loop()
    assert frame.f_locals is not None
    return frame, max_steps


def test_a_scripts_step_total_is_read_where_it_declares_it() -> None:
    class Engine:
        _config = type("C", (), {"_param_dict": {"scheduler": {"params": {"total_num_steps": 40}}}})()

    assert steptotal.find(Engine(), sys._getframe()) == 40  # DeepSpeed's scheduler config
    assert steptotal.find(object(), sys._getframe()) is None  # nothing says: the bar shows no total

    def train(num_iterations: int) -> int | None:  # HelloDeepSpeed's train(): steps 1 .. num_iterations - 1
        return steptotal.find(object(), sys._getframe())

    train.__code__ = train.__code__.replace(co_filename="/x/train_bert_ds.py")
    assert train(10) == 9


def test_show_latest_finds_a_run_made_with_out(tiny_copy: Path, tmp_path: Path) -> None:
    from rssprobe.store import rundir

    env = {"RSSPROBE_RUNS": str(tmp_path / "runs"), "RSSPROBE_CACHE": str(tmp_path / "cache")}
    elsewhere = tmp_path / "elsewhere" / "my-run"
    shutil.copytree(tiny_copy, elsewhere)
    assert rssprobe("show", "latest", env=env).returncode == 2  # nothing under the runs root, nothing noted
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        rundir.note_latest(elsewhere)  # what `rssprobe run --out elsewhere/my-run` does when it ends
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    out = json.loads(rssprobe("show", "latest", "--format", "json", env=env, check=True).stdout)
    assert out["run"] == "my-run"
    # under another runs root the record is not this one's latest; a damaged record is no record
    assert rssprobe("show", "latest", env={**env, "RSSPROBE_RUNS": str(tmp_path / "other")}).returncode == 2
    (tmp_path / "cache" / "latest.json").write_bytes(b"\xff{")
    assert rssprobe("show", "latest", env=env).returncode == 2


@pytest.fixture
def tiny_copy(tmp_path: Path) -> Path:
    """A run directory made from the recorded fake (no training): tests/fakes_rundir.py."""
    from .fakes_rundir import make_run

    return make_run(tmp_path / "fake-run")


def test_a_launch_command_is_the_words_after_a_bare_double_dash(tmp_path: Path) -> None:
    args = ("deepspeed", "--num_gpus", "2", str(LINEAR), "--steps", "3")
    assert launch_command(args, None, ["rssprobe", "run", "--steps", "2", "--", *args]) == list(args)
    assert launch_command(("tiny",), None, ["rssprobe", "run", "tiny"]) is None
    assert launch_command(("x.py", "--a"), None, ["rssprobe", "run", "--", "x.py", "--a"]) is None  # a script
    assert launch_command(("--a",), Path("x.py"), ["rssprobe", "run", "--script", "x.py", "--", "--a"]) is None
    spec = scenario_spec(args, None, argv=["rssprobe", "run", "--", *args], launcher=True)
    assert spec is not None and spec.script_command == args and spec.argv()[-len(args) - 1:] == ["--", *args]
    scen = spec.load()
    assert scen.script is not None and scen.script.command == list(args)
    assert scen.script.args == ["--steps", "3"] and scen.script.path == str(LINEAR)


@pytest.mark.parametrize("command,fragment", [
    (["torchrun", "--nproc-per-node", "2", "-m", "train"], r"a module \(-m\) is not a script"),
    (["deepspeed", "missing.py"], "no training script"),
])
def test_a_launch_command_without_a_script_is_refused(command: list[str], fragment: str) -> None:
    with pytest.raises(UserError, match=fragment):
        split_command(command)


def test_a_launch_command_with_world_size_is_refused_in_one_line(tmp_path: Path) -> None:
    proc = rssprobe("run", "--world-size", "2", "--out", str(tmp_path / "r"), "--", "torchrun", str(LINEAR))
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "the launcher" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_only_the_process_running_the_script_is_a_rank(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    env = {"PYTHON_RSSPROBE_RUN": "/runs/r1", "PYTHON_RSSPROBE_SCRIPT": str(script)}
    python = "/venv/bin/python"
    # a rank as DeepSpeed's launcher starts it: python -u train.py --local_rank=1 ARGS
    assert sitecustomize.rank_command(env, [str(script), "--local_rank=1", "--x"],
                                      [python, "-u", str(script), "--local_rank=1", "--x"], python) == \
        [python, "-u", "-m", "rssprobe.worker", "--launched", "/runs/r1", "--local_rank=1", "--x"]
    # the launchers themselves, a multiprocessing child, another script, no run: untouched
    for argv in (["/venv/bin/torchrun", "--nproc-per-node", "2"], ["-c"], [str(LINEAR)], []):
        assert sitecustomize.rank_command(env, argv, [python, *argv], python) is None
    assert sitecustomize.rank_command({}, [str(script)], [python, str(script)], python) is None


def test_a_launched_runs_environment_carries_the_run_in_python_variables(tmp_path: Path) -> None:
    base = {"PYTHONPATH": "/a", "TORCH_EXTENSIONS_DIR": "/ops", "LOCAL_SIZE": "1", "RANK": "0"}
    env = environment.launched(base, tmp_path, str(LINEAR))
    assert env["PYTHONPATH"].split(os.pathsep)[0] == environment.LAUNCHED_HOOK
    assert (Path(environment.LAUNCHED_HOOK) / "sitecustomize.py").is_file()
    # DeepSpeed's launcher forwards PYTHON* variables to other nodes
    assert env["PYTHON_RSSPROBE_RUN"] == str(tmp_path.resolve()) and env["PYTHON_RSSPROBE_OPS"] == "/ops"
    assert "LOCAL_SIZE" not in env and env["RANK"] == "0"  # python train.py alone needs its rendezvous


@pytest.mark.parametrize("text,fragment", [
    ("layers", "expected NAME=V1,V2"), ("layers=1", "at least 2 distinct"), ("=1,2", "expected NAME")])
def test_a_bad_size_arg_is_refused(text: str, fragment: str) -> None:
    with pytest.raises(UserError, match=fragment):
        SizeArg.parse(text)
    assert SizeArg.parse("--layers=1,2,4") == SizeArg("--layers", ("1", "2", "4"))


def test_scale_of_a_script_needs_its_size_arg_and_a_scenario_its_params(tmp_path: Path) -> None:
    for args in (["scale", "--script", str(LINEAR), "--params", "1e6,2e6"], ["scale", "tiny", "--size-arg", "a=1,2"],
                 ["scale", "--script", str(LINEAR)]):
        proc = rssprobe(*args, "--out", str(tmp_path / "s"))
        assert proc.returncode == 2 and "--size-arg" in proc.stderr and proc.stderr.strip().count("\n") == 0
    assert not (tmp_path / "s").exists()


def test_a_tied_weight_partitioned_by_zero3_counts_its_full_size() -> None:
    """At ZeRO-3 a partitioned weight holds an empty tensor and its size in ds_numel: the tied line read 0 params."""
    import torch

    from rssprobe.worker.models import describe

    a, b = torch.nn.Linear(8, 8, bias=False), torch.nn.Linear(8, 8, bias=False)
    b.weight = a.weight  # tied
    model = torch.nn.Sequential(a, b)
    a.weight.data = torch.empty(0)
    a.weight.ds_numel = 64  # type: ignore[attr-defined]
    got = describe(model, {"model": {"kind": "script"}})
    assert got["tied"] == [["0.weight", "1.weight"]] and got["tied_params"] == 64
