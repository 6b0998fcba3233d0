"""THE reader of files that may be damaged: every file rssprobe reads goes through here.

Any of them can be missing, a directory, a FIFO or a device, huge, truncated, not UTF-8, not JSON or
TOML, nested deeper than any file rssprobe writes, or JSON of the wrong shape. Each case is one line naming
the file and the reason (UserError, exit 2), never a traceback and never a hang: a file is opened without
blocking (a FIFO would wait for a writer forever), only a regular file is read, and at most a size bound of it.

Every JSON and TOML text, from a file or not (an events line, a claim, a --set value), is parsed by
loads_json/loads_toml: nesting is bounded (MAX_DEPTH) before the parser sees it, since both parsers recurse
once per level and a document nested 100,000 deep is a RecursionError, not an answer.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tomllib
from itertools import accumulate
from pathlib import Path
from typing import IO, Any

from ..errors import UserError

MAX_BYTES = 1 << 30  # no file rssprobe writes comes near this; a larger one is not read into memory
MAX_DEPTH = 64  # no file rssprobe reads nests deeper than ~8 levels; the parsers recurse once per level

# what cannot open or close a level: JSON strings (escapes included); TOML strings of all four kinds and comments
_JSON_SKIP = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_TOML_SKIP = re.compile(r'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"|\'[^\'\n]*\'|#[^\n]*',
                        re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_LEVEL = {"[": 1, "{": 1, "]": -1, "}": -1}

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


def depth(text: str, toml: bool = False) -> int:
    """The deepest nesting of brackets and braces in a JSON (or TOML) text, strings and comments left out
    (regular expressions in C, then a step a bracket)."""
    bare = _NOT_BRACKET.sub("", (_TOML_SKIP if toml else _JSON_SKIP).sub("", text))
    return max(accumulate(_LEVEL[c] for c in bare), default=0)


def _deep(text: str, toml: bool = False) -> bool:
    """Whether `text` nests deeper than MAX_DEPTH (free for a text with fewer brackets than that: most)."""
    return text.count("[") + text.count("{") > MAX_DEPTH and depth(text, toml) > MAX_DEPTH


def _too_deep(label: object, what: str) -> UserError:
    return UserError(f"{label}: {what} (nested deeper than {MAX_DEPTH} levels; no file rssprobe reads is)")


def loads_json(text: str, label: object, what: str = "damaged JSON") -> Any:
    """json.loads, bounded: UserError naming `label` when nested too deep; json.JSONDecodeError as json says."""
    if _deep(text):
        raise _too_deep(label, what)
    try:
        return json.loads(text)
    except RecursionError:  # not reached past the bound above; kept so that no parse is ever a traceback
        raise _too_deep(label, what) from None


def loads_toml(text: str, label: object, what: str = "not valid TOML") -> dict[str, Any]:
    """tomllib.loads, bounded as loads_json; tomllib.TOMLDecodeError as tomllib says."""
    if _deep(text, toml=True):
        raise _too_deep(label, what)
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise _too_deep(label, what) from None


def read_json(path: Path, what: str, adjective: str = "corrupt") -> Any:
    text = read_text(path)
    try:
        return loads_json(text, path, f"{adjective} {what}")
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
        return loads_toml(text, label or path)
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
