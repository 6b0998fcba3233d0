"""The worker: one fresh process per run, probing itself while it trains.

    python -m rssprobe.worker RUN_DIR
    python -m rssprobe.worker --launched RUN_DIR ARGS...   (a rank of the user's own launcher: worker/launched/)

reads RUN_DIR/worker.json (written by the orchestrator) and appends every measurement
to RUN_DIR/events.jsonl, both as rssprobe.contract defines them. It imports nothing heavy
before its first probe and nothing of the orchestration side (pandas, rich) at all, so its
memory is the training's memory.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from ..contract.environment import RANKS_ENV
from ..contract.exitcodes import EXIT_NO_WORKER, EXIT_TERMINATED
from ..contract.files import WORKER_SPEC, rank_log
from ..contract.interventions import DS_PIN_BACKEND_ENV, NATIVE_PIN, OptionError, parse
from ..contract.manifest import WorkerSpec, worker_spec_problem
from ..contract.ranks import asked as ranks_asked
from ..contract.ranks import mismatch as rank_mismatch
from ..contract.status import Status
from ..contract.testlane import NO_WORKER_ENV
from ..contract.workerscenario import WorkerScenario
from . import census, glibc, lifeline, loading, memmap, models, pins, procfs, ranklog, saves, training
from .events import EventWriter, events_file
from .events_inrun import InRunEvents
from .interventions import REGISTRY, Context, Refused
from .native import NativeCapture
from .probes import PeakTracker, cuda_stats, snapshot
from .script import ScriptFailed, ScriptRun
from .sites import SiteError, SiteRecorder


class Worker:
    def __init__(self, run_dir: Path, launched: list[str] | None = None) -> None:
        """`launched`: this process is a rank the user's own launcher started, with these script arguments (its
        output stays the launcher's; its rank and world are the launcher's)."""
        self.run_dir = run_dir
        self.launched = launched
        self.world_mismatch: str | None = None  # a launched rank's world is not the one its command asked for
        raw = json.loads((run_dir / WORKER_SPEC).read_text())
        problem = worker_spec_problem(raw)
        if problem:
            raise SystemExit(f"rssprobe worker: {run_dir / WORKER_SPEC}: {problem}")
        self.spec = WorkerSpec.read(raw)  # every default filled by the orchestrator: read, never supplied here
        self.scenario: WorkerScenario = self.spec.scenario
        self.rank = int(os.environ.get("RANK", "0"))
        if launched is not None:
            # torchrun says how many ranks share this node; DeepSpeed's CPU accelerator reads LOCAL_SIZE for it
            os.environ.setdefault("LOCAL_SIZE", os.environ.get("LOCAL_WORLD_SIZE", "1"))
            self.scenario["world_size"] = int(os.environ.get("WORLD_SIZE", "1"))
            script = self.scenario["script"]
            if script is None:
                raise SystemExit(f"rssprobe worker: {run_dir / WORKER_SPEC}: a launched rank's run has no [script]")
            script["args"] = launched
            ranklog.tee(run_dir / rank_log(self.rank))  # its own log too; the launcher's stream keeps it all
            # the world the launch command asked for: a launcher that started fewer ranks (accelerate without
            # --multi_gpu) must not train as a smaller world under rssprobe's one-process rendezvous
            asked = ranks_asked(os.environ.get(RANKS_ENV))
            self.world_mismatch = rank_mismatch(asked[0], asked[1], self.scenario["world_size"]) \
                if asked is not None and asked[0] != self.scenario["world_size"] else None
        elif self.scenario["world_size"] > 1:
            # each rank keeps its own stdout/stderr, for the tail shown when it dies
            log = os.open(run_dir / rank_log(self.rank), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW)
            os.dup2(log, 1)
            os.dup2(log, 2)
        self.events = EventWriter(run_dir / events_file(self.rank), self.rank)
        self.tracker = PeakTracker()
        self.native = NativeCapture(run_dir, self.spec.memray)
        self.ctx = Context(run_dir=str(run_dir))
        self.torch: Any = None
        self.engine: Any = None
        self.modules_seen: set[str] | None = None  # sys.modules at the previous census
        self.launcher_args: list[str] = []  # options a launcher appended (deepspeed's --local_rank=N)
        self.probes_on = True  # False on make bench's probes-off steps (probes.alternate)
        # a script's scenario has no stage until its engine decides one (run/scriptrun.py: recorded); until then
        # its census names the roles of the stage the orchestrator wrote, and the engine's once it is initialized
        self.zero_stage = self.spec.zero_stage
        self.accelerator = "cpu"  # DeepSpeed's accelerator, once picked (start)
        self.pins: pins.PinRecorder | None = None  # every pin request (installed before deepspeed.initialize)
        self.hf_ds_config: Any = None  # a loaded model's HfDeepSpeedConfig (transformers holds it weakly)
        # VmLck per step only where something locks memory (the native pinned backend, or a census that found
        # locked pages); phases and census points read it always
        self.locks_memory = False

    def probe(self, smaps: bool = False, rss: int | None = None, locked: bool | None = None) -> dict[str, Any]:
        """One reading; `rss`, when given, is an interval's end RSS, read with its peak in one status read,
        so that an interval's peak is never below the RSS its event reports. `locked` (VmLck): by default
        where the run locks memory."""
        out = snapshot(with_smaps=smaps and self.scenario["probes"]["smaps"],
                       with_locked=self.locks_memory if locked is None else locked)
        if rss is not None:
            out["rss"] = rss
        if self.torch is not None:
            out["cuda"] = cuda_stats(self.torch)
        return out

    def phase(self, name: str, **extra: Any) -> None:
        self.events.emit("phase", name=name, **self.probe(smaps=True, locked=True), **extra)

    def census(self, at: str) -> None:
        probes = self.scenario["probes"]
        if probes["census"]:
            started = time.perf_counter()
            zero_opt = getattr(self.engine, "optimizer", None)
            rss, mallinfo = procfs.rss_bytes(), glibc.mallinfo2()
            found, storages, pinned = census.take(zero_opt, self.torch, self.zero_stage,
                                                  getattr(self.engine, "module", None))
            parts = memmap.partition(storages, glibc.STATUS.available, os.environ.get("TORCH_EXTENSIONS_DIR"),
                                     pinned) if probes["memmap"] else None
            if self.modules_seen is None:  # the first census: everything imported so far is the baseline's
                self.modules_seen, imported = set(sys.modules), None
            else:
                imported = census.imported_since(self.modules_seen)
            # what the census cost (its partition's own share is memmap["time_s"]): it grows with the process
            census_time_s = time.perf_counter() - started
            locked = procfs.locked_bytes()
            self.locks_memory = self.locks_memory or bool(locked)
            self.events.emit("census", at=at, rss=rss, mallinfo=mallinfo, memmap=parts, imported=imported,
                             census_time_s=census_time_s, **({} if locked is None else {"locked": locked}), **found)

    def run(self) -> None:
        self.start()
        if self.scenario["script"]:  # the user's own training script (rssprobe run --script)
            ScriptRun(self).run()
            return
        self.baseline()

        model_spec = self.scenario["model"]  # a load phase (from_pretrained, measured) or a model built in place
        if model_spec["kind"] != "script" and model_spec["load"] == "checkpoint":
            model, groups, params = loading.load(self, self.scenario, self.deepspeed_config())
        else:
            model, groups, params = training.build_model(self.scenario)
        self.ctx.params = params
        zero = self.scenario["zero"]
        self.events.emit("model", params=params, param_groups=len(groups), zero_stage=self.zero_stage,
                         **self.estimate(model, params, self.zero_stage, zero["offload_param"] is not None),
                         **models.describe(model, self.scenario))
        self.phase("after_model")

        recorder = self.install_probes()
        self.engine = self.initialize_measured(
            recorder, functools.partial(training.initialize, model, groups, self.deepspeed_config()))
        # the engine holds its model; a local reference here would keep it (and, through its hooks, the
        # whole engine) alive past a reinit event
        del model, groups

        self.train(recorder)
        if self.scenario["save"]:  # the final saves, each a measured save phase
            saves.run_at_end(self, recorder)
        self.finish()

    def start(self) -> None:
        """Everything before the baseline: imports (torch, DeepSpeed, a transformers model's modules), the
        process group, the compiled ops."""
        self.phase("process_start", glibc=glibc.STATUS.__dict__, hwm_reset=self.tracker.reset_works)
        finder = None
        if self.spec.overlay:
            from .overlay_import import install

            finder = install(Path(self.spec.overlay))
        import torch

        self.torch = torch
        self.accelerator = accelerator = training.pick_accelerator()
        import deepspeed

        versions = {"python": sys.version.split()[0], "torch": torch.__version__,
                    "deepspeed": deepspeed.__version__, "glibc": glibc.STATUS.version,
                    **{name: _installed(name) for name in ("transformers", "accelerate")}}  # version axes too
        self.events.emit("hello", pid=os.getpid(), versions=versions,
                         accelerator=accelerator, cuda_available=torch.cuda.is_available())
        self.phase("after_imports")
        if finder is not None:
            self.events.emit("overlay", modules=finder.loaded)
        model_imports = models.prepare(self.scenario)  # transformers: imported before the baseline, as torch is
        if model_imports is not None:
            self.events.emit("model_imports", **model_imports)

        def compiling(op: str) -> None:
            self.events.emit("compiling", op=op)

        training.ask_cpuinfo_once()
        training.init_distributed(compiling)
        training.load_cpu_adam(compiling)
        if self.pins_natively():
            self.locks_memory = True
            training.load_pin_memory(compiling)
        self.phase("ops_loaded")

    def pins_natively(self) -> bool:
        """DeepSpeed's native pinned backend is on: the ds.native-pin intervention, or the variable set by the user."""
        return any(parse(spec)[0] == NATIVE_PIN for spec in self.spec.patches) or \
            os.environ.get(DS_PIN_BACKEND_ENV, "").strip().lower() == "native"

    def steps(self) -> int:
        """A scenario's step count (only a script run leaves it to its script: config/scenario.py refuses else)."""
        if self.scenario["steps"] is None:
            raise SystemExit(f"rssprobe worker: {self.run_dir / WORKER_SPEC}: no step count for a scenario")
        return self.scenario["steps"]

    def deepspeed_config(self) -> dict[str, Any]:
        """The DeepSpeed config the orchestrator wrote (a scenario's; a script run gives its own and has none)."""
        if self.spec.deepspeed_config is None:
            raise SystemExit(f"rssprobe worker: {self.run_dir / WORKER_SPEC}: no deepspeed_config for a scenario")
        return self.spec.deepspeed_config

    def baseline(self) -> None:
        self.census("pre_model")
        self.phase("pre_model")  # the per-run baseline: everything later is divided by params above it

    @staticmethod
    def estimate(model: Any, params: int, stage: int, offload_param: bool) -> dict[str, Any]:
        """DeepSpeed's own estimate for this node's ranks (the model event's estimator fields)."""
        local = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
        nodes = max(1, int(os.environ.get("WORLD_SIZE", "1")) // local)
        # stage 3's estimator asks for the largest layer, counted as DeepSpeed's own *_all_live variant does
        largest = max(sum(getattr(p, "ds_numel", p.numel()) for p in m.parameters(recurse=False))
                      for m in model.modules())
        estimate = training.estimator_cpu_bytes(params, local, nodes, stage=stage, offload_param=offload_param,
                                                largest_layer_params=largest)
        return {"estimator_ranks_per_node": local, "estimator_nodes": nodes, "estimator_cpu_bytes": estimate}

    def install_probes(self) -> SiteRecorder:
        """The run's interventions, then its code sites (an intervention's function is measured inside its site)."""
        for spec in self.spec.patches:
            name, options = parse(spec)
            REGISTRY[name](self.ctx, options)
        self.pins = pins.start(self.torch, self.accelerator)  # outside the interventions: it sees what they return
        recorder = SiteRecorder(self.tracker, trace=frozenset(self.scenario["probes"]["trace_sites"]))
        first_only = set(self.spec.sites_first_step_only)
        for path, required in self.spec.sites:
            recorder.install(path, required, every_step=path not in first_only)
        self.events.emit("sites", installed=recorder.installed, steady=self.scenario["probes"]["steady_sites"],
                         first_step_only=sorted(p for p in first_only if recorder.installed.get(p) == "ok"))
        return recorder

    def initialize_measured(self, recorder: SiteRecorder, call: Any) -> Any:
        """deepspeed.initialize (`call`) as one interval: the init event, this rank's partition, the after-init
        census. Returns the engine."""
        interval = self.tracker.enter()
        t0 = time.perf_counter()
        with self.native.phase("init"):
            self.engine = engine = call()
        init_s = time.perf_counter() - t0
        # the engine's stage decides the census roles and pin roles read below: a script's is known only now
        self.zero_stage = int(engine.zero_optimization_stage())
        peak = self.tracker.exit(interval)
        sites, calls, _overhead = recorder.drain()
        # this rank's partition: stage 1/2 per group; stage 3 per sub-group (its partition_size list stays empty)
        partition = getattr(engine.optimizer, "partition_size", None) or \
            getattr(engine.optimizer, "fp16_partitioned_groups_flat_numel", None)
        self.events.emit("partition", params=int(sum(partition)) if partition else None,
                         world_size=int(os.environ.get("WORLD_SIZE", "1")))
        self.events.emit("init", time_s=init_s, peak=peak, entry_rss=interval.rss0, sites=sites, calls=calls,
                         effects=self.ctx.effects, **self.probe(smaps=True, rss=interval.rss1))
        self.emit_pins("init", force=True)
        self.census("after_init")
        return engine

    def finish(self, **extra: Any) -> None:
        """The pin requests, the end census, the optional final malloc_trim, the end event."""
        self.emit_pins("end")
        self.census("end")
        if self.scenario["probes"]["trim_at_end"]:
            before = self.probe()
            released_any = glibc.malloc_trim(0)  # malloc_trim's own answer: 1 if it released memory
            self.events.emit("trim_at_end", released_any=released_any, before=before, after=self.probe())
        self.events.emit("end", status=Status.OK, effects=self.ctx.effects, **extra)

    def train(self, recorder: SiteRecorder) -> None:
        scenario = self.scenario  # no engine held here: a reinit event replaces it
        x = models.inputs(scenario, self.engine.device, training.input_dtype(scenario))
        inrun = InRunEvents(self, recorder)
        with contextlib.ExitStack() as capture:
            for step in range(1, self.steps() + 1):
                if step <= 2:  # one capture for the first step, one for all later steps
                    capture.close()
                    capture.enter_context(self.native.phase("first_step" if step == 1 else "steady"))
                self._step(recorder, step, x)
                inrun.after_step(step, x)

    def _step(self, recorder: SiteRecorder, step: int, x: Any) -> None:
        engine, scenario = self.engine, self.scenario
        self.begin_step(recorder, step)
        step_interval = self.tracker.enter()
        t0 = time.perf_counter()
        parts: dict[str, dict[str, int]] = {}
        gathered: dict[str, Any] = {}  # ZeRO-3: parameters gathered and not released (deterministic)
        count_gathered = self.zero_stage == 3  # below stage 3 nothing is partitioned: skip the walk
        for _micro in range(scenario["grad_accum_steps"]):
            loss = self._part(parts, "forward", lambda: models.loss(engine, x, scenario))
            self._part(parts, "backward", functools.partial(engine.backward, loss))
            if count_gathered:
                gathered["after_backward"] = census.gathered(engine.module)
            self._part(parts, "optimizer", engine.step)
            if count_gathered:
                gathered["after_step"] = census.gathered(engine.module)
        self.end_step(recorder, step, step_interval, time.perf_counter() - t0, parts, gathered,
                      float(loss.detach()), scenario["grad_accum_steps"])

    def begin_step(self, recorder: SiteRecorder, step: int) -> None:
        self.ctx.step = step
        if self.pins is not None:
            self.pins.step = step
        probes = self.scenario["probes"]
        self.probes_on = recorder.enabled = not (probes["alternate"] and step % 2 == 0)
        recorder.light = step > 1 and probes["steady_sites"] == "light"

    def end_step(self, recorder: SiteRecorder, step: int, step_interval: Any, time_s: float,
                 parts: dict[str, dict[str, int]], gathered: dict[str, Any], loss: float | None,
                 micro_steps: int) -> None:
        """Close a step's interval and write its event (and the after-first-step census)."""
        alternate = self.scenario["probes"]["alternate"]
        peak = self.tracker.exit(step_interval)
        sites, calls, probe_s = recorder.drain()
        self.events.emit("step", step=step, time_s=time_s, probe_s=probe_s, peak=peak, entry_rss=step_interval.rss0,
                         parts=parts, sites=sites, calls=calls, effects=self.ctx.effects, loss=loss,
                         micro_steps=micro_steps, **({"probes_on": self.probes_on} if alternate else {}),
                         **self.probe(smaps=self.probes_on, rss=step_interval.rss1),
                         **({"gathered": gathered} if gathered.get("after_step") is not None else {}))
        self.emit_pins(f"step {step}")
        if step == 1:
            self.census("after_first_step")

    def emit_pins(self, at: str, force: bool = False) -> None:
        if self.pins is not None:
            self.pins.emit(self.events, at, getattr(self.engine, "optimizer", None), self.zero_stage, force)

    def _part(self, parts: dict[str, dict[str, int]], name: str, fn: Any) -> Any:
        if not (self.scenario["probes"]["parts"] and self.probes_on):
            return fn()
        interval = self.tracker.enter()
        out = fn()
        peak = self.tracker.exit(interval)
        part = parts.setdefault(name, {"peak": 0})
        part["peak"] = max(part["peak"], peak)
        part["rss"] = interval.rss1
        return out


def refused_in_test_lane() -> bool:
    """Started by a test that is not marked `worker` (contract.NO_WORKER_ENV): record it and train nothing."""
    sentinel = os.environ.get(NO_WORKER_ENV)
    if not sentinel:
        return False
    with open(sentinel, "a") as f:
        f.write(f"{os.getpid()} {' '.join(sys.argv)}\n")
    sys.stderr.write(f"rssprobe worker: not started: {NO_WORKER_ENV} is set (a test without the worker marker)\n")
    return True


def _installed(name: str) -> str | None:
    """A distribution's version, read from its metadata (nothing imported); None when it is not installed."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def main(argv: list[str]) -> int:
    if refused_in_test_lane():
        return EXIT_NO_WORKER
    lifeline.worker_lifeline()  # before anything slow: die with the orchestrator (or torchrun)
    if argv[1:2] == ["--launched"]:  # a rank of the user's own launcher: its script's arguments as it got them
        worker = Worker(Path(argv[2]), launched=argv[3:])
    else:
        # DeepSpeed's launcher appends --local_rank=N to the script's arguments: skip options
        worker = Worker(Path(next(a for a in argv[1:] if not a.startswith("--"))))
        worker.launcher_args = [a for a in argv[1:] if a.startswith("--")]  # a script expects them (--local_rank)
    if worker.world_mismatch is not None:  # before anything is imported or trained: one line, exit 2
        worker.events.emit("usage_error", message=worker.world_mismatch)
        worker.events.close()
        return 2
    try:
        worker.run()
        return 0
    except (SiteError, Refused, OptionError) as e:
        worker.events.emit("usage_error", message=str(e))
        return 2  # the orchestrator reads the usage_error event, not this code
    except KeyboardInterrupt:
        worker.events.emit("end", status=Status.INTERRUPTED)
        return 130
    except lifeline.Terminated:  # SIGTERM: the orchestrator (or torchrun) ended, or stops this rank
        worker.events.emit("end", status=Status.TERMINATED)
        return EXIT_TERMINATED
    except ScriptFailed as e:  # one line naming the script's file:line; the traceback in the run's log
        worker.events.emit("error", message=str(e), traceback=e.trace)
        sys.stderr.write(e.trace or f"{e}\n")
        return 1
    except BaseException as e:
        worker.events.emit("error", message=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
        traceback.print_exc()
        return 1
    finally:
        worker.events.close()
        lifeline.end_own_session()  # compilers it started (ninja gives each a process group of its own)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
