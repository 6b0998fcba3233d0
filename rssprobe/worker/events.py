"""The worker's only output channel: a JSON-lines file appended and flushed per event, so a
crash, an OOM kill or Ctrl-C keeps everything up to the last finished step."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..layout import events_file

__all__ = ["EventWriter", "events_file"]


class EventWriter:
    def __init__(self, path: Path, rank: int = 0) -> None:
        self._f = open(path, "a", buffering=1)
        self.rank = rank

    def emit(self, kind: str, **fields: Any) -> None:
        event = {"event": kind, "t": time.time(), "rank": self.rank, **fields}
        self._f.write(json.dumps(event, separators=(",", ":")) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()
