"""Launch one worker process for one run, follow its event stream, and record how it ended.

The orchestrator never measures anything itself: it prepares the run directory (worker.json and the
manifest, as the contract defines them) and the worker's environment (run/environment.py), tails
events.jsonl for progress, enforces the timeout, forwards Ctrl-C, and writes the final status into the
manifest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import hfconfig, overlay
from ..config import sites as sites_config
from ..config.scenario import Scenario
from ..config.scenariospec import ScenarioSpec
from ..contract.files import EVENTS_GLOB, NATIVE, OVERLAY, WORKER_LOG, WORKER_SPEC, rank_log, steps_file
from ..contract.manifest import Manifest, WorkerSpec
from ..contract.status import Status
from ..contract.workerscenario import DEFAULT_ZERO_STAGE
from ..errors import UserError
from ..store import claim, judgement, outputs, reader
from ..store.rundir import RunDir
from ..store.writer import now_iso, write_json_atomic
from . import checkpoints, environment, host, launcher, launchranks, lifeline, nodewatch, opcache, preflight, scriptrun
from .deadline import Deadline, LogTail


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
    spec: ScenarioSpec | None = None  # what the command asked for (its rerun command line: run/request.py)


@dataclass
class RunResult:
    run: RunDir
    status: str
    manifest: Manifest


def _worker_env(req: RunRequest, torch_version: str, ds_version: str) -> dict[str, str]:
    return environment.worker(req.python, req.scenario.world_size, req.allocator, req.malloc_env, torch_version,
                              ds_version, req.scenario.torch_alloc_conf,
                              hub_offline=req.scenario.model.kind == "transformers")


def worker_command(req: RunRequest, run_dir: RunDir, port: str) -> list[str]:
    """One worker process, or N ranks under torchrun (gloo on CPU, NCCL with GPUs) on a free port; or the user's
    own launch command as given (its ranks take over through worker/launched/sitecustomize.py)."""
    script = req.scenario.script
    if script is not None and script.command:
        return list(script.command)
    worker = ["-m", "rssprobe.worker", str(run_dir.path)]
    n = req.scenario.world_size
    if n == 1:
        return [req.python, *worker]
    return [req.python, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={n}",
            "--master-addr=127.0.0.1", f"--master-port={port}", *worker]


def _script_word(command: list[str]) -> str:
    """The word of a launch command that names its training script (config/script.split_command's choice)."""
    return next((w for w in command if w.endswith(".py") and Path(w).is_file()), "")


def _dead_rank(log: str) -> tuple[int, int] | None:
    """(rank, exit code) of torchrun's 'Root Cause (first observed failure)', if it printed one."""
    root = log.split("Root Cause", 1)
    if len(root) < 2:
        return None
    rank = re.search(r"rank\s*:\s*(\d+)", root[1])
    code = re.search(r"exitcode\s*:\s*(-?\d+)", root[1])
    return (int(rank.group(1)), int(code.group(1))) if rank and code else None


def _rank_status(events: list[dict[str, Any]], returncode: int | None, timed_out: bool | str,
                 interrupted: bool) -> tuple[str, str | None]:
    kinds = {e["event"]: e for e in events}
    if "usage_error" in kinds:
        return Status.FAILED, kinds["usage_error"]["message"]
    if timed_out:  # a string says why (run/deadline.py)
        return Status.TIMEOUT, timed_out if isinstance(timed_out, str) else \
            "the worker ran past the scenario's timeout_s and was killed"
    end = kinds.get("end")
    if interrupted or (end and end.get("status") == Status.INTERRUPTED):
        return Status.INTERRUPTED, "interrupted (SIGTERM)" if lifeline.terminated else "interrupted (Ctrl-C)"
    if end and end.get("status") == Status.OK:
        # judged by the steps it finished and the end event it wrote; an exit status after that (DeepSpeed
        # 0.15.4's rank 0 aborts at exit) is reported beside it (exit_after_end), not taken for a failure
        return Status.OK, None
    if "error" in kinds:
        return Status.FAILED, kinds["error"]["message"]
    if end and end.get("status") == Status.TERMINATED:
        return Status.FAILED, "stopped by SIGTERM (another rank failed, or its launcher ended)"
    if returncode is None:
        return Status.FAILED, "did not finish (no end event: stopped after another rank failed, died, or still running)"
    if returncode < 0:
        sig = signal.Signals(-returncode).name
        hint = " (SIGKILL: possibly the kernel's OOM killer)" if returncode == -signal.SIGKILL else ""
        return Status.FAILED, f"the worker was killed by {sig}{hint}"
    return Status.FAILED, f"the worker exited with code {returncode} before finishing"


@dataclass
class Prepared:
    """A run directory with its manifest and worker instructions written, ready to launch."""

    req: RunRequest
    run_dir: RunDir
    env: dict[str, str]


def check(req: RunRequest) -> dict[str, str]:
    """THE per-run preflight: everything that can refuse this run on bad input, before anything is made (a run's
    prepare, and a campaign's every cell before its first: run/request.check_all); the worker's environment."""
    preflight.check_sites(req.scenario, req.patches, req.python, overlay=bool(req.patch_files))
    preflight.check_alloc_conf(req.scenario.torch_alloc_conf, req.python)
    other_python = None if req.python == sys.executable else req.python
    torch_version = host.package_version("torch", other_python)
    ds_version = host.package_version("deepspeed", other_python)
    if torch_version is None or ds_version is None:
        missing = "torch" if torch_version is None else "deepspeed"
        raise UserError(f"{req.python}: {missing} is not installed for this Python")
    if req.memray and host.package_version("memray", other_python) is None:
        raise UserError(f"--memray: memray is not installed for {req.python} (pip install 'rssprobe[memray]')")
    env = _worker_env(req, torch_version, ds_version)
    preflight.check_native_pin(req.scenario, req.patches, env, ds_version)
    command = req.scenario.script.command if req.scenario.script is not None else None
    if command:  # a launcher that cannot start, or whose rank count cannot be read: now
        launcher.resolve(command, env.get("PATH"))
        launchranks.environment(command, _script_word(command))
    return env


def worker_spec(req: RunRequest, checkpoint: Path | None = None, overlay_dir: str | None = None) -> WorkerSpec:
    """worker.json: the scenario resolved and every default filled, so that the worker supplies none of its own
    (contract/workerscenario.py types what it reads); `checkpoint` is the one a checkpoint-loading model loads."""
    resolved = req.scenario.model_dump(mode="json")
    if req.scenario.model.kind == "transformers":  # a size given as params, resolved once, here
        resolved["model"]["hf"] = hfconfig.worker_hf(req.scenario.model)
        if checkpoint is not None:  # written once per shape, loaded by every run
            resolved["model"]["from_pretrained"]["path"] = str(checkpoint)
    elif req.scenario.model.kind == "linear":
        resolved["model"]["layers"] = req.scenario.model.n_layers
    else:  # a script: its own model and DeepSpeed config
        resolved = scriptrun.recorded(resolved)
    return WorkerSpec(
        scenario=resolved, deepspeed_config=None if req.scenario.script else req.scenario.deepspeed_config(),
        patches=req.patches, sites=sites_config.for_scenario(req.scenario),
        sites_first_step_only=sites_config.first_step_only(req.scenario), overlay=overlay_dir, memray=req.memray,
        # a script's census names this stage's roles until its engine says its own
        zero_stage=DEFAULT_ZERO_STAGE if req.scenario.script else req.scenario.zero.stage)


def prepare(req: RunRequest) -> Prepared:
    """Everything that can fail on bad input fails here, before any process starts."""
    env = check(req)
    command = req.scenario.script.command if req.scenario.script is not None else None
    ranks_env = launchranks.environment(command, _script_word(command)) if command else {}
    checkpoint = None
    if req.scenario.model.kind == "transformers" and req.scenario.model.load == "checkpoint":
        checkpoint = checkpoints.ensure(req.scenario, req.python)  # written once per shape, verified whole, now
    run_dir = RunDir.create(req.out, req.scenario.name, req.label)
    if req.scenario.script is not None and req.scenario.script.command:  # the user's launcher starts the ranks
        env = environment.launched(env, run_dir.path, req.scenario.script.path)
        env.update(ranks_env)
    overlay_dir = run_dir.path / OVERLAY
    try:
        patch_records = overlay.prepare(req.patch_files, overlay_dir) if req.patch_files else []
    except UserError:
        shutil.rmtree(run_dir.path)  # nothing ran: leave no half-made run behind
        raise
    spec = worker_spec(req, checkpoint, str(overlay_dir) if patch_records else None)
    write_json_atomic(run_dir.path / WORKER_SPEC, spec.as_dict())
    run_dir.write_manifest(Manifest(
        id=run_dir.id, label=req.label, status=Status.PREPARED, started=now_iso(), scenario_ref=req.scenario_ref,
        scenario=spec.scenario, deepspeed_config=spec.deepspeed_config, command=req.command, python=req.python,
        host=host.facts(), allocator=req.allocator, ld_preload=env.get("LD_PRELOAD"), malloc_env=req.malloc_env,
        patches=req.patches, patch_files=patch_records, torch_extensions_dir=env["TORCH_EXTENSIONS_DIR"],
        memray=req.memray, compiler_cache=env.get("CCACHE_DIR"), world_size=req.scenario.world_size))
    return Prepared(req, run_dir, env)


def run(req: RunRequest | Prepared, on_event: Callable[[dict[str, Any]], None] = lambda e: None,
        on_output: Callable[[str, str], None] | None = None) -> RunResult:
    """Launch the worker, follow it to the end, record how it ended; `on_output(log name, line)` is given every
    line the processes write (a script's own output), as they write it, while the log keeps it."""
    prepared = req if isinstance(req, Prepared) else prepare(req)
    req, run_dir, env = prepared.req, prepared.run_dir, prepared.env
    # who runs it: a reader can tell a run whose orchestrator was killed (SIGKILL) from one still running
    run_dir.update_manifest(status=Status.RUNNING, started=now_iso(), orchestrator=judgement.identity())
    timed_out: bool | str = False
    interrupted = False
    opcache.clear_stale_locks(Path(env["TORCH_EXTENSIONS_DIR"]))
    lifeline.become_subreaper()  # an orphan the run leaves (a daemon of the user's script) comes back to us
    with os.fdopen(outputs.create(run_dir.path / WORKER_LOG), "wb") as log:
        # the worker (or torchrun) gets SIGTERM if this process dies, whatever killed it
        command = worker_command(req, run_dir, env["MASTER_PORT"])
        try:
            proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, preexec_fn=lifeline.child_dies_with_me())
        except (OSError, subprocess.SubprocessError) as e:  # checked in prepare; gone since (a race): failed, said
            why = f"{command[0]} could not be started ({getattr(e, 'strerror', None) or e})"
            run_dir.update_manifest(status=Status.FAILED, error=why, ended=now_iso())
            run_dir.release()
            raise UserError(f"{run_dir.path}: {why}") from None
        # timeout_s counts the run's own time: DeepSpeed's op builds are not counted (run/deadline.py)
        deadline = Deadline(req.scenario.timeout_s, Path(env["TORCH_EXTENSIONS_DIR"]))
        node = nodewatch.NodePeak()

        def follow(event: dict[str, Any]) -> None:
            node.watch(event)
            deadline.watch(event)
            on_event(event)

        follower = _Follower(run_dir.path, follow)
        # the console gets the worker's (or the user's launcher's) stream; a launched rank's own log repeats its part
        launched = req.scenario.script is not None and bool(req.scenario.script.command)
        tail = LogTail(lambda: _logs(run_dir.path, launched), on_output) if on_output is not None else None
        try:
            while proc.poll() is None:
                follower.poll()
                if tail is not None:
                    tail.poll()
                node.sample()
                expired = deadline.expired()
                if expired:
                    timed_out = expired
                    _kill(proc)
                    break
                time.sleep(0.1)
        except KeyboardInterrupt:
            interrupted = True
            _interrupt(proc)
        proc.wait()
        left = lifeline.kill_marked()  # every rank dies with its launcher, whatever phase it was in
        left += [pid for pid in lifeline.kill_descendants() if pid not in left]  # and whatever else the run caused
        follower.poll()
        if tail is not None:
            tail.poll(final=True)
    # DeepSpeed's CPU shm_comm leaves a /dev/shm buffer (RAM) per process that outlives it: remove this run's
    run_dir.update_manifest(node=node.as_dict(), shm_buffers_removed=host.remove_deepspeed_shm(env["MASTER_PORT"]),
                            killed_after_exit=left)
    ranks = max(req.scenario.world_size, max(run_dir.ranks(), default=0) + 1) if launched else req.scenario.world_size
    try:
        return conclude(run_dir, ranks, proc.returncode, timed_out, interrupted)
    finally:
        run_dir.release()


def collect(path: Path) -> RunResult:
    """Conclude a run whose ranks another launcher started (rssprobe prepare): every rank's events."""
    run = RunDir(path)
    manifest = run.manifest()
    if not run.ranks():
        raise UserError(f"{path}: no rank has written events yet ({EVENTS_GLOB})")
    claim.claim(path, "run directory")  # two collects of one run do not write its tables over each other
    try:
        return conclude(run, max(int(manifest.scenario.get("world_size") or 1), max(run.ranks()) + 1), returncode=None)
    finally:
        run.release()


def _logs(path: Path, launched: bool = False) -> list[Path]:
    """The run's logs: the worker's (or torchrun's), then each rank's own (not under the user's launcher, whose
    stream in worker.log holds every rank's output already)."""
    if launched:
        return [path / WORKER_LOG]
    return [path / WORKER_LOG, *sorted(path.glob(rank_log(0).replace("0", "*", 1)))]


def conclude(run_dir: RunDir, world_size: int, returncode: int | None, timed_out: bool | str = False,
             interrupted: bool = False) -> RunResult:
    """Record how a run ended, from its per-rank event streams (returncode None: launched elsewhere)."""
    per_rank = {r: run_dir.events(r) for r in run_dir.ranks()} or {0: []}
    status, error, ranks = _final_status(run_dir, per_rank, world_size, returncode, timed_out, interrupted)
    for rank, rank_events in per_rank.items():
        finalize(run_dir, rank_events, rank)
    events = per_rank.get(0, [])  # rank 0 may have died before its first event while others wrote theirs
    every = [e for rank_events in per_rank.values() for e in rank_events]
    hello = next((e for e in every if e["event"] == "hello"), {})
    model = next((e for e in every if e["event"] == "model"), {})
    last_effects = next((e["effects"] for e in reversed(events) if "effects" in e), {})
    after_end = None
    if status == Status.OK and returncode not in (0, None):
        notes = [r["exit_after_end"] for r in ranks.values() if r.get("exit_after_end")]
        after_end = "; ".join(notes) if notes else exited_after_end(returncode, "torchrun")
    amended = scriptrun.amend_manifest(run_dir.manifest(), every) or {}
    recorded = amended.get("scenario") or run_dir.manifest().scenario
    if isinstance(recorded, dict) and recorded.get("script") and recorded.get("world_size") != world_size:
        amended["scenario"] = {**recorded, "world_size": world_size}  # the world its launcher started, not 1
    manifest = run_dir.update_manifest(
        status=status, error=error, exit_code=returncode, exit_after_end=after_end, ended=now_iso(),
        versions=hello.get("versions"), accelerator=hello.get("accelerator"), params=model.get("params"),
        steps_done=sum(1 for e in events if e["event"] == "step"), effects=last_effects,
        world_size=world_size, ranks=ranks,
        log_tail=_failure_tail(run_dir, ranks) if status != Status.OK else None, **amended)
    if any(e["event"] == "usage_error" for rank_events in per_rank.values() for e in rank_events):
        raise UserError(error or "usage error")
    return RunResult(run_dir, status, manifest)


def exited_after_end(returncode: int | None, who: str = "process") -> str | None:
    """How a process that wrote its end event then exited, when that was not cleanly (else None)."""
    if returncode in (0, None):
        return None
    how = f"SIGNAL {-returncode}" if returncode < 0 else f"code {returncode}"
    if returncode < 0:
        try:
            how = signal.Signals(-returncode).name
        except ValueError:
            pass
    return f"{who} exited with {how} after its end event"


def _final_status(run_dir: RunDir, per_rank: dict[int, list[dict[str, Any]]], world_size: int,
                  returncode: int | None, timed_out: bool | str,
                  interrupted: bool) -> tuple[str, str | None, dict[str, Any]]:
    """The run's status and error, and each rank's status, error, finished steps and exit after its end event."""
    if world_size == 1:
        status, error = _rank_status(per_rank.get(0, []), returncode, timed_out, interrupted)
        return status, error, {"0": {"status": status, "error": error,
                                     "steps_done": sum(e["event"] == "step" for e in per_rank.get(0, [])),
                                     "exit_after_end": exited_after_end(returncode) if status == Status.OK else None}}
    log = run_dir.path / WORKER_LOG
    dead = _dead_rank(reader.read_text(log, errors="replace")) if log.exists() else None
    ranks: dict[str, Any] = {}
    for rank in range(world_size):
        events = per_rank.get(rank, [])
        # torchrun reports only the first rank to fail; the others it stopped (exit code unknown)
        code = dead[1] if dead and dead[0] == rank else (0 if returncode == 0 else None)
        status, error = _rank_status(events, code, timed_out, interrupted)
        ranks[str(rank)] = {"status": status, "error": error, "steps_done": sum(e["event"] == "step" for e in events),
                            "exit_after_end": exited_after_end(code, f"rank {rank}") if status == Status.OK else None}
    if not timed_out and not interrupted and all(r["status"] == Status.OK for r in ranks.values()):
        return Status.OK, None, ranks  # every rank wrote its end event: torchrun's exit status is noted beside it
    for status in (Status.TIMEOUT, Status.INTERRUPTED):
        if any(r["status"] == status for r in ranks.values()):
            return status, next(r["error"] for r in ranks.values() if r["status"] == status), ranks
    culprit = str(dead[0]) if dead else next((k for k, r in ranks.items() if r["status"] != Status.OK), "0")
    return Status.FAILED, f"rank {culprit} died: {ranks[culprit]['error']}; the other ranks were stopped", ranks


def _failure_tail(run_dir: RunDir, ranks: dict[str, Any]) -> str:
    """The failing rank's own log tail (multi-rank), else the worker log's."""
    failing = [r for r, v in ranks.items() if v["status"] != Status.OK]
    own = rank_log(int(failing[0])) if failing else None
    if own is not None and (run_dir.path / own).exists():
        return run_dir.log_tail(20, own)
    return run_dir.log_tail()


def finalize(run_dir: RunDir, events: list[dict[str, Any]], rank: int = 0) -> None:
    """Write the per-step table from the events (whatever steps finished), and the native view if captured."""
    from ..analysis.native import analyse
    from ..analysis.tables import steps_frame

    outputs.write_table(run_dir.path / steps_file(rank), steps_frame(events))  # a link there: replaced
    if rank:
        return
    installed = next((e["installed"] for e in events if e["event"] == "sites"), {})
    native = analyse(run_dir.path, [s for s, status in installed.items() if status == Status.OK])
    if native is not None:
        write_json_atomic(run_dir.path / NATIVE, native)


class _Follower:
    """Reads new complete lines of every rank's event stream as the workers append them."""

    def __init__(self, run_dir: Path, on_event: Callable[[dict[str, Any]], None]) -> None:
        self.run_dir, self.on_event = run_dir, on_event
        self.offsets: dict[Path, int] = {}
        self.buffers: dict[Path, bytes] = {}

    def poll(self) -> None:
        for path in sorted(self.run_dir.glob(EVENTS_GLOB)):
            with reader.open_regular(path) as f:
                f.seek(self.offsets.get(path, 0))
                data = f.read()
            self.offsets[path] = self.offsets.get(path, 0) + len(data)
            *lines, self.buffers[path] = (self.buffers.get(path, b"") + data).split(b"\n")
            for line in lines:
                try:
                    event = reader.loads_json(line.decode("utf-8", "replace"), path)
                except (json.JSONDecodeError, UserError):  # torn, or nested deeper than any event
                    continue
                self.on_event(event)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    lifeline.kill_session(proc.pid)  # the compilers too: ninja gives each a process group of its own


def _interrupt(proc: subprocess.Popen[bytes]) -> None:
    """Ask the worker to stop (it records 'interrupted'), then kill it if it does not."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired, KeyboardInterrupt):  # a second Ctrl-C / SIGTERM
        _kill(proc)
