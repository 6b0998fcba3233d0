"""Shared helpers: run the real CLI (in a fresh process, or in this one for commands that only read files),
and share tiny real runs across tests.

Every run here is a real DeepSpeed ZeRO-2 CPU-offload training in a fresh process; the
compiled ops are cached under the user's cache dir (RSSPROBE_CACHE), so only the first
run on a machine compiles.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import pytest

# glibc's dynamic mmap threshold makes identical runs retain different amounts (README,
# "Noise": +-4 B/param). Tests that compare two runs fix the threshold so that the only
# difference between the runs is the one under test.
STEADY_GLIBC = ["--malloc-env", "MALLOC_MMAP_THRESHOLD_=65536"]


# Commands that only read and write files run inside the test's own process (click's CliRunner): a fresh
# interpreter costs ~1.8 s of imports per call (pandas, matplotlib), and the suite makes hundreds of such calls.
# Commands that launch training, build environments or take signals run as `python -m rssprobe`, as a user's do.
IN_PROCESS = frozenset({"show", "diff", "report", "merge", "patches", "gate", "estimate", "verdict"})
LAUNCHING_FLAGS = frozenset({"--run", "--calibrate"})  # gate --run and estimate --calibrate start training runs
# Commands that train or build environments run in this process too in a test that cannot start a worker (one
# without the `worker` marker: its refusals, dry runs and listings): a worker it started would train nothing and
# fail the test (pytest_runtest_setup below), so in this process it could only ever refuse, list or build.
LAUNCHING = frozenset({"run", "scale", "matrix", "bisect", "prepare", "collect", "env"})


def rssprobe(*args: str, cwd: Path | None = None, check: bool = False, env: dict[str, str] | None = None,
             fresh: bool = False) -> subprocess.CompletedProcess[str]:
    """The CLI's exit code, stdout and stderr. fresh: in a new interpreter even when the command could run in
    this one (a test of what only a fresh process shows: its imports, its exit under a signal)."""
    from rssprobe.contract.testlane import NO_WORKER_ENV

    in_process = not fresh and bool(args) and (
        (args[0] in IN_PROCESS and not LAUNCHING_FLAGS & set(args))
        or (args[0] in IN_PROCESS | LAUNCHING and NO_WORKER_ENV in os.environ))
    if in_process:
        proc = _in_process(list(args), cwd, {"COLUMNS": "200", **(env or {})})
    else:
        proc = subprocess.run([sys.executable, "-m", "rssprobe", *args], capture_output=True, text=True,
                              cwd=cwd, env={**os.environ, "COLUMNS": "200", **(env or {})}, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"rssprobe {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def _in_process(args: list[str], cwd: Path | None, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """As `python -m rssprobe ARGS` would answer: sys.argv, the working directory, the environment and the SIGTERM
    and SIGINT handlers are this call's and restored after; an uncaught exception is a traceback on stderr and exit
    code 1; warnings a fresh interpreter would print (not deprecations) are on stderr too."""
    import signal
    import traceback
    import warnings

    from click.testing import CliRunner

    import rssprobe as main_module
    from rssprobe.cli import main

    saved = sys.argv, os.getcwd(), signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    sys.argv = [str(Path(main_module.__file__).with_name("__main__.py")), *args]
    try:
        if cwd is not None:
            os.chdir(cwd)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            for quiet in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", quiet)
            result = CliRunner().invoke(main, args, env=env, catch_exceptions=True, prog_name="rssprobe")
    finally:
        sys.argv = saved[0]
        os.chdir(saved[1])
        signal.signal(signal.SIGTERM, saved[2])
        signal.signal(signal.SIGINT, saved[3])
    stderr = result.stderr + "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno)
                                     for w in caught)
    code = result.exit_code
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(*result.exc_info))  # type: ignore[misc]
        code = 1
    return subprocess.CompletedProcess([sys.executable, "-m", "rssprobe", *args], code, result.stdout, stderr)


def summary(run_dir: Path) -> dict[str, Any]:
    return json.loads(rssprobe("show", str(run_dir), "--format", "json", check=True).stdout)


_SHM_BEFORE = pytest.StashKey[set]()  # DeepSpeed's /dev/shm buffers before the session


def _controller(config: pytest.Config) -> bool:
    """The pytest process that starts and ends the whole session: the only one, or pytest-xdist's controller."""
    return not hasattr(config, "workerinput")


def pytest_sessionstart(session: pytest.Session) -> None:
    if _controller(session.config):
        from rssprobe.run import host

        session.config.stash[_SHM_BEFORE] = set(host.SHM_DIR.glob(host.DEEPSPEED_SHM)) if host.SHM_DIR.is_dir() \
            else set()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Runs whose orchestrator a test kills, or that a test launches with torchrun itself, end with nobody to
    remove DeepSpeed's /dev/shm buffers (66 MiB of RAM each, until reboot; the orchestrator removes its own
    runs'): at the end the session removes those it made that no process maps any more. Only where the whole
    session ends (with pytest-xdist, after every worker): a worker ending early must not take the buffer of a
    run another worker is still making."""
    if _controller(session.config) and _SHM_BEFORE in session.config.stash:
        from rssprobe.run import host

        for path in set(host.unmapped_deepspeed_shm()) - session.config.stash[_SHM_BEFORE]:
            path.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="session")
def tiny_baseline(runs_dir: Path) -> Path:
    """One real tiny baseline run (fixed mmap threshold), shared by the tests that only read it."""
    out = runs_dir / "tiny-baseline"
    rssprobe("run", "tiny", "--out", str(out), *STEADY_GLIBC, check=True)
    return out


@pytest.fixture(scope="session")
def tiny_two_ranks(runs_dir: Path) -> Path:
    """One real tiny run on 2 ranks (fixed mmap threshold), shared by the multi-rank and estimate tests."""
    out = runs_dir / "two-ranks"
    rssprobe("run", "tiny", "--world-size", "2", "--out", str(out), *STEADY_GLIBC, check=True)
    return out


@pytest.fixture(scope="session")
def demo_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded demo runs (baseline/ and patched/, 3 runs each: reports/readme/runs.tar.gz), extracted once; the
    tests that render the answer read them, none trains."""
    root = tmp_path_factory.mktemp("demo")
    with tarfile.open(Path(__file__).resolve().parent.parent / "reports" / "readme" / "runs.tar.gz") as tar:
        tar.extractall(root, filter="data")
    return root


@pytest.fixture(scope="module")
def demo_compared(demo_runs: Path) -> dict[str, Any]:
    """`rssprobe diff` of the recorded demo (baseline against patched) as JSON: what answer and verdict tests read."""
    return json.loads(rssprobe("diff", str(demo_runs / "baseline"), str(demo_runs / "patched"), "--format", "json",
                               check=True).stdout)


@pytest.fixture(scope="session")
def tiny_calibration(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], str]:
    """`rssprobe estimate tiny --calibrate` into a throw-away estimate root (3 sizes of tiny, 12 steps each, one run
    a size: fixed mmap threshold): (the estimate root, the estimate for tiny on one CPU rank as JSON, its stderr)."""
    root = tmp_path_factory.mktemp("estimate-root")
    proc = rssprobe("estimate", "tiny", "--calibrate", "--ranks-per-node", "1", "--accelerator", "cpu", *STEADY_GLIBC,
                    "--format", "json",
                    env={"RSSPROBE_ESTIMATE": str(root)}, check=True)
    return root, json.loads(proc.stdout), proc.stderr



@pytest.fixture(scope="session")
def warmed_shapes(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """Where rssprobe/data/shapes.json was computed for another transformers than the installed one (CI installs
    the newest release in range), a cache root that `python -m tools.shapes --warm` filled, as make install fills
    the user's; None where the shipped file is read as it is (a fresh machine's cache root is then empty)."""
    from rssprobe.config import shapecache
    from tools import shapes

    now = shapecache.stamp()
    if now is None:
        pytest.skip("transformers is not installed")
    if shapes.shipped_stamp() == now:
        return None
    root = tmp_path_factory.mktemp("warmed-shapes")
    env = {k: v for k, v in os.environ.items() if k != "RSSPROBE_CACHE"}
    subprocess.run([sys.executable, "-m", "tools.shapes", "--warm"], cwd=Path(__file__).resolve().parent.parent,
                   env={**env, "RSSPROBE_CACHE": str(root)}, check=True, capture_output=True, timeout=600)
    return root


@pytest.fixture
def fresh_cache(tmp_path: Path, warmed_shapes: Path | None) -> Path:
    """A fresh machine's cache root right after make install, this test's own: empty where the shipped shapes are
    read, else a copy of the warmed one (tests/conftest.py: warmed_shapes)."""
    import shutil

    root = tmp_path / "fresh-cache"
    if warmed_shapes is None:
        root.mkdir()
    else:
        shutil.copytree(warmed_shapes, root)
    return root


# ---- the test lanes (markers declared in pyproject.toml): `worker` marks a test that starts a training worker
# (make test-fast leaves them out), `slow` an end-to-end check of minutes (make test-slow; make test leaves them out)

_GUARD = Path(tempfile.mkdtemp(prefix="rssprobe-worker-guard-"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture of a test without the `worker` marker (session fixtures included): a worker started
    now records itself in a file and trains nothing (rssprobe.contract.testlane.NO_WORKER_ENV)."""
    from rssprobe.contract.testlane import NO_WORKER_ENV

    os.environ.pop(NO_WORKER_ENV, None)
    if item.get_closest_marker("worker") is None:
        sentinel = _GUARD / hashlib.sha1(item.nodeid.encode()).hexdigest()
        sentinel.unlink(missing_ok=True)
        os.environ[NO_WORKER_ENV] = str(sentinel)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """A test without the marker that started a worker fails, whatever it asserted."""
    from rssprobe.contract.testlane import NO_WORKER_ENV

    sentinel = os.environ.pop(NO_WORKER_ENV, None)
    if sentinel and Path(sentinel).exists():
        started = Path(sentinel).read_text().strip().splitlines()
        pytest.fail(f"{item.nodeid} started a training worker without @pytest.mark.worker ({started[0]})",
                    pytrace=False)
