"""THE one way rssprobe opens a file to write: never over, into or through one of its inputs, never into
something that is not a file, never through a link. No other module opens a file for writing
(tests/test_hostile_trust_outputs.py holds that; the worker, which shares only rssprobe/contract, opens its
event and log files with O_NOFOLLOW in a run directory this side made).

* replace(): a whole file (run files, indexes, tables, reports) is written into a temporary sibling, created
  exclusively and never through a link, then renamed over its name: whatever was at the name (a symbolic
  link, a hard link to another run's file, a FIFO, a device) is replaced, never written through or opened.
* create(): a file written as it grows (the worker's log): the name is removed first, then created exclusively.
* append_file(): appended to ($GITHUB_STEP_SUMMARY) only when it is a regular file of one name, not a link:
  a hard link could be another run's events, a symbolic link anything.
* lock(): a lock file (the checkpoint cache's, the environments'): opened without following a link or
  blocking, never truncated; anything but a regular file of one name is refused.

A command's inputs are what its user named: the runs, groups, sweeps and campaign directories it reads, the
scenario, plan, limits, patch and script files, the shards a merge joins (note() records each as it is
resolved; the CLI starts every command with none). An output, after resolving symbolic links:

* may not be an input, lie inside an input directory, or be a hard link to an input file (check_file,
  check_dir): `report --html RUN/manifest.json RUN`, `report --out RUN RUN`, `gate --junit RUN/manifest.json`;
* may not be an existing FIFO, socket, device or directory where a file is meant (opening a FIFO to write
  waits for a reader forever);
* is written whole into a temporary sibling and renamed over its name (write_file: a link at the name is
  replaced, never written through), or appended to without blocking (append_file, $GITHUB_STEP_SUMMARY).

A directory rssprobe clears (--fresh) keeps the inputs inside it (kept()). Each refusal is one line naming
the path and the input (UserError, exit 2); an optional output's caller turns it into a warning.
"""

from __future__ import annotations

import errno
import io
import json
import os
import stat
from pathlib import Path
from typing import Any

from ..errors import UserError

_inputs: dict[Path, str] = {}  # resolved path -> the path as given
_files: dict[tuple[int, int], str] = {}  # (device, inode) of an input file -> the path as given (hard links)

_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFDIR: "a directory"}


def reset() -> None:
    """A new command: no inputs yet."""
    _inputs.clear()
    _files.clear()


def real(path: Path | str) -> Path:
    """The path with every symbolic link resolved (what a write would reach)."""
    return Path(os.path.realpath(path))


def note(path: Path | str) -> None:
    """Record an input of this command (a file or a directory, as the user named it)."""
    _inputs.setdefault(real(path), str(path))
    try:
        st = os.stat(path)
    except OSError:
        return
    if stat.S_ISREG(st.st_mode):
        _files.setdefault((st.st_dev, st.st_ino), str(path))


def inputs() -> list[Path]:
    return list(_inputs)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _over_an_input(path: Path, flag: str) -> None:
    target = real(path)
    for given_real, given in _inputs.items():
        if target == given_real:
            raise UserError(f"{flag} {path}: is {given}, an input of this command; rssprobe never writes over its "
                            "inputs (give another path)")
        if _inside(target, given_real):
            raise UserError(f"{flag} {path}: lies inside {given}, an input of this command; rssprobe never writes "
                            "into its inputs (give another path)")


def kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def check_file(path: Path, flag: str) -> None:
    """UserError unless `path` may be written as a file (see the module's doc)."""
    _over_an_input(path, flag)
    try:
        st = os.stat(path)  # through links: what the name reaches
    except FileNotFoundError:
        return
    except OSError as e:
        raise UserError(f"{flag} {path}: cannot be used ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        hint = "give a file name" if stat.S_ISDIR(st.st_mode) else "rssprobe writes regular files only"
        raise UserError(f"{flag} {path}: is {kind(st.st_mode)}, not a file; {hint}")
    given = _files.get((st.st_dev, st.st_ino))
    if given is not None:
        raise UserError(f"{flag} {path}: is the same file as {given}, an input of this command; rssprobe never "
                        "writes over its inputs (give another path)")


def check_dir(path: Path, flag: str) -> None:
    """UserError when the directory `path` is, or lies inside, an input (it is made and claimed elsewhere)."""
    _over_an_input(path, flag)


def kept(path: Path) -> bool:
    """Whether `path` is an input, or holds one (a directory being cleared keeps it)."""
    target = real(path)
    return any(_inside(given, target) for given in _inputs)


def _tmp(path: Path) -> Path:
    return path.parent / f".{path.name}.{os.getpid()}.tmp"


def replace(path: Path, data: bytes | str, flag: str | None = None) -> None:
    """`data` as the file `path`, whole or not at all (a crash leaves the old file or the new); the name is
    replaced, never written through (see the module's doc). UserError, one line, when the system refuses."""
    label = f"{flag} {path}" if flag else str(path)
    tmp = _tmp(path)
    try:
        try:
            os.unlink(tmp)  # this process's own leftover (a crash between create and rename), whatever it is
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            raise OSError(f"{tmp} is a directory") from None
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data.encode() if isinstance(data, str) else data)
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
    except OSError as e:
        raise UserError(f"{label}: cannot write ({e.strerror or e})") from None


def write_json(path: Path, data: Any) -> None:
    """A JSON file of rssprobe's own (a manifest, an index), written by replace()."""
    replace(path, json.dumps(data, indent=2, default=str) + "\n")


def write_table(path: Path, frame: Any) -> None:
    """A pandas frame as a Parquet file, written by replace() (pandas' to_parquet(path) would open the name,
    following a link there into another run)."""
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    replace(path, buf.getvalue())


def create(path: Path) -> int:
    """A descriptor of a new, empty regular file at `path`, for a writer that writes as it goes (a log a
    subprocess writes): whatever was at the name is removed first (never opened), then the file is created
    exclusively, never through a link."""
    try:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise UserError(f"{path}: cannot write ({e.strerror or e})") from None


def lock(path: Path) -> int:
    """A descriptor of the lock file `path` (made if absent), to flock: opened without following a link, without
    blocking (a FIFO there would wait forever) and without truncating; UserError, one line, unless it is a
    regular file of one name."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as e:
        what = "a symbolic link" if e.errno == errno.ELOOP else "a directory" if e.errno == errno.EISDIR else None
        if what:
            raise UserError(f"{path}: is {what}, not a lock file; remove it") from None
        raise UserError(f"{path}: cannot open the lock file ({e.strerror or e})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        what = kind(st.st_mode) if not stat.S_ISREG(st.st_mode) else f"a hard link ({st.st_nlink} names)"
        raise UserError(f"{path}: is {what}, not a lock file; remove it")
    return fd


def write_file(path: Path, data: bytes | str, flag: str) -> None:
    """`data` written as `path`, whole (check_file first; OSError, one line, when the system refuses)."""
    check_file(path, flag)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{flag} {path}: cannot write ({e.strerror or e})") from None
    replace(path, data, flag)


def append_file(path: Path, text: str, flag: str) -> None:
    """`text` appended to `path` (made if absent) without ever blocking, and only when `path` is a regular file
    of one name (see the module's doc); UserError, one line, when it cannot."""
    check_file(path, flag)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UserError(f"{flag} {path}: is a symbolic link; rssprobe appends only to a file of its own name, "
                            "never through a link") from None
        raise UserError(f"{flag} {path}: cannot write ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # replaced between the check and the open
            raise UserError(f"{flag} {path}: is {kind(st.st_mode)}, not a file; rssprobe writes regular files only")
        if st.st_nlink != 1:
            raise UserError(f"{flag} {path}: is a hard link ({st.st_nlink} names: another file's data, a run's, "
                            "say); rssprobe appends only to a file of one name")
        view = memoryview(text.encode())
        while view:
            view = view[os.write(fd, view):]
    except OSError as e:
        raise UserError(f"{flag} {path}: cannot write ({e.strerror or e})") from None
    finally:
        os.close(fd)
