"""A user's DeepSpeed training script, run unmodified under the probes (rssprobe run --script train.py -- ARGS).

The worker has imported torch and DeepSpeed, set up the process group and loaded the compiled ops, as for a
scenario; the script then runs as __main__ (runpy) with sys.argv = [script, *ARGS] and its directory first on
sys.path. The training is found through DeepSpeed itself:

* the pre-model baseline is taken when the script starts building its first torch.nn.Module outside an import
  (modules built while a module is imported, such as the activations transformers builds at import, do not
  count), before that module's first weight exists; a bare torch.nn.Parameter made before any module takes it
  too. What the script imports and sets up before (transformers and its modeling module included) is not
  divided by the parameter count, as a scenario's imports are not;
* a load before initialize is a load phase (rssprobe/worker/loading.py): transformers' `from_pretrained` (hooked
  when transformers.modeling_utils is imported) and a `deepspeed.zero.Init` context outside it, each one measured
  interval with what the rank then holds (the whole model or its partition);
* `deepspeed.initialize` is measured as a scenario's init (the model event with its unique parameters, the
  init figures, the after-init census); a second call is a re-initialisation event, as [reinit];
* one rssprobe step = one optimizer step: from the first forward (or backward) after the previous one to the
  `DeepSpeedEngine.step` at a gradient-accumulation boundary (DeepSpeed's global_steps moves), with the
  forward / backward / optimizer peaks of every micro-step, and its micro-steps counted as the backward passes
  in it (accelerate calls `engine.step` at the boundary only);
* every save (DeepSpeed's save_checkpoint and save_16bit_model, the Trainer's checkpoint and save_model) is a
  measured save phase (rssprobe/worker/saves.py), a `save` event;
* `--steps N` stops the script after N optimizer steps (StopAfterSteps, a BaseException the script's own
  `except Exception` does not catch); the end census runs when the script returns or calls sys.exit(0);
* a KeyboardInterrupt is the user's Ctrl-C only when a SIGINT reached this process: one the script raises
  itself is a failure of the script (exit 1), not an interruption (130).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import runpy
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from ..contract.workerscenario import ScriptSpec
from . import census, loading, models, saves, steptotal
from .events_inrun import InRunEvents
from .sites import SiteRecorder


class StopAfterSteps(BaseException):
    """Raised out of the N-th optimizer step when --steps N asked to stop there."""


class ScriptFailed(Exception):
    """The script failed: `str()` is the one line ("train.py:57: RuntimeError: ..."), `trace` its traceback."""

    def __init__(self, message: str, trace: str = "") -> None:
        super().__init__(message)
        self.trace = trace


def where_it_raised(exc: BaseException, path: Path) -> str:
    """'train.py:57': the script's own innermost line in the traceback (else its name)."""
    tb, line = exc.__traceback__, None
    target = os.path.realpath(path)
    while tb is not None:
        if os.path.realpath(tb.tb_frame.f_code.co_filename) == target:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f"{path.name}:{line}" if line is not None else path.name


class ScriptRun:
    def __init__(self, worker: Any) -> None:
        self.w = worker
        spec: ScriptSpec = worker.scenario["script"]  # every key filled by the orchestrator (config/scenario.py)
        self.path = Path(spec["path"])
        self.args = [str(a) for a in spec["args"]]
        self.sha256 = spec["sha256"]
        self.steps_wanted: int | None = spec["stop_after"]
        self.recorder: SiteRecorder | None = None
        self.inrun: InRunEvents | None = None
        self.baselined = False
        self.engines = 0
        self.done = 0  # optimizer steps measured
        self.step: dict[str, Any] | None = None  # the step being measured: interval, t0, parts, ...
        self.capture = contextlib.ExitStack()  # memray: one capture for the first step, one for the others
        self.restore: list[tuple[Any, str, Any]] = []
        self.sigint = False  # a SIGINT reached this process (Ctrl-C, forwarded by the orchestrator)
        self.loading = False  # inside a measured load (from_pretrained, or a zero.Init context)
        self.zero_init: list[Any] = []  # open zero.Init contexts measured: (interval, t0)

    # ---- running ------------------------------------------------------------------------------
    def run(self) -> None:
        source = self.path.read_bytes()
        if self.sha256 and hashlib.sha256(source).hexdigest() != self.sha256:
            raise ScriptFailed(f"{self.path}: changed since the run was prepared (sha256 differs); nothing ran")
        self.recorder = self.w.install_probes()
        self.inrun = InRunEvents(self.w, self.recorder)
        self._hook()
        stopped = None
        argv, path0 = sys.argv, list(sys.path)
        sys.argv = [str(self.path), *self.args, *getattr(self.w, "launcher_args", [])]
        sys.path.insert(0, str(self.path.parent))
        previous = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            runpy.run_path(str(self.path), run_name="__main__")
        except StopAfterSteps:
            stopped = f"stopped after {self.done} steps as asked"
        except SystemExit as e:
            if e.code not in (0, None):
                raise ScriptFailed(f"{where_it_raised(e, self.path)}: exited with code {e.code}",
                                   traceback.format_exc()) from None
        except KeyboardInterrupt as e:
            if self.sigint:
                raise  # the user's Ctrl-C: interrupted
            raise ScriptFailed(f"{where_it_raised(e, self.path)}: KeyboardInterrupt raised by the script itself "
                               "(no Ctrl-C reached it)", traceback.format_exc()) from None
        except GeneratorExit:
            raise
        except Exception as e:
            raise ScriptFailed(f"{where_it_raised(e, self.path)}: {type(e).__name__}: {e}",
                               traceback.format_exc()) from None
        finally:
            signal.signal(signal.SIGINT, previous)
            sys.argv, sys.path[:] = argv, path0
            self.capture.close()
            self._unhook()
        if self.engines == 0:
            raise ScriptFailed(f"{self.path.name} never called deepspeed.initialize")
        unfinished = self._drop_open_step()
        self.w.finish(**({"stopped": stopped} if stopped else {}),
                      **({"unfinished_step": unfinished} if unfinished else {}))

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self.sigint = True
        raise KeyboardInterrupt

    def _drop_open_step(self) -> str | None:
        """A step the script began (a forward) but never finished with an optimizer step: not counted."""
        if self.step is None:
            return None
        self.w.tracker.exit(self.step["interval"])
        self.step = None
        assert self.recorder is not None
        self.recorder.drain()
        return "the script's last forward/backward had no optimizer step after it: not counted as a step"

    # ---- hooks --------------------------------------------------------------------------------
    def _patch(self, owner: Any, name: str, make: Any) -> None:
        raw = inspect.getattr_static(owner, name)
        self.restore.append((owner, name, raw))
        wrapped = make(getattr(owner, name))
        if isinstance(raw, staticmethod) and not isinstance(wrapped, staticmethod):
            wrapped = staticmethod(wrapped)
        setattr(owner, name, wrapped)

    def _unhook(self) -> None:
        for owner, name, raw in reversed(self.restore):
            if owner is sys.meta_path:
                with contextlib.suppress(ValueError):
                    sys.meta_path.remove(raw)
            else:
                setattr(owner, name, raw)
        self.restore.clear()

    def _hook(self) -> None:
        import deepspeed
        import torch
        from deepspeed.runtime.engine import DeepSpeedEngine

        self._patch(torch.nn.Module, "__init__", self._first_module)
        self._patch(torch.nn.Parameter, "__new__", self._first_parameter)
        self._patch(deepspeed, "initialize", self._initialize)  # around the site wrapper: outermost
        self._patch(torch.distributed, "init_process_group", self._process_group)
        self._patch(DeepSpeedEngine, "forward", functools.partial(self._engine_part, "forward"))
        self._patch(DeepSpeedEngine, "backward", functools.partial(self._engine_part, "backward"))
        self._patch(DeepSpeedEngine, "step", self._engine_step)
        # every save (DeepSpeed's, the Trainer's) a measured save phase: worker/saves.py
        probe = saves.SaveProbe(self.w, self.recorder, lambda: self.done, self.restore)
        probe.install()
        _after_import("transformers.trainer", probe.hook_trainer, self.restore)
        from deepspeed.runtime.zero.partition_parameters import Init

        self._patch(Init, "__enter__", self._zero_init_enter)
        self._patch(Init, "__exit__", self._zero_init_exit)
        _after_import("transformers.modeling_utils", self._hook_transformers, self.restore)

    def _hook_transformers(self, module: Any) -> None:
        """from_pretrained as a load phase, once transformers' modeling_utils exists (the script imports it)."""
        self._patch(module.PreTrainedModel, "from_pretrained", self._from_pretrained)

    def _from_pretrained(self, original: Any) -> Any:
        run = self

        @functools.wraps(original)
        def from_pretrained(cls: Any, *args: Any, **kwargs: Any) -> Any:
            if run.loading or run.engines:  # nested (a sub-model), or after training began: not the load
                return original.__func__(cls, *args, **kwargs)
            if not run.baselined:
                run._take_baseline()
            where = args[0] if args and isinstance(args[0], (str, os.PathLike)) else kwargs.get(
                "pretrained_model_name_or_path")
            run.loading = True
            try:
                return loading.measured(run.w, "from_pretrained", lambda: original.__func__(cls, *args, **kwargs),
                                        str(where) if where is not None and os.path.isdir(where) else None)
            finally:
                run.loading = False

        return classmethod(from_pretrained)

    def _zero_init_enter(self, original: Any) -> Any:
        run = self

        @functools.wraps(original)
        def enter(ctx: Any) -> Any:
            if run.loading or run.engines or run.zero_init:
                run.zero_init.append(None)  # nested or inside a measured load: not measured apart
                return original(ctx)
            if not run.baselined:
                run._take_baseline()
            run.zero_init.append((run.w.tracker.enter(), time.perf_counter()))
            return original(ctx)

        return enter

    def _zero_init_exit(self, original: Any) -> Any:
        run = self

        @functools.wraps(original)
        def exit_(ctx: Any, *exc: Any) -> Any:
            out = original(ctx, *exc)
            opened = run.zero_init.pop() if run.zero_init else None
            if opened is not None and not any(exc):
                interval, t0 = opened
                w = run.w
                peak = w.tracker.exit(interval)
                held = loading.holding(_Partitioned())
                w.events.emit("load", how="zero.Init", time_s=time.perf_counter() - t0, peak=peak,
                              entry_rss=interval.rss0, zero_init=True, checkpoint=None, **held,
                              **w.probe(smaps=True, rss=interval.rss1))
            return out

        return exit_

    def _first_parameter(self, original: Any) -> Any:
        run = self

        @functools.wraps(original)
        def new(cls: Any, *args: Any, **kwargs: Any) -> Any:
            if not run.baselined:
                run._take_baseline()
            return original(cls, *args, **kwargs)

        return new

    def _first_module(self, original: Any) -> Any:
        run = self

        @functools.wraps(original)
        def init(module: Any, *args: Any, **kwargs: Any) -> None:
            if not run.baselined and not _inside_import():
                run._take_baseline()
            return original(module, *args, **kwargs)

        return init

    def _take_baseline(self) -> None:
        """The pre-model baseline (once): at the script's first module built outside an import, before any of
        its weights exist (else at its first bare parameter)."""
        self.baselined = True
        import torch

        for owner, name in ((torch.nn.Module, "__init__"), (torch.nn.Parameter, "__new__")):
            raw = next(raw for o, n, raw in self.restore if o is owner and n == name)
            setattr(owner, name, raw)
        self.w.baseline()

    def _process_group(self, original: Any) -> Any:
        import torch

        @functools.wraps(original)
        def init_process_group(*args: Any, **kwargs: Any) -> None:
            if torch.distributed.is_initialized():
                return None  # rssprobe set it up before the baseline (deepspeed.init_distributed)
            return original(*args, **kwargs)

        return init_process_group

    # ---- deepspeed.initialize ------------------------------------------------------------------
    def _initialize(self, original: Any) -> Any:
        signature = inspect.signature(original)
        run = self

        @functools.wraps(original)
        def initialize(*args: Any, **kwargs: Any) -> Any:
            try:
                model = signature.bind(*args, **kwargs).arguments.get("model")
            except TypeError:
                model = None
            result: list[Any] = []

            def call() -> Any:
                result.append(original(*args, **kwargs))
                return result[0][0]  # (engine, optimizer, dataloader, scheduler)

            if run.engines == 0:
                run._first_initialize(model, call)
            else:  # a re-initialisation: measured as an in-run event after the last finished step
                assert run.inrun is not None

                def reinit() -> None:
                    run.w.engine = call()

                run.inrun._measure("reinit", run.done, reinit)
            run.engines += 1
            return result[0]

        return initialize

    def _first_initialize(self, model: Any, call: Any) -> None:
        w = self.w
        if not self.baselined:
            self._take_baseline()
        params = _unique_params(model) if model is not None else 0
        w.ctx.params = params
        w.phase("after_model")
        assert self.recorder is not None
        engine = w.initialize_measured(self.recorder, call)  # learns the engine's stage before its census
        if not params:  # a model passed another way (an args namespace, a pipeline module): the engine's
            params = _unique_params(engine.module)
            w.ctx.params = params
        offload_param = w.zero_stage == 3 and offload_device(engine, "offload_param") is not None
        describe = models.describe(engine.module, {"model": {"kind": "script"}})
        trainable = _trainable_params(engine.module)
        w.events.emit("model", params=params, param_groups=len(engine.optimizer.param_groups),
                      trainable_params=trainable,
                      zero_stage=w.zero_stage, **w.estimate(engine.module, params, w.zero_stage, offload_param),
                      **describe, **_shape(engine))
        total = steptotal.find(engine, sys._getframe())
        if self.steps_wanted is not None:
            total = min(total, self.steps_wanted) if total is not None else self.steps_wanted
        w.events.emit("script_engine", **_engine_facts(engine, w.zero_stage), steps_total=total)

    # ---- steps --------------------------------------------------------------------------------
    def _open_step(self) -> None:
        if self.step is not None:
            return
        n = self.done + 1
        assert self.recorder is not None
        if n <= 2:
            self.capture.close()
            self.capture.enter_context(self.w.native.phase("first_step" if n == 1 else "steady"))
        self.w.begin_step(self.recorder, n)
        self.step = {"n": n, "interval": self.w.tracker.enter(), "t0": time.perf_counter(), "parts": {},
                     "gathered": {}, "micro": 0, "loss": None}

    def _engine_part(self, name: str, original: Any) -> Any:
        run = self

        @functools.wraps(original)
        def part(engine: Any, *args: Any, **kwargs: Any) -> Any:
            if name == "forward" and not (engine.training and run.w.torch.is_grad_enabled()):
                return original(engine, *args, **kwargs)  # an eval forward: not a step of training
            run._open_step()
            assert run.step is not None
            if name == "backward":
                run.step["micro"] += 1  # one backward a micro-step (the plain loop and accelerate's alike)
                if args:
                    run.step["loss"] = args[0]
            out = run.w._part(run.step["parts"], name, lambda: original(engine, *args, **kwargs))
            if name == "backward" and run.w.zero_stage == 3:
                run.step["gathered"]["after_backward"] = census.gathered(engine.module)
            return out

        return part

    def _engine_step(self, original: Any) -> Any:
        run = self

        @functools.wraps(original)
        def step(engine: Any, *args: Any, **kwargs: Any) -> Any:
            run._open_step()
            assert run.step is not None
            before = engine.global_steps
            out = run.w._part(run.step["parts"], "optimizer", lambda: original(engine, *args, **kwargs))
            if run.w.zero_stage == 3:
                run.step["gathered"]["after_step"] = census.gathered(engine.module)
            if engine.global_steps != before:  # an optimizer step: a gradient-accumulation boundary
                run._close_step()
            return out

        return step

    def _close_step(self) -> None:
        s, self.step = self.step, None
        assert s is not None and self.recorder is not None
        loss = s["loss"]
        try:
            value = float(loss.detach()) if loss is not None else None
        except (AttributeError, RuntimeError, TypeError, ValueError):
            value = None
        self.w.end_step(self.recorder, s["n"], s["interval"], time.perf_counter() - s["t0"], s["parts"],
                        s["gathered"], value, max(1, s["micro"]))
        self.done = s["n"]
        if self.steps_wanted is not None and self.done >= self.steps_wanted:
            raise StopAfterSteps()


class _Partitioned:
    """Every parameter ZeRO-3 partitioned so far (what a script's zero.Init context made), as a model for
    loading.holding: found through the garbage collector, once, when the context ends."""

    def parameters(self) -> Any:
        import gc

        import torch

        return [o for o in gc.get_objects() if isinstance(o, torch.nn.Parameter) and hasattr(o, "ds_tensor")]


class _AfterImport:
    """A meta path finder that calls `then(module)` once `name` has been imported (and does nothing else)."""

    def __init__(self, name: str, then: Any) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util

            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader, then = spec.loader, self.then

        class Loader:
            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: Any) -> None:
                loader.exec_module(module)
                then(module)

        spec.loader = Loader()
        return spec


def _after_import(name: str, then: Any, restore: list[tuple[Any, str, Any]]) -> None:
    """`then(module)` now if `name` is imported already, else right after its import."""
    if name in sys.modules:
        then(sys.modules[name])
        return
    finder = _AfterImport(name, then)
    sys.meta_path.insert(0, finder)
    restore.append((sys.meta_path, "", finder))


def _inside_import() -> bool:
    """Is a module being imported somewhere up the stack (its top-level code building modules)?"""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _numel(p: Any) -> int:
    """A parameter's full size (a ZeRO-3 partitioned one holds an empty tensor: its size is ds_numel)."""
    return int(getattr(p, "ds_numel", p.numel()))


def _unique_params(module: Any) -> int:
    """Unique parameters (a tied weight once; a ZeRO-3 partitioned one by its full size, ds_numel)."""
    return sum(_numel(p) for p in module.parameters())


def _trainable_params(module: Any) -> int:
    """Parameters the optimizer trains (requires_grad), by full size: a fine-tune freezes the rest."""
    return sum(_numel(p) for p in module.parameters() if p.requires_grad)


def offload_device(engine: Any, which: str) -> str | None:
    """The device DeepSpeed's parsed config gives `zero_optimization.<which>` ("cpu", "nvme"), None when it is
    absent or "none". Read from the value, never from the config object's truthiness: accelerate's
    DeepSpeedPlugin writes `"offload_param": {"device": "none"}` at ZeRO-2, an object that is not None."""
    zero_config = getattr(getattr(engine, "_config", None), "zero_config", None)
    device = getattr(getattr(zero_config, which, None), "device", None)
    value = str(getattr(device, "value", device)).lower() if device is not None else "none"
    return None if value == "none" else value


def _shape(engine: Any) -> dict[str, Any]:
    """The model's tensors as DeepSpeed's ZeRO optimizer groups them (what an estimate partitions exactly): the
    trainable parameters of each param group in order (stage 3: trainable_param_groups; stages 1/2:
    bit16_groups), a ZeRO-3 partitioned one by ds_numel. Empty for an optimizer that keeps neither, or keeps
    them otherwise than this DeepSpeed does: the record is for an estimate, never a reason to fail the user's job."""
    try:
        opt = engine.optimizer
        groups = getattr(opt, "trainable_param_groups", None)
        groups = [g["params"] for g in groups] if groups else getattr(opt, "bit16_groups", None)
        if not groups:
            return {}
        largest = max(sum(_numel(p) for p in m.parameters(recurse=False)) for m in engine.module.modules())
        return {"shape_groups": [[_numel(p) for p in g] for g in groups], "largest_layer": largest}
    except (AttributeError, KeyError, TypeError):
        return {}


def _engine_facts(engine: Any, stage: int) -> dict[str, Any]:
    """The DeepSpeed configuration the script gave, as its engine holds it (the manifest's scenario takes it)."""
    precision = "bf16" if engine.bfloat16_enabled() else "fp16" if engine.fp16_enabled() else "fp32"
    zero = {"stage": stage, "offload_optimizer": offload_device(engine, "offload_optimizer"),
            # ZeRO-1/2 never offload parameters, whatever a config says (accelerate writes the key at every stage)
            "offload_param": offload_device(engine, "offload_param") if stage == 3 else None}
    config = getattr(getattr(engine, "_config", None), "_param_dict", None)
    try:
        import json

        json.dumps(config)
    except (TypeError, ValueError):
        config = None
    return {"zero": zero, "precision": precision, "micro_batch": engine.train_micro_batch_size_per_gpu(),
            "grad_accum_steps": engine.gradient_accumulation_steps(), "deepspeed_config": config}
