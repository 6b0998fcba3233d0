"""Your own launcher (issue 31, part 2): `rssprobe run -- LAUNCHER ... train.py ARGS` starts the command as given
and probes every rank that runs the script (rssprobe/worker/launched/sitecustomize.py). Known answer: the same
script under torchrun, DeepSpeed's launcher and accelerate launch gives the same per-rank live buffers, and
`-- python train.py` the same as `--script train.py`."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from .conftest import STEADY_GLIBC, rssprobe, summary

pytestmark = [pytest.mark.worker, pytest.mark.slow]  # make test-slow: end-to-end, minutes each

ROOT = Path(__file__).resolve().parent.parent
LINEAR = ROOT / "examples" / "train_linear.py"
ARGS = ["--deepspeed_config", str(ROOT / "examples" / "ds_config_linear.json"), "--steps", "2", "--width", "512"]


def _port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _end_roles(run: Path, rank: int) -> dict[str, int]:
    name = "events.jsonl" if rank == 0 else f"events.rank{rank}.jsonl"
    census = next(json.loads(line) for line in (run / name).read_text().splitlines()
                  if '"census"' in line and json.loads(line).get("at") == "end")
    return {role: c["allocated"] for role, c in census["roles"].items() if role != "other"}


LAUNCHERS = {
    "torchrun": lambda port: ["torchrun", "--nproc-per-node", "2", "--master-port", port],
    "deepspeed": lambda port: ["deepspeed", "--num_gpus", "2", "--master_port", port],
    "accelerate": lambda port: ["accelerate", "launch", "--multi_gpu", "--num_processes", "2",
                                "--main_process_port", port],
}


@pytest.fixture(scope="module")
def launched(runs_dir: Path) -> dict[str, tuple[Path, Any]]:
    out = {}
    for name, command in LAUNCHERS.items():
        run = runs_dir / f"launched-{name}"
        proc = rssprobe("run", "--out", str(run), *STEADY_GLIBC, "--", *command(_port()), str(LINEAR), *ARGS)
        out[name] = (run, proc)
    return out


@pytest.mark.parametrize("name", list(LAUNCHERS))
def test_every_rank_of_a_launcher_is_probed(launched: dict[str, tuple[Path, Any]], name: str) -> None:
    run, proc = launched[name]
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(run)
    assert s["status"] == "ok" and s["world_size"] == 2 and s["steps_done"] == 2, s.get("error")
    assert (run / "events.rank1.jsonl").is_file() and s["node"]["ranks"] == 2
    assert s["script"]["command"][0] == LAUNCHERS[name]("0")[0]


def test_the_same_script_under_each_launcher_has_the_same_buffers(launched: dict[str, tuple[Path, Any]]) -> None:
    runs = {name: run for name, (run, proc) in launched.items() if proc.returncode == 0}
    assert len(runs) == len(LAUNCHERS)
    for rank in (0, 1):
        roles = {name: _end_roles(run, rank) for name, run in runs.items()}
        first = roles["torchrun"]
        assert {"fp32_master", "adam_exp_avg"} <= set(first)
        for name, got in roles.items():
            assert got == first, (rank, name)  # exact: the same partitions, whoever started the rank


def test_python_train_py_is_the_script_run(runs_dir: Path) -> None:
    plain, scripted = runs_dir / "launched-python", runs_dir / "scripted-linear"
    rssprobe("run", "--out", str(plain), *STEADY_GLIBC, "--", "python", str(LINEAR), *ARGS, check=True)
    rssprobe("run", "--script", str(LINEAR), "--out", str(scripted), *STEADY_GLIBC, "--", *ARGS, check=True)
    a, b = summary(plain), summary(scripted)
    assert a["status"] == b["status"] == "ok" and a["params"] == b["params"]
    assert _end_roles(plain, 0) == _end_roles(scripted, 0)
