"""Hostile input, fifth round (issue 40): everything that can be checked before a run is checked before it, once.
One table per class, each case a test:

* X1: a launch command whose launcher cannot start (missing, a directory, no x bit, a FIFO, an empty word) is one
  line before the run directory exists; one that fails to start anyway (a race) leaves the run failed, not running;
* C1: a damaged cached checkpoint (a truncated or missing shard, no config.json, a damaged index, an empty
  directory) is found before any worker loads it, and written again;
* P1: every campaign (matrix, plan, scale, gate --run and --limits, bisect, estimate's calibration) runs the
  per-run preflight of every cell before its first, the native pin's lock limit included;
* A1: the transformers/accelerate axes parsed strictly, once (empty, repeated, not a checkout, no such revision,
  a range in an env spec, beside --components);
* S2: a script sweep's --size-arg parsed by the list parser --params uses (a comma too many, an empty value, a
  space in the name, a newline, two --size-arg);
* E2: estimate's sizes and patch pairs go through the checks `run` makes (a size that overflows or is below 1, one
  calibration size, ds.native-pin beside pin.register).

Same promise as every hostile class: one line, exit 2, no traceback, nothing made. The tests run in the fast lane
(no `worker` marker): a worker started by any of them would record itself and fail the test (conftest.py), so each
refusal here also proves that no worker started. The P1 cases run in a fresh process without CAP_IPC_LOCK under an
8 MiB lock limit (prlimit, setpriv), as test_fixes.py's single-run case does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from rssprobe.config import scenario
from rssprobe.run import checkpointfiles, checkpoints, launcher

from .test_hostile_classes import Ran, _roots, cli

ROOT = Path(__file__).resolve().parent.parent
LINEAR = ROOT / "examples" / "train_linear.py"


def _work(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "t.py").write_text("print('never run')\n")
    (work / "noexec").write_text("#!/bin/sh\n")
    (work / "noexec").chmod(0o644)
    (work / "adir").mkdir()
    os.mkfifo(work / "fifo")
    return work


def _nothing_made(tmp_path: Path, work: Path) -> None:
    assert not (tmp_path / "roots").exists() and not (work / "R").exists()


# ==== X1: a launcher that cannot start ==========================================================================
# (id, the launch command after `--` ({w}: the work directory), fragment). Each: exit 2, one line, no run directory.

LAUNCHERS: list[tuple[str, list[str], str]] = [
    ("not-on-path", ["nosuchlauncher", "{w}/t.py"], "nosuchlauncher: no executable of that name on PATH"),
    ("missing-path", ["{w}/nosuch", "{w}/t.py"], "no such file"),
    ("a-directory", ["{w}/adir", "{w}/t.py"], "is a directory"),
    ("no-x-bit", ["{w}/noexec", "{w}/t.py"], "is not executable"),
    ("a-fifo", ["{w}/fifo", "{w}/t.py"], "is a FIFO"),
    ("an-empty-word", ["", "{w}/t.py"], "an empty word"),
    ("a-blank-word", [" ", "{w}/t.py"], "an empty word"),
]


@pytest.mark.parametrize("command,fragment", [c[1:] for c in LAUNCHERS], ids=[c[0] for c in LAUNCHERS])
def test_a_launcher_that_cannot_start_is_one_line_before_the_run_directory(tmp_path: Path, command: list[str],
                                                                           fragment: str) -> None:
    work = _work(tmp_path)
    argv = [w.replace("{w}", str(work)) for w in command]
    got = cli("run", "--out", str(work / "R"), "--", *argv, env=_roots(tmp_path))
    assert got.code == 2 and fragment in got.one_line(), (got.code, got.stderr)
    _nothing_made(tmp_path, work)


def test_a_launcher_found_is_the_one_execvp_would_start(tmp_path: Path) -> None:
    """The controls: a launcher on PATH, one given as a path; a non-executable file of that name earlier on PATH
    is passed over, as execvp passes it."""
    work = _work(tmp_path)
    assert launcher.resolve(["sh", "x.py"]) == Path(shutil.which("sh") or "")
    assert launcher.resolve([sys.executable, "x.py"]) == Path(sys.executable)
    (work / "sh").write_text("")
    assert launcher.resolve(["sh"], f"{work}{os.pathsep}{os.environ['PATH']}") != work / "sh"


def test_a_launcher_that_fails_to_start_anyway_leaves_the_run_failed(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The race: the launcher passed the check, and is gone when the run starts it. One line, exit 2, and the run
    directory says failed (it was "running" for ever)."""
    work = _work(tmp_path)
    monkeypatch.setattr(launcher, "resolve", lambda command, path=None: Path(command[0]))
    got = cli("run", "--out", str(work / "R"), "--", str(work / "gone"), str(work / "t.py"), env=_roots(tmp_path))
    lines = got.stderr.strip().splitlines()  # the run had started: its progress line, then the one error line
    assert got.code == 2 and "Traceback" not in got.stderr and "could not be started" in lines[-1], got.stderr
    assert sum("error" in line for line in lines) == 1
    manifest = json.loads((work / "R" / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "could not be started" in manifest["error"]


# ==== C1: a damaged cached checkpoint ===========================================================================

SMALL = ['model.load="checkpoint"', "model.hf.hidden_size=64", "model.hf.intermediate_size=128",
         "model.hf.num_hidden_layers=1", "model.hf.num_attention_heads=2", "model.hf.vocab_size=256", "model.seq_len=8",
         "model.from_pretrained.shards=3"]


def _checkpoint(path: Path, shards: int = 3) -> Path:
    """A sharded safetensors checkpoint as save_pretrained lays it out (config.json, model.safetensors.index.json,
    model-0000K-of-0000N.safetensors), its shards written by the safetensors library itself (a few float32 tensors
    each): the files the checks read, without importing torch."""
    import numpy as np
    from safetensors.numpy import save_file

    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    weights = {}
    for k in range(1, shards + 1):
        name = f"model-{k:05d}-of-{shards:05d}.safetensors"
        tensors = {f"layers.{k}.{t}": np.full((4, 8), k, dtype=np.float32) for t in ("a", "b")}
        save_file(tensors, str(path / name), metadata={"format": "pt"})
        weights.update(dict.fromkeys(tensors, name))
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 0},
                                                                   "weight_map": weights}))
    return path


def _index(path: Path) -> dict[str, str]:
    return json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]


def _a_shard(path: Path) -> Path:
    return path / sorted(set(_index(path).values()))[-1]


def _truncate(path: Path) -> None:
    shard = _a_shard(path)
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])


def _header_past_the_end(path: Path) -> None:
    shard = _a_shard(path)
    shard.write_bytes((10**9).to_bytes(8, "little") + shard.read_bytes()[8:])


def _empty(path: Path) -> None:
    shutil.rmtree(path)
    path.mkdir()


DAMAGED: list[tuple[str, Callable[[Path], None], str]] = [
    ("truncated-shard", _truncate, "truncated"),
    ("shard-header-past-the-end", _header_past_the_end, "truncated"),
    ("missing-shard", lambda p: _a_shard(p).unlink(), "is missing"),
    ("no-config-json", lambda p: (p / "config.json").unlink(), "config.json is missing"),
    ("damaged-config-json", lambda p: (p / "config.json").write_text("{"), "config.json is not JSON"),
    ("damaged-index", lambda p: (p / "model.safetensors.index.json").write_text("{\"weight_map\": "),
     "index.json is not JSON"),
    ("index-without-weights", lambda p: (p / "model.safetensors.index.json").write_text("{}"), "no weight_map"),
    ("empty-directory", _empty, "config.json is missing"),
    ("a-file-not-a-directory", lambda p: (shutil.rmtree(p), p.write_text("")), "not a directory"),
]


@pytest.mark.parametrize("damage,fragment", [c[1:] for c in DAMAGED], ids=[c[0] for c in DAMAGED])
def test_a_damaged_cached_checkpoint_is_named_before_any_worker(tmp_path: Path, damage: Callable[[Path], None],
                                                                fragment: str) -> None:
    path = _checkpoint(tmp_path / "ck")
    assert checkpointfiles.damage(path, "safetensors") is None  # the control: a whole one passes
    damage(path)
    why = checkpointfiles.damage(path, "safetensors")
    assert why is not None and fragment in why, why


def test_a_damaged_cached_checkpoint_is_written_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The cache itself damaged (a shard cut in half, where the next run's checkpoint is cached): it is written
    again, whole, by the real writer (rssprobe.worker.checkpoint, ~10 s: torch and transformers imported once), and
    every tensor of every shard reads back; it says so. It was loaded as found, and every run of that shape failed
    in its worker ("SafetensorError ... incomplete metadata")."""
    from safetensors import safe_open

    monkeypatch.setenv("RSSPROBE_CHECKPOINTS", str(tmp_path / "cache"))
    scen = scenario.load("llama-small", SMALL)
    path = checkpoints.directory(scen, sys.executable)
    _truncate(_checkpoint(path))
    assert checkpoints.ensure(scen, sys.executable) == path
    assert "is damaged" in capsys.readouterr().err
    for shard in sorted(set(_index(path).values())):
        with safe_open(str(path / shard), "pt") as f:
            for name in f.keys():
                f.get_tensor(name)


# ==== P1: a campaign's every cell checked before its first ======================================================
# A native-pin configuration whose lock limit cannot hold one rank's pinned buffers, inside a campaign. Each: exit 2,
# one line naming the `ulimit -l` it needs, no directory, no worker (it made directories and ran cells first).

DROP = ["prlimit", "--memlock=8388608:8388608", "setpriv", "--bounding-set", "-ipc_lock", "--inh-caps", "-ipc_lock"]
PLAN = '[plan]\nscenario = "tiny"\nrepeat = 1\npatches = ["baseline", "ds.native-pin"]\n'

CAMPAIGNS: list[tuple[str, list[str]]] = [
    ("matrix", ["matrix", "tiny", "--patch", "baseline,ds.native-pin", "--repeat", "1"]),
    ("matrix-a-later-cell", ["matrix", "tiny", "--patch", "pr8132,ds.native-pin+pr8132", "--repeat", "1"]),
    ("plan", ["matrix", "--plan", "{w}/p.toml"]),
    ("scale-its-largest-size", ["scale", "tiny", "--params", "1e6,2e6", "--patch", "ds.native-pin"]),
    ("gate-run", ["gate", "tiny", "--run", "--patch", "ds.native-pin"]),
    ("gate-limits", ["gate", "tiny", "--limits", "{w}/l.toml", "--patch", "ds.native-pin"]),
    ("bisect-components", ["bisect", "tiny", "--components", "ds.native-pin,pr8132"]),
    ("estimate-calibration", ["estimate", "tiny", "--calibrate", "--ranks-per-node", "1", "--accelerator", "cpu",
                              "--patch", "ds.native-pin"]),
]


def _dropped() -> bool:
    return bool(shutil.which("prlimit") and shutil.which("setpriv")) and \
        subprocess.run([*DROP, "true"], capture_output=True).returncode == 0


@pytest.mark.parametrize("args", [c[1] for c in CAMPAIGNS], ids=[c[0] for c in CAMPAIGNS])
def test_a_campaign_checks_every_cell_before_its_first(tmp_path: Path, args: list[str]) -> None:
    if not _dropped():
        pytest.skip("prlimit and setpriv (util-linux) are needed to drop CAP_IPC_LOCK and lower the lock limit")
    work = _work(tmp_path)
    (work / "p.toml").write_text(PLAN)
    (work / "l.toml").write_text('[limits]\n"budget.live" = 30.0\n')
    argv = [a.replace("{w}", str(work)) for a in args]
    env = {**os.environ, "COLUMNS": "200", **_roots(tmp_path), "RSSPROBE_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([*DROP, sys.executable, "-m", "rssprobe", *argv], capture_output=True, text=True, cwd=work,
                          env=env, timeout=300, stdin=subprocess.DEVNULL)
    got = Ran(proc.returncode, proc.stdout, proc.stderr)
    assert got.code == 2 and "run `ulimit -l" in got.one_line() and "cell" not in got.stderr, got.stderr
    _nothing_made(tmp_path, work)
    assert sorted(p.name for p in work.iterdir()) == ["adir", "fifo", "l.toml", "noexec", "p.toml", "t.py"]


# ==== A1: version axes parsed strictly, once ====================================================================


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git checkout of a Python project (pyproject.toml), one commit."""
    path = tmp_path_factory.mktemp("clone") / "transformers"
    path.mkdir()
    (path / "pyproject.toml").write_text('[project]\nname = "transformers"\nversion = "0"\n')
    subprocess.run(["git", "-C", str(path), "init", "-q"], check=True)
    subprocess.run(["git", "-C", str(path), "add", "."], check=True)
    subprocess.run(["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"],
                   check=True)
    return path


AXES: list[tuple[str, list[str], str]] = [
    ("matrix-transformers-comma", ["matrix", "tiny", "--transformers", ","], "an empty value"),
    ("matrix-transformers-trailing-comma", ["matrix", "tiny", "--transformers", "4.51.3,"], "an empty value"),
    ("matrix-transformers-twice", ["matrix", "tiny", "--transformers", "4.51.3,4.51.3"], "4.51.3 is given twice"),
    ("matrix-transformers-twice-repeated-flag", ["matrix", "tiny", "--transformers", "4.51.3", "--transformers",
                                                 "4.51.3"], "is given twice"),
    ("matrix-accelerate-twice", ["matrix", "tiny", "--accelerate", "1.0.0,1.0.0"], "1.0.0 is given twice"),
    ("matrix-torch-comma", ["matrix", "tiny", "--torch", ","], "an empty value"),
    ("matrix-transformers-not-a-checkout", ["matrix", "tiny", "--transformers", "{w}/adir"], "is not a checkout"),
    ("matrix-transformers-no-such-rev", ["matrix", "tiny", "--transformers", "{clone}@nosuchrev"],
     "nosuchrev is not a revision"),
    ("bisect-transformers-comma", ["bisect", "tiny", "--transformers", "4.51.3,,4.52.0"], "an empty value"),
    ("bisect-transformers-not-a-checkout", ["bisect", "tiny", "--transformers", "{w}/adir,4.52.0"],
     "is not a checkout"),
    ("bisect-transformers-no-such-rev", ["bisect", "tiny", "--transformers", "{clone}@nosuchrev,{clone}@HEAD"],
     "nosuchrev is not a revision"),
    ("bisect-transformers-beside-components", ["bisect", "tiny", "--components", "pr8132", "--transformers",
                                               "4.51.3"], "--transformers beside --components"),
    ("bisect-accelerate-beside-components", ["bisect", "tiny", "--components", "pr8132", "--accelerate", "1.0.0"],
     "--accelerate beside --components"),
    ("env-create-transformers-range", ["env", "create", "torch==2.13.0 deepspeed==0.19.8 transformers>=4"],
     "transformers>=4: pin an exact version"),
    ("env-create-accelerate-range", ["env", "create", "torch==2.13.0 deepspeed==0.19.8 accelerate<2"],
     "accelerate<2: pin an exact version"),
]


@pytest.mark.parametrize("args,fragment", [c[1:] for c in AXES], ids=[c[0] for c in AXES])
def test_an_axis_value_is_parsed_strictly_before_any_environment(tmp_path: Path, clone: Path, args: list[str],
                                                                 fragment: str) -> None:
    work = _work(tmp_path)
    argv = [a.replace("{w}", str(work)).replace("{clone}", str(clone)) for a in args]
    got = cli(*argv, env={**_roots(tmp_path), "RSSPROBE_ENVS": str(tmp_path / "roots" / "envs")})
    assert got.code == 2 and fragment in got.one_line(), (got.code, got.stderr)
    _nothing_made(tmp_path, work)


def test_a_checkout_and_its_revision_are_taken(clone: Path) -> None:
    """The controls: a release, a checkout, and one of its revisions."""
    from rssprobe.run import envs

    assert envs.axis_values("--transformers", ["4.51.3, 4.52.0", f"{clone}@HEAD", str(clone)]) == \
        ["4.51.3", "4.52.0", f"{clone}@HEAD", str(clone)]


# ==== S2: a script sweep's --size-arg, parsed as --params is ====================================================

SIZE_ARGS: list[tuple[str, list[str], str]] = [
    ("trailing-comma", ["--size-arg", "layers=1,2,"], "an empty value"),
    ("empty-value", ["--size-arg", "layers=1,,2"], "an empty value"),
    ("only-commas", ["--size-arg", "layers=,,"], "an empty value"),
    ("space-in-the-name", ["--size-arg", "la yers=1,2"], "expected NAME=V1,V2"),
    ("newline-in-a-value", ["--size-arg", "layers=1,2\n4"], "a space or a control character"),
    ("space-in-a-value", ["--size-arg", "layers=1,2 4"], "a space or a control character"),
    ("a-value-twice", ["--size-arg", "layers=1,2,1"], "1 is given twice"),
    ("two-size-args", ["--size-arg", "layers=1,2", "--size-arg", "width=8,16"], "--size-arg given 2 times"),
    ("name-not-an-option", ["--size-arg", "1layers=1,2"], "expected NAME=V1,V2"),
]


@pytest.mark.parametrize("args,fragment", [c[1:] for c in SIZE_ARGS], ids=[c[0] for c in SIZE_ARGS])
def test_a_size_arg_is_parsed_by_the_list_parser_before_the_sweep(tmp_path: Path, args: list[str],
                                                                  fragment: str) -> None:
    work = _work(tmp_path)
    got = cli("scale", "--script", str(LINEAR), *args, "--out", str(work / "R"), "--", "--width", "8",
              env=_roots(tmp_path))
    assert got.code == 2 and fragment in got.one_line(), (got.code, got.stderr)
    _nothing_made(tmp_path, work)


# ==== E2: estimate's sizes and patch pairs, checked as `run` checks them ========================================

ESTIMATE = ["estimate", "tiny", "--ranks-per-node", "1", "--accelerator", "cpu"]
ESTIMATES: list[tuple[str, list[str], str]] = [
    ("node-ram-overflows", ["--node-ram", "1e308T"], "is not a finite number"),
    ("node-ram-half-a-byte", ["--node-ram", "0.5B"], "of at least 1"),
    ("node-ram-a-fraction", ["--node-ram", "0.3"], "of at least 1"),
    ("params-overflow", ["--params", "1e308T"], "is not a finite number"),
    ("params-a-fraction", ["--params", "0.5"], "of at least 1"),
    ("one-calibration-size", ["--calibrate", "--calibration-params", "1e6"], "at least 2 distinct sizes"),
    ("one-calibration-size-twice", ["--calibrate", "--calibration-params", "1e6,1M"], "at least 2 distinct sizes"),
    ("calibration-params-trailing-comma", ["--calibrate", "--calibration-params", "1e6,2e6,"], "an empty value"),
    ("native-pin-beside-pin-register", ["--patch", "ds.native-pin", "--patch", "pin.register"],
     "both replace how DeepSpeed pins"),
    ("pin-register-beside-native-pin", ["--patch", "pin.register", "--patch", "ds.native-pin"],
     "both replace how DeepSpeed pins"),
]


@pytest.mark.parametrize("args,fragment", [c[1:] for c in ESTIMATES], ids=[c[0] for c in ESTIMATES])
def test_estimate_checks_its_sizes_and_patches_as_run_does(tmp_path: Path, args: list[str], fragment: str) -> None:
    work = _work(tmp_path)
    got = cli(*ESTIMATE, *args, env=_roots(tmp_path))
    assert got.code == 2 and fragment in got.one_line(), (got.code, got.stderr)
    _nothing_made(tmp_path, work)
