"""In-run events: a checkpoint save, eval forwards, or an engine re-initialisation after a step.

Each occurrence is measured like a step (one exact-peak interval, the sites that ran inside
it drained from the SiteRecorder) and written as an `inrun` event, so that what an event
leaves behind is a figure of its own, not noise in the next step. Works for any ZeRO stage:
it only calls the engine's public API.
"""

from __future__ import annotations

import gc
import shutil
import time
from collections.abc import Callable
from typing import Any

from ..contract.files import CHECKPOINTS
from ..contract.files import INRUN_EVENTS as EVENTS
from . import procfs, training
from .sites import SiteRecorder


class InRunEvents:
    def __init__(self, worker: Any, recorder: SiteRecorder) -> None:
        self.worker, self.recorder = worker, recorder
        self.config = {name: worker.scenario.get(name) for name in EVENTS}
        self.tags: list[str] = []  # checkpoint tags on disk, oldest first

    def due(self, step: int) -> list[str]:
        return [name for name, cfg in self.config.items() if cfg and step % cfg["every"] == 0]

    def after_step(self, step: int, x: Any) -> None:
        actions: dict[str, Callable[[], None]] = {"checkpoint": lambda: self._checkpoint(step),
                                                  "eval": lambda: self._eval(x), "reinit": self._reinit}
        for name in self.due(step):
            self._measure(name, step, actions[name])
            if name == "checkpoint":
                self._prune()  # outside the interval: deleting files is not what the save retains

    def _measure(self, name: str, step: int, action: Callable[[], None]) -> None:
        w = self.worker
        # anonymous memory at entry (a page-table walk, exact): file-backed pages come and go with the
        # page cache under memory pressure from outside; what an event keeps is anonymous
        entry_smaps = procfs.smaps_rollup()
        was, self.recorder.light = self.recorder.light, False  # rare: full site probes
        interval = w.tracker.enter()
        t0 = time.perf_counter()
        try:
            action()
        finally:
            self.recorder.light = was
        time_s = time.perf_counter() - t0
        peak = w.tracker.exit(interval)
        sites, calls, probe_s = self.recorder.drain()
        w.events.emit("inrun", name=name, step=step, time_s=time_s, probe_s=probe_s, peak=peak,
                      entry_rss=interval.rss0, entry_smaps=entry_smaps, sites=sites, calls=calls, effects=w.ctx.effects,
                      **w.probe(smaps=True, rss=interval.rss1))

    def _checkpoint(self, step: int) -> None:
        cfg, engine = self.config["checkpoint"], self.worker.engine
        root = self.worker.run_dir / CHECKPOINTS
        tag = f"step{step}"
        engine.save_checkpoint(str(root), tag=tag)
        if cfg["consolidate_16bit"]:
            engine.save_16bit_model(str(root / tag), "model_16bit.bin")
        self.tags.append(tag)

    def _prune(self) -> None:
        keep = self.config["checkpoint"]["keep"]
        while keep and len(self.tags) > keep:
            tag = self.tags.pop(0)
            if self.worker.rank == 0:  # one rank deletes; every rank wrote its shards into the same tag
                shutil.rmtree(self.worker.run_dir / CHECKPOINTS / tag, ignore_errors=True)

    def _eval(self, x: Any) -> None:
        engine = self.worker.engine
        engine.eval()
        with self.worker.torch.no_grad():
            for _ in range(self.config["eval"]["forwards"]):
                engine(x)
        engine.train()

    def _reinit(self) -> None:
        """Drop the engine (DeepSpeed's own destroy, then every reference of ours, then gc) and build anew.

        What stays alive after this is held by something other than the worker: DeepSpeed, torch, or an
        intervention under test."""
        w = self.worker
        old, w.engine = w.engine, None
        old.destroy()
        del old
        gc.collect()
        model, groups, _params = training.build_model(w.scenario)
        w.engine = training.initialize(model, groups, w.deepspeed_config())
