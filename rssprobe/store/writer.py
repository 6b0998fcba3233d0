"""The time stamp rssprobe's files carry, and the old names of the whole-file writers (store/outputs.py is the
one way rssprobe opens a file to write: whole or not at all, a link at the name replaced, never written
through)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import outputs


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def write_bytes_atomic(path: Path, data: bytes) -> None:
    outputs.replace(path, data)


def write_json_atomic(path: Path, data: Any) -> None:
    outputs.write_json(path, data)
