"""THE reader of files that may be damaged: every file rssprobe reads goes through here.

Any of them can be missing, a directory, a FIFO or a device, huge, truncated, not UTF-8, not JSON or
TOML, or JSON of the wrong shape. Each case is one line naming the file and the reason (UserError,
exit 2), never a traceback and never a hang: a file is opened without blocking (a FIFO would wait for
a writer forever), only a regular file is read, and at most a size bound of it.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import IO, Any

import tomllib

from ..errors import UserError

MAX_BYTES = 1 << 30  # no file rssprobe writes comes near this; a larger one is not read into memory

_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device"}


def _open(path: Path) -> int:
    """A descriptor of a regular file, opened without blocking; UserError for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a file") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror or e})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "a directory" if stat.S_ISDIR(mode) else _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise UserError(f"{path}: is {what}, not a file")
    return fd


def open_regular(path: Path) -> IO[bytes]:
    """A regular file opened for reading in binary (for a reader that follows a file as it grows)."""
    return os.fdopen(_open(path), "rb")


def read_bytes(path: Path, limit: int = MAX_BYTES) -> bytes:
    fd = _open(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise UserError(f"{path}: too large ({size:,} bytes; rssprobe reads at most {limit:,})")
        chunks, total = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # grew while being read, or a size the kernel does not report (/proc)
                raise UserError(f"{path}: too large (over {limit:,} bytes)")
        return b"".join(chunks)
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror or e})") from None
    finally:
        os.close(fd)


def read_text(path: Path, errors: str = "strict") -> str:
    """A file's text (UTF-8); errors="replace" for logs, whose bytes are the worker's to choose."""
    data = read_bytes(path)
    try:
        return data.decode("utf-8", errors)
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: damaged (not UTF-8 text: byte {e.start})") from None


def read_json(path: Path, what: str, adjective: str = "corrupt") -> Any:
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: {adjective} {what} (not JSON: {e})") from None


def read_json_object(path: Path, what: str, adjective: str = "corrupt") -> dict[str, Any]:
    """A JSON file that must hold one object (a manifest, group.json, an index, native.json)."""
    data = read_json(path, what, adjective)
    if not isinstance(data, dict):
        raise UserError(f"{path}: {adjective} {what} (a JSON {type(data).__name__}, not an object)")
    return data


def read_toml(path: Path, label: str | None = None) -> dict[str, Any]:
    """A TOML file's tables; `label` names it in the message (default: its path)."""
    text = read_text(path)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{label or path}: not valid TOML ({e})") from None


def read_table(path: Path, what: str = "per-step table") -> Any:
    """A Parquet file as a pyarrow Table, read whole (every page decoded, so a damaged one is found here);
    UserError, one line, when it is not a table (pyarrow says why in several lines: one here)."""
    import pyarrow
    import pyarrow.parquet as pq

    data = read_bytes(path)
    try:
        # ParquetFile, not read_table: read_table's dataset layer loads pyarrow's S3 support, whose teardown at
        # exit aborts the process now and then ("terminate called without an active exception", exit 134)
        return pq.ParquetFile(pyarrow.BufferReader(data)).read(use_threads=False)
    except (pyarrow.ArrowException, OSError, ValueError) as e:  # ArrowInvalid is a ValueError, ArrowIOError an OSError
        raise UserError(f"{path}: unreadable {what} ({e})") from None


def check_regular(path: Path) -> None:
    """UserError unless `path` is a regular file (for a library that opens it itself: memray's reader)."""
    os.close(_open(path))
