"""Launch one worker process for one run, follow its event stream, and record how it ended.

The orchestrator never measures anything itself: it prepares the run directory and the
worker's environment (op cache, allocator, rendezvous), tails events.jsonl for progress,
enforces the timeout, forwards Ctrl-C, and writes the final status into the manifest.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import host, overlay, sites_config, storage
from .errors import UserError
from .scenario import Scenario

EXIT_USAGE = 3  # worker's exit code for a usage error (see rssprobe.worker.__main__)
PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)


@dataclass
class RunRequest:
    scenario: Scenario
    scenario_ref: str
    label: str = "baseline"
    patches: list[str] = field(default_factory=list)  # component specs, already expanded
    allocator: str = "glibc"
    malloc_env: dict[str, str] = field(default_factory=dict)
    out: Path | None = None
    python: str = sys.executable
    patch_files: list[Path] = field(default_factory=list)  # unified diffs against installed packages
    memray: bool = False  # native view: memray captures per phase (inflates RSS; see --memray)
    command: list[str] = field(default_factory=lambda: list(sys.argv))


@dataclass
class RunResult:
    run: storage.RunDir
    status: str
    manifest: dict[str, Any]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker_env(req: RunRequest, torch_version: str, ds_version: str) -> dict[str, str]:
    env = dict(os.environ)
    path = [PACKAGE_PARENT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env.update({
        "PYTHONPATH": os.pathsep.join(path),
        "PYTHONUNBUFFERED": "1",
        # the worker's Python's bin (ninja for JIT-compiled ops lives there in a venv)
        "PATH": os.pathsep.join([str(Path(req.python).parent), env.get("PATH", "")]),
        "TORCH_EXTENSIONS_DIR": str(host.ops_cache_dir(torch_version, ds_version)),
        "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
    })
    library = host.allocator_library(req.allocator)
    if library:
        env["LD_PRELOAD"] = library
    env.update(req.malloc_env)
    return env


def _final_status(events: list[dict[str, Any]], returncode: int | None, timed_out: bool,
                  interrupted: bool) -> tuple[str, str | None]:
    kinds = {e["event"]: e for e in events}
    if "usage_error" in kinds:
        return "failed", kinds["usage_error"]["message"]
    if timed_out:
        return "timeout", "the worker ran past the scenario's timeout_s and was killed"
    end = kinds.get("end")
    if interrupted or (end and end.get("status") == "interrupted"):
        return "interrupted", "interrupted (Ctrl-C)"
    if end and end.get("status") == "ok" and returncode == 0:
        return "ok", None
    if "error" in kinds:
        return "failed", kinds["error"]["message"]
    if returncode is not None and returncode < 0:
        sig = signal.Signals(-returncode).name
        hint = " (SIGKILL: possibly the kernel's OOM killer)" if returncode == -signal.SIGKILL else ""
        return "failed", f"the worker was killed by {sig}{hint}"
    return "failed", f"the worker exited with code {returncode} before finishing"


@dataclass
class Prepared:
    """A run directory with its manifest and worker instructions written, ready to launch."""

    req: RunRequest
    run_dir: storage.RunDir
    env: dict[str, str]


def prepare(req: RunRequest) -> Prepared:
    """Everything that can fail on bad input fails here, before any process starts."""
    other_python = None if req.python == sys.executable else req.python
    torch_version = host.package_version("torch", other_python)
    ds_version = host.package_version("deepspeed", other_python)
    if torch_version is None or ds_version is None:
        missing = "torch" if torch_version is None else "deepspeed"
        raise UserError(f"{req.python}: {missing} is not installed for this Python")
    if req.memray and host.package_version("memray", other_python) is None:
        raise UserError(f"--memray: memray is not installed for {req.python} (pip install 'rssprobe[memray]')")
    env = _worker_env(req, torch_version, ds_version)
    run_dir = storage.RunDir.create(req.out, req.scenario.name, req.label)
    overlay_dir = run_dir.path / "overlay"
    try:
        patch_records = overlay.prepare(req.patch_files, overlay_dir) if req.patch_files else []
    except UserError:
        shutil.rmtree(run_dir.path)  # nothing ran: leave no half-made run behind
        raise
    spec = {
        "scenario": req.scenario.model_dump(mode="json"),
        "deepspeed_config": req.scenario.deepspeed_config(),
        "patches": req.patches,
        "sites": sites_config.for_scenario(req.scenario),
        "overlay": str(overlay_dir) if patch_records else None,
        "memray": req.memray,
    }
    storage.write_json_atomic(run_dir.path / storage.WORKER_SPEC, spec)
    run_dir.write_manifest({
        "id": run_dir.id, "label": req.label, "status": "prepared", "started": storage.now_iso(),
        "scenario_ref": req.scenario_ref, "scenario": spec["scenario"], "deepspeed_config": spec["deepspeed_config"],
        "command": req.command, "python": req.python, "host": host.facts(),
        "allocator": req.allocator, "ld_preload": env.get("LD_PRELOAD"), "malloc_env": req.malloc_env,
        "patches": req.patches, "patch_files": patch_records,
        "torch_extensions_dir": env["TORCH_EXTENSIONS_DIR"], "memray": req.memray,
    })
    return Prepared(req, run_dir, env)


def run(req: RunRequest | Prepared, on_event: Callable[[dict[str, Any]], None] = lambda e: None) -> RunResult:
    """Launch the worker, follow it to the end, record how it ended."""
    prepared = req if isinstance(req, Prepared) else prepare(req)
    req, run_dir, env = prepared.req, prepared.run_dir, prepared.env
    run_dir.update_manifest(status="running", started=storage.now_iso())
    timed_out = interrupted = False
    with open(run_dir.path / storage.WORKER_LOG, "wb") as log:
        proc = subprocess.Popen([req.python, "-m", "rssprobe.worker", str(run_dir.path)], env=env,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        deadline = time.monotonic() + req.scenario.timeout_s
        follower = _Follower(run_dir.path / storage.EVENTS, on_event)
        try:
            while proc.poll() is None:
                follower.poll()
                if time.monotonic() > deadline:
                    timed_out = True
                    _kill(proc)
                    break
                time.sleep(0.1)
        except KeyboardInterrupt:
            interrupted = True
            _interrupt(proc)
        proc.wait()
        follower.poll()

    events = run_dir.events()
    status, error = _final_status(events, proc.returncode, timed_out, interrupted)
    finalize(run_dir, events)
    hello = next((e for e in events if e["event"] == "hello"), {})
    model = next((e for e in events if e["event"] == "model"), {})
    last_effects = next((e["effects"] for e in reversed(events) if "effects" in e), {})
    manifest = run_dir.update_manifest(
        status=status, error=error, exit_code=proc.returncode, ended=storage.now_iso(),
        versions=hello.get("versions"), accelerator=hello.get("accelerator"), params=model.get("params"),
        steps_done=sum(1 for e in events if e["event"] == "step"), effects=last_effects,
        log_tail=run_dir.log_tail() if status != "ok" else None)
    if any(e["event"] == "usage_error" for e in events):
        raise UserError(error or "usage error")
    return RunResult(run_dir, status, manifest)


def finalize(run_dir: storage.RunDir, events: list[dict[str, Any]]) -> None:
    """Write steps.parquet from the events (whatever steps finished), and the native view if captured."""
    from .analysis.native import analyse
    from .analysis.tables import steps_frame

    steps_frame(events).to_parquet(run_dir.path / storage.STEPS, index=False)
    installed = next((e["installed"] for e in events if e["event"] == "sites"), {})
    native = analyse(run_dir.path, [s for s, status in installed.items() if status == "ok"])
    if native is not None:
        storage.write_json_atomic(run_dir.path / storage.NATIVE, native)


class _Follower:
    """Reads new complete lines of the event stream as the worker appends them."""

    def __init__(self, path: Path, on_event: Callable[[dict[str, Any]], None]) -> None:
        self.path, self.on_event, self.offset, self.buffer = path, on_event, 0, b""

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            try:
                self.on_event(json.loads(line))
            except json.JSONDecodeError:
                continue


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _interrupt(proc: subprocess.Popen[bytes]) -> None:
    """Ask the worker to stop (it records 'interrupted'), then kill it if it does not."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        _kill(proc)
