"""The worker's only output channel: a JSON-lines file appended and flushed per event, so a
crash, an OOM kill or Ctrl-C keeps everything up to the last finished step."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


class EventWriter:
    def __init__(self, path: Path) -> None:
        self._f = open(path, "a", buffering=1)

    def emit(self, kind: str, **fields: Any) -> None:
        self._f.write(json.dumps({"event": kind, "t": time.time(), **fields}, separators=(",", ":")) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()
