"""The worker's only output channel: a JSON-lines file appended and flushed per event, so a
crash, an OOM kill or Ctrl-C keeps everything up to the last finished step.

Every event is one of the contract's kinds with that kind's fields (rssprobe.contract.events.EVENT_KINDS): one that
is not is refused here, in the worker, rather than left for the reader to drop. The first line of a file
carries the format version the reader upgrades from."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ..contract.events import event_problem
from ..contract.files import FORMAT_KEY, FORMAT_VERSION, events_file

__all__ = ["EventWriter", "events_file"]


class EventWriter:
    def __init__(self, path: Path, rank: int = 0) -> None:
        # never through a link left at the name (the run directory is the orchestrator's: store/outputs.py)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        self._f = os.fdopen(fd, "a", buffering=1)
        self.rank = rank
        self._first = self._f.tell() == 0

    def emit(self, kind: str, **fields: Any) -> None:
        event = {"event": kind, "t": time.time(), "rank": self.rank, **fields}
        if self._first:
            event[FORMAT_KEY] = FORMAT_VERSION
            self._first = False
        problem = event_problem(event, strict=True)
        if problem:
            raise ValueError(f"rssprobe worker: refusing to write {problem} (rssprobe.contract)")
        self._f.write(json.dumps(event, separators=(",", ":")) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()
