"""The save phase: every save of a script or scenario run measured as a phase of its own (a `save` event).

Field jobs that fit while training die at the save (ms-swift #6473 and #8193, LLaMA-Factory #9258), so each save
entry point is one exact-peak interval (VmHWM reset at entry, as steps and sites are): the RSS before and after,
the peak above the RSS at entry, anonymous memory before and after, the sites that ran inside it and, for the
calls that build a consolidated 16-bit state dict, the bytes of the tensors it holds on this rank (exact: storage
sizes, not an RSS reading).

Entry points (the outermost one running makes the event; the ones nested inside it are its parts):

* DeepSpeed: `DeepSpeedEngine.save_checkpoint` (each rank writes its optimizer partition; rank 0 also the module
  states), `DeepSpeedEngine.save_16bit_model`;
* the consolidated state dict, read as a part: `DeepSpeedEngine._zero3_consolidated_16bit_state_dict` (ZeRO-3:
  the whole model on rank 0, None on the others) and `deepspeed.checkpoint.utils.clone_tensors_for_torch_save`,
  which accelerate's `get_state_dict` calls below ZeRO-3 on every rank (a clone of the module's state dict);
* transformers' `Trainer._save_checkpoint` (a checkpoint during training: save_model, then DeepSpeed's
  save_checkpoint for the optimizer) and `Trainer.save_model` (the user's final save), hooked once
  transformers.trainer is imported.

A scenario's `[save]` runs its saves after the last step (`at_end`): "checkpoint" is engine.save_checkpoint;
"model_16bit" is the consolidated 16-bit model as HF Trainer's save_model gets it under DeepSpeed (accelerate's
get_state_dict: ZeRO-3 `_zero3_consolidated_16bit_state_dict`, below it `clone_tensors_for_torch_save` of the
module's state dict on every rank), written by rank 0 with safetensors as the Trainer writes a model that is not
a PreTrainedModel.
"""

from __future__ import annotations

import functools
import inspect
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..contract.files import CHECKPOINTS, SAVE_KINDS
from . import glibc, procfs
from .sites import SiteRecorder

ENGINE = "deepspeed.runtime.engine.DeepSpeedEngine"
# entry point -> the save kind it makes when it is the outermost save running (contract.SAVE_KINDS)
OUTER = {"save_checkpoint": "save_checkpoint", "save_16bit_model": "save_16bit_model",
         "Trainer._save_checkpoint": "trainer_checkpoint", "Trainer.save_model": "trainer_save_model"}
# parts whose result is a consolidated state dict: its tensors' bytes are what the save holds on this rank
STATE_DICTS = ("_zero3_consolidated_16bit_state_dict", "clone_tensors_for_torch_save")


def state_dict_bytes(sd: Any) -> int | None:
    """Bytes of the distinct storages of the tensors in a (nested) state dict; None for None (a rank that
    consolidates nothing). Shared weights (a tied embedding) count once, as they are held once."""
    if sd is None:
        return None
    seen: dict[int, int] = {}

    def walk(item: Any) -> None:
        if hasattr(item, "untyped_storage"):
            storage = item.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
        elif isinstance(item, dict):
            for v in item.values():
                walk(v)
        elif isinstance(item, (list, tuple)):
            for v in item:
                walk(v)

    walk(sd)
    return sum(seen.values())


@dataclass
class _Open:
    kind: str
    interval: Any
    t0: float
    entry_smaps: dict[str, int] | None
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)
    state_dict: int | None = None  # bytes of the consolidated state dict built inside (None: none built)


class SaveProbe:
    """Wraps the save entry points; `steps()` says how many optimizer steps were done (the event's step)."""

    def __init__(self, worker: Any, recorder: SiteRecorder, steps: Callable[[], int],
                 restore: list[tuple[Any, str, Any]] | None = None) -> None:
        """`restore`: where each replaced attribute is kept to be put back (a script run's own list)."""
        self.w, self.recorder, self.steps = worker, recorder, steps
        self.open: _Open | None = None
        self.depth: dict[str, int] = {}  # entry -> calls of it running (a recursive part measured once)
        self.restore: list[tuple[Any, str, Any]] = [] if restore is None else restore

    # ---- hooks --------------------------------------------------------------------------------
    def install(self) -> None:
        from deepspeed.checkpoint import utils as ckpt_utils
        from deepspeed.runtime.engine import DeepSpeedEngine

        for name in ("save_checkpoint", "save_16bit_model", "_zero3_consolidated_16bit_state_dict"):
            if hasattr(DeepSpeedEngine, name):
                self._wrap(DeepSpeedEngine, name, name)
        if hasattr(ckpt_utils, "clone_tensors_for_torch_save"):
            self._wrap(ckpt_utils, "clone_tensors_for_torch_save", "clone_tensors_for_torch_save")

    def hook_trainer(self, module: Any) -> None:
        """transformers.trainer, once imported: the Trainer's checkpoint and its save_model."""
        for name in ("_save_checkpoint", "save_model"):
            if hasattr(module.Trainer, name):
                self._wrap(module.Trainer, name, f"Trainer.{name}")

    def uninstall(self) -> None:
        for owner, name, raw in reversed(self.restore):
            setattr(owner, name, raw)
        self.restore.clear()

    def _wrap(self, owner: Any, attr: str, entry: str) -> None:
        raw = inspect.getattr_static(owner, attr)
        self.restore.append((owner, attr, raw))
        fn = raw.__func__ if isinstance(raw, staticmethod) else raw
        probe = self

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return probe.call(entry, lambda: fn(*args, **kwargs))

        setattr(owner, attr, staticmethod(wrapper) if isinstance(raw, staticmethod) else wrapper)

    # ---- measuring ----------------------------------------------------------------------------
    def call(self, entry: str, fn: Callable[[], Any]) -> Any:
        """Run one entry point's call: a save of its own when no save is running, else a part of the running one."""
        if self.depth.get(entry):  # its own recursion (clone_tensors_for_torch_save walks nested containers)
            return fn()
        self.depth[entry] = self.depth.get(entry, 0) + 1
        try:
            if self.open is None and entry in OUTER:
                return self._save(OUTER[entry], fn, entry)
            if self.open is None:  # a consolidating call outside any save (a user's own export): not measured
                return fn()
            return self._part(entry, fn)
        finally:
            self.depth[entry] -= 1

    def measure(self, kind: str, fn: Callable[[], Any]) -> Any:
        """A save the worker itself makes (a scenario's [save]), as one save of `kind`; what Python's garbage
        collector then frees is measured after it (a user's own saves are left to the collector's own timing)."""
        return self._save(kind, fn, None, collect=True)

    def _save(self, kind: str, fn: Callable[[], Any], entry: str | None, collect: bool = False) -> Any:
        assert kind in SAVE_KINDS, kind
        w = self.w
        entry_smaps = procfs.smaps_rollup()  # anonymous memory at entry: what a save keeps is anonymous
        entry_mallinfo = glibc.mallinfo2()  # glibc's free-retained bytes at entry: what a save can reuse unseen
        was, self.recorder.light = self.recorder.light, False  # rare: full site probes
        opened = self.open = _Open(kind, w.tracker.enter(), time.perf_counter(), entry_smaps)
        try:
            out = self._part(entry, fn) if entry is not None else fn()
        finally:
            self.open = None
            self.recorder.light = was
            time_s = time.perf_counter() - opened.t0
            peak = w.tracker.exit(opened.interval)
        sites, calls, probe_s = self.recorder.drain()
        after = w.probe(smaps=True, rss=opened.interval.rss1)
        collected = _collect() if collect else None  # after the save's own figures: they are as it left them
        w.events.emit("save", save=kind, step=self.steps(), time_s=time_s, probe_s=probe_s, peak=peak,
                      entry_rss=opened.interval.rss0, entry_smaps=entry_smaps, entry_mallinfo=entry_mallinfo,
                      parts=opened.parts,
                      state_dict_bytes=opened.state_dict, sites=sites, calls=calls, collected=collected,
                      **after)
        return out

    def _part(self, entry: str, fn: Callable[[], Any]) -> Any:
        opened = self.open
        assert opened is not None
        mi0 = glibc.in_use_and_free()
        interval = self.w.tracker.enter()
        t0 = time.perf_counter()
        try:
            out = fn()
        finally:
            peak = self.w.tracker.exit(interval)
            mi1 = glibc.in_use_and_free()
            part = opened.parts.setdefault(entry, {"calls": 0, "retained": 0, "peak": 0, "time_s": 0.0, "inuse": 0})
            part["calls"] += 1
            part["retained"] += interval.rss1 - interval.rss0
            # what it allocated and still holds when it returns (a state dict it builds): glibc's bytes in use, which
            # RSS does not show where the allocation reuses memory glibc kept free (None: not glibc's malloc)
            part["inuse"] = None if mi0 is None or mi1 is None or part["inuse"] is None \
                else part["inuse"] + mi1[0] - mi0[0]
            part["peak"] = max(part["peak"], peak)  # absolute, as the save's own: above its entry in analysis
            part["time_s"] += time.perf_counter() - t0
        if entry in STATE_DICTS:
            held = state_dict_bytes(out)
            if held is not None:
                opened.state_dict = (opened.state_dict or 0) + held
            part.setdefault("state_dict_bytes", held)
        return out


def _collect() -> dict[str, Any]:
    """Run Python's cyclic garbage collector right after a save; what it freed (RSS, glibc's bytes in use). A save
    can leave its consolidated state dict alive in a reference cycle: DeepSpeed's
    _zero3_consolidated_16bit_state_dict builds it in a recursive nested function (get_layer_state_dict) whose
    closure cell refers to itself and to the state dict, so the dict outlives the call until the collector runs."""
    import gc

    rss0, mi0 = procfs.rss_bytes(), glibc.in_use_and_free()
    objects = gc.collect()
    rss1, mi1 = procfs.rss_bytes(), glibc.in_use_and_free()
    return {"objects": objects, "rss": rss0 - rss1,
            "inuse": None if mi0 is None or mi1 is None else mi0[0] - mi1[0]}


# ---- a scenario's saves at the end ----------------------------------------------------------------
def run_at_end(worker: Any, recorder: SiteRecorder) -> None:
    """The scenario's [save], its entry points hooked only while it runs."""
    cfg = worker.scenario["save"]
    probe = SaveProbe(worker, recorder, lambda: int(worker.scenario["steps"]))
    probe.install()
    try:
        at_end(worker, probe, list(cfg["at_end"]), bool(cfg["keep"]))
    finally:
        probe.uninstall()


def at_end(worker: Any, probe: SaveProbe, kinds: list[str], keep: bool) -> None:
    """The scenario's [save] after its last step: each kind one measured save, into RUN/checkpoints/final-KIND
    (removed after every rank has written, outside the interval, unless `keep`)."""
    import torch.distributed as dist

    for kind in kinds:
        where = worker.run_dir / CHECKPOINTS / f"final-{kind}"
        if kind == "checkpoint":
            probe.measure("save_checkpoint", lambda w=where: worker.engine.save_checkpoint(str(w), tag="final"))
        else:
            probe.measure("model_16bit", lambda w=where: _model_16bit(worker, w))
        if dist.is_initialized():
            dist.barrier()
        if not keep and worker.rank == 0:
            shutil.rmtree(where, ignore_errors=True)


def _model_16bit(worker: Any, where: Any) -> None:
    """The consolidated 16-bit model as the Trainer's save_model gets it under DeepSpeed (accelerate's
    get_state_dict, calling DeepSpeed's own functions through the hooked names), written by rank 0."""
    from deepspeed.checkpoint import utils as ckpt_utils

    engine = worker.engine
    if engine.zero_optimization_partition_weights():
        state_dict = engine._zero3_consolidated_16bit_state_dict()
    else:
        state_dict = ckpt_utils.clone_tensors_for_torch_save(engine.module.state_dict())
    if worker.rank == 0 and state_dict is not None:
        import safetensors.torch

        where.mkdir(parents=True, exist_ok=True)
        # tied weights share a storage: safetensors refuses shared tensors, the Trainer's writer dedups them too
        seen: set[int] = set()
        unique = {}
        for name, t in state_dict.items():
            ptr = t.untyped_storage().data_ptr()
            if ptr not in seen:
                seen.add(ptr)
                unique[name] = t.contiguous()
        safetensors.torch.save_file(unique, str(where / "model.safetensors"), metadata={"format": "pt"})
    del state_dict
