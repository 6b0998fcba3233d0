"""The worker's only output channel: a JSON-lines file appended and flushed per event, so a
crash, an OOM kill or Ctrl-C keeps everything up to the last finished step."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


def events_file(rank: int) -> str:
    """Rank 0 writes events.jsonl (the whole stream of a 1-rank run); rank r > 0 events.rank<r>.jsonl."""
    return "events.jsonl" if rank == 0 else f"events.rank{rank}.jsonl"


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
