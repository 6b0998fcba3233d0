"""THE check of every path a command writes: never over, into or through one of its inputs, never into
something that is not a file.

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

import os
import stat
from pathlib import Path

from ..errors import UserError
from .writer import write_bytes_atomic

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


def write_file(path: Path, data: bytes | str, flag: str) -> None:
    """`data` written as `path`, whole (check_file first; OSError, one line, when the system refuses)."""
    check_file(path, flag)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, data.encode() if isinstance(data, str) else data)
    except OSError as e:
        raise UserError(f"{flag} {path}: cannot write ({e.strerror or e})") from None


def append_file(path: Path, text: str, flag: str) -> None:
    """`text` appended to `path` (made if absent) without ever blocking; UserError, one line, when it cannot."""
    check_file(path, flag)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise UserError(f"{flag} {path}: cannot write ({e.strerror or e})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # replaced between the check and the open
            raise UserError(f"{flag} {path}: is {kind(mode)}, not a file; rssprobe writes regular files only")
        view = memoryview(text.encode())
        while view:
            view = view[os.write(fd, view):]
    except OSError as e:
        raise UserError(f"{flag} {path}: cannot write ({e.strerror or e})") from None
    finally:
        os.close(fd)
