"""Writing rssprobe's files: whole or not at all (a crash leaves the old file or the new, never half).

A file is written into a temporary sibling, created exclusively and never through a link (so a FIFO, a
device or a symbolic link left at the temporary name cannot block or redirect the write), then renamed over
its name: the name is replaced, never written through (a hard link or a symbolic link at that name keeps the
file it pointed at unchanged)."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """`data` as the file `path` (see the module's doc); OSError as the system says it."""
    tmp = path.parent / f".{path.name}.{os.getpid()}.tmp"
    try:
        os.unlink(tmp)  # this process's own leftover (a crash between create and rename), whatever it is
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        raise OSError(f"{tmp} is a directory") from None
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    write_bytes_atomic(path, (json.dumps(data, indent=2, default=str) + "\n").encode())
