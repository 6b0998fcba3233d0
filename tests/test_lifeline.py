"""Killed runs leave nothing running or locked: real orchestrators, real workers, real signals.

`timeout N rssprobe ...` and CI cancellations send SIGTERM to rssprobe; a SIGKILL (or the OOM
killer) cannot be handled at all. Either way the training worker must end with it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rssprobe.contract.environment import SHARED_OPS_ENV
from rssprobe.run import host, opcache
from rssprobe.store import judgement as liveness
from rssprobe.store import rundir as storage

from .conftest import rssprobe


def _start(args: list[str], runs: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    full_env = {**os.environ, "RSSPROBE_RUNS": str(runs), **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "rssprobe", "run", *args], env=full_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _events(run: Path, rank: int = 0) -> list[dict]:
    return storage.RunDir(run).events(rank)  # complete lines only: the one being written is left out


def _wait_for_steps(run: Path, n: int, rank: int = 0, timeout: float = 600) -> int:
    """The worker's pid, once it has finished n steps."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = _events(run, rank)
        if sum(e["event"] == "step" for e in events) >= n:
            return next(e["pid"] for e in events if e["event"] == "hello")
        time.sleep(0.2)
    raise AssertionError(f"no {n} steps in {run} (rank {rank}) within {timeout}s")


def _alive(pid: int) -> bool:
    """True while pid runs (a zombie has ended: it only waits to be reaped by its parent)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _gone_within(pids: list[int], seconds: float) -> float:
    """Seconds until every pid ended; fails if one still runs after `seconds`."""
    t0 = time.monotonic()
    while any(_alive(p) for p in pids):
        if time.monotonic() - t0 > seconds:
            raise AssertionError(f"still running {seconds}s later: {[p for p in pids if _alive(p)]}")
        time.sleep(0.05)
    return time.monotonic() - t0


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


@pytest.mark.worker
def test_sigterm_to_rssprobe_ends_the_worker_and_marks_the_run_interrupted(tmp_path: Path) -> None:
    out = tmp_path / "terminated"
    proc = _start(["tiny", "--steps", "100000", "--out", str(out)], tmp_path)
    worker = _wait_for_steps(out, 2)
    proc.send_signal(signal.SIGTERM)  # what `timeout` and CI cancellations send
    _gone_within([worker], 20)
    proc.communicate(timeout=60)
    assert proc.returncode == 143  # 128 + SIGTERM; Ctrl-C stays 130
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["error"] == "interrupted (SIGTERM)"
    steps = sum(e["event"] == "step" for e in _events(out))
    assert manifest["steps_done"] == steps >= 2


@pytest.mark.worker
def test_sigkill_of_rssprobe_still_ends_the_worker(tmp_path: Path) -> None:
    out = tmp_path / "orphan"
    proc = _start(["tiny", "--steps", "100000", "--out", str(out)], tmp_path)
    worker = _wait_for_steps(out, 1)
    proc.kill()  # cannot be handled: only the kernel's parent-death signal reaches the worker
    proc.communicate(timeout=60)
    took = _gone_within([worker], 20)
    assert took < 20
    # the worker ended through its SIGTERM path, not as a mid-write corpse
    last = _events(out)[-1]
    assert (last["event"], last.get("status")) == ("end", "terminated")
    # the manifest still says running (nobody lived to write more); readers see that its orchestrator is gone
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "running" and manifest["orchestrator"]["pid"] == proc.pid
    files = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    shown = json.loads(rssprobe("show", str(out), "--format", "json", check=True).stdout)
    assert shown["status"] == "incomplete" and "orchestrator gone: killed?" in shown["error"], shown["error"]
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == files  # reading modified nothing


def test_an_orchestrator_is_known_by_pid_start_time_and_boot_so_a_reused_pid_is_not_taken_for_it() -> None:
    me = liveness.identity()
    assert me["start_ticks"] is not None and me["boot_id"]
    assert liveness.gone(me) is None  # this process runs
    assert "killed?" in liveness.gone({**me, "start_ticks": me["start_ticks"] + 1})  # same pid, another process
    assert "rebooted" in liveness.gone({**me, "boot_id": "another-boot"})
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert "killed?" in liveness.gone({"pid": child.pid, "start_ticks": 1, "boot_id": me["boot_id"]})
    assert liveness.gone(None) is None and liveness.gone({"pid": "x"}) is None  # older runs: not known


@pytest.mark.worker
def test_sigkill_of_rssprobe_ends_torchrun_and_every_rank(tmp_path: Path) -> None:
    out = tmp_path / "ranks"
    proc = _start(["tiny", "--world-size", "2", "--steps", "100000", "--out", str(out)], tmp_path)
    ranks = [_wait_for_steps(out, 1), _wait_for_steps(out, 1, rank=1)]
    torchrun = _children(proc.pid)
    assert len(torchrun) == 1
    proc.kill()
    proc.communicate(timeout=60)
    _gone_within([*torchrun, *ranks], 60)


def test_a_parent_that_died_before_the_request_is_noticed() -> None:
    """The race of every PDEATHSIG user: the parent may be gone before the child asks. Then it ends at once."""
    code = ("import sys; from rssprobe.contract import lifeline as l; l.die_with_parent(parent=int(sys.argv[1])); "
            "print('alive')")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    env.pop("RSSPROBE_ORCHESTRATOR_PID", None)
    here = subprocess.run([sys.executable, "-c", code, str(os.getpid())], capture_output=True, text=True, env=env)
    assert here.returncode == 0 and here.stdout.strip() == "alive"
    gone = subprocess.run([sys.executable, "-c", code, "999999999"], capture_output=True, text=True, env=env)
    assert gone.returncode == -signal.SIGTERM and gone.stdout == ""
    # re-parented to init while rssprobe's launcher (not pid 1) started it: the parent is gone too
    orphan = subprocess.run([sys.executable, "-c", code, "1"], capture_output=True, text=True,
                            env={**env, "RSSPROBE_ORCHESTRATOR_PID": str(os.getpid())})
    assert orphan.returncode == -signal.SIGTERM


# ---- stale build locks in the compiled-ops cache -------------------------------------------------

def _lock(cache: Path, op: str, age_s: float) -> Path:
    (cache / op).mkdir(parents=True, exist_ok=True)
    lock = cache / op / "lock"
    lock.write_text("")
    then = time.time() - age_s
    os.utime(lock, (then, then))
    return lock


def test_a_lock_nothing_holds_is_removed_with_one_line_naming_it(tmp_path: Path) -> None:
    lock = _lock(tmp_path, "cpu_adam", age_s=600)
    said: list[str] = []
    assert opcache.clear_stale_locks(tmp_path, say=said.append) == [lock]
    assert not lock.exists()
    assert len(said) == 1 and str(lock) in said[0] and "stale build lock" in said[0]


def test_a_lock_with_a_compiler_working_in_its_directory_is_kept(tmp_path: Path) -> None:
    lock = _lock(tmp_path, "cpu_adam", age_s=600)
    # ninja and the compilers run with the build directory as their working directory
    compiler = subprocess.Popen(["sleep", "60"], cwd=lock.parent)
    try:
        said: list[str] = []
        assert opcache.workers_in(lock.parent) == [compiler.pid]
        assert opcache.clear_stale_locks(tmp_path, say=said.append) == [] and lock.exists() and said == []
    finally:
        compiler.kill()
        compiler.wait()
    assert opcache.clear_stale_locks(tmp_path, say=said.append) == [lock]  # once it is gone, the lock is stale


def test_a_young_lock_is_given_its_holders_window_then_removed(tmp_path: Path) -> None:
    lock = _lock(tmp_path, "deepspeed_shm_comm", age_s=0)
    t0 = time.monotonic()
    assert opcache.clear_stale_locks(tmp_path, window_s=1.5, say=lambda _line: None) == [lock]
    assert 1.0 < time.monotonic() - t0 < 10


@pytest.mark.worker
def test_a_run_recovers_from_a_stale_lock_in_its_op_cache(tmp_path: Path) -> None:
    """A lock a killed build left in this environment's op cache (a copy of it, so nothing compiles: its compiled ops,
    or, where this environment loads the ops built once for its build key (worker/opreuse.py) and so has none of its
    own, an empty build directory beside the real shared ones)."""
    from importlib.metadata import version

    real = host.ops_cache_dir(sys.executable, version("torch"), version("deepspeed"))
    shared = host.shared_ops_dir()
    if not (real / "deepspeed_shm_comm").is_dir() and not any(shared.glob("*/parts.json")):
        pytest.skip(f"no compiled ops in {real} or {shared} yet (the first run on a machine compiles them)")
    cache = tmp_path / "cache"
    copy = cache / real.relative_to(host.cache_root())
    if real.is_dir():
        shutil.copytree(real, copy, symlinks=True, ignore=shutil.ignore_patterns("lock"))
    lock = _lock(copy, "deepspeed_shm_comm", age_s=600)
    proc = rssprobe("run", "tiny", "--steps", "1", "--out", str(tmp_path / "r"),
                    env={"RSSPROBE_CACHE": str(cache), SHARED_OPS_ENV: str(shared)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"removed stale build lock {lock}" in proc.stderr
    assert not lock.exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
@pytest.mark.worker
def test_killed_while_compiling_leaves_no_compiler_and_no_lock(tmp_path: Path, sig: int) -> None:
    """An empty op cache: the worker compiles its first op; rssprobe is stopped (SIGTERM) or killed (SIGKILL)."""
    cache = tmp_path / "cache"
    proc = _start(["tiny", "--steps", "1", "--out", str(tmp_path / "r")], tmp_path, env={"RSSPROBE_CACHE": str(cache)})
    deadline = time.monotonic() + 300
    compilers: list[int] = []
    while not compilers:  # the build lock is taken and ninja runs in the op's build directory
        assert time.monotonic() < deadline and proc.poll() is None, "no compile started"
        locks = list(cache.glob("torch_extensions/*/*/lock"))
        compilers = opcache.workers_in(locks[0].parent) if locks else []
        time.sleep(0.1)
    worker = next(e["pid"] for e in _events(tmp_path / "r") if e["event"] == "hello")
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    _gone_within([worker, *compilers], 30)
    t0 = time.monotonic()
    while opcache.workers_in(locks[0].parent):  # the compilers ninja had started (c++, cc1plus)
        assert time.monotonic() - t0 < 10, f"compilers still running: {opcache.workers_in(locks[0].parent)}"
        time.sleep(0.1)
    assert not locks[0].exists()  # released on the way out: later runs do not wait on it
    if sig == signal.SIGTERM:
        assert proc.returncode == 143
        manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
        assert manifest["status"] == "interrupted" and manifest["steps_done"] == 0
