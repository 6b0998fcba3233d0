"""A directory a command writes is claimed before anything is written into it: one writer at a time.

claim(directory) creates the directory (and its parents) and takes it: a claim file inside it (CLAIM), held
open under an exclusive flock, that names its holder (pid, start time and boot id, as store/judgement's
liveness records them, and the command). A second command that asks for the same directory, in this
process's lifetime or beside it, is refused with one line naming the holder, before it writes anything.

The claim file is created exclusively, never through a link. One found there is used only when it is one of
rssprobe's own (a regular file of one name holding a claim's record, or empty); a symbolic link, a hard link
(another run's manifest, say), a FIFO or a file of anything else is refused with one line and left untouched.

The claim ends when its holder releases it (the file removed, and the directory too if the claim made it and
nothing was written) or exits: release_all() runs at exit, and a holder killed outright (SIGKILL) loses its
flock in the kernel; the file it left names a holder judgement.gone() finds gone, and the next claim takes it
over with one line. A holder alive by that check keeps the directory even where flock is not enforced (some
network file systems). Claims are reentrant within one process (a campaign, then its groups, then their runs).
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import json
import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..log import say
from . import judgement, outputs, reader
from .writer import now_iso

CLAIM = ".rssprobe-claim"


class _Held:
    def __init__(self, fd: int, path: Path, made: bool) -> None:
        self.fd, self.path, self.made = fd, path, made


_held: dict[Path, _Held] = {}


_FIELDS = {"orchestrator", "command", "since"}


def _holder(fd: int) -> dict[str, Any] | None:
    """The record of the claim file open at `fd`: {} while it is being written (empty), None when it holds
    something that is not one of rssprobe's claims (a JSON object of exactly its fields, the orchestrator an
    object: anything else is someone's data, never adopted, truncated or removed)."""
    try:
        data = os.pread(fd, 1 << 16, 0)
    except OSError:
        return None
    if not data:
        return {}
    try:
        record = reader.loads_json(data.decode("utf-8"), CLAIM)
    except (UnicodeDecodeError, ValueError, UserError):  # JSONDecodeError is a ValueError
        return None
    if not isinstance(record, dict) or set(record) != _FIELDS or not isinstance(record["orchestrator"], dict):
        return None
    return record


def describe(holder: dict[str, Any]) -> str:
    """'pid 123 (rssprobe scale ..., since 2026-...)' for a claim's holder."""
    command = " ".join(str(a) for a in holder.get("command") or [])[:120]
    pid = (holder.get("orchestrator") or {}).get("pid", "?")
    return f"pid {pid}" + (f" ({command}, since {holder.get('since')})" if command else "")


def _mkdir(directory: Path) -> bool:
    """Make the directory (with its parents); True when it did not exist. UserError, one line, when it cannot
    (a file in the way, a name too long, no permission)."""
    try:
        mode = os.stat(directory).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise UserError(f"{directory}: cannot use the directory ({_why(directory, e)})") from None
    if mode is not None:
        if not stat.S_ISDIR(mode):
            raise UserError(f"{directory}: exists and is not a directory")
        return False
    try:
        directory.mkdir(parents=True)
        return True
    except FileExistsError:
        if os.path.isdir(directory):
            return False  # made meanwhile by another: the claim below decides who writes
        raise UserError(f"{directory}: exists and is not a directory") from None
    except OSError as e:
        raise UserError(f"{directory}: cannot create the directory ({_why(directory, e)})") from None


def _why(directory: Path, e: OSError) -> str:
    """A file in the way above the directory, by name; else the system's reason."""
    blocker = next((p for p in directory.parents if os.path.lexists(p) and not os.path.isdir(p)), None)
    return f"{blocker} is not a directory" if blocker is not None else (e.strerror or str(e))


def _open(path: Path, directory: Path, what: str) -> int:
    """The claim file, created exclusively (never through a link); an existing one opened without following a
    link or blocking, and only when it is a regular file of one name (a hard link is someone else's file)."""
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        pass
    except OSError as e:
        raise UserError(f"{directory}: cannot claim the {what} ({e.strerror or e})") from None
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:  # released meanwhile: create it
        return _open(path, directory, what)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UserError(f"{path}: is a symbolic link, not rssprobe's claim file; rssprobe leaves it as it is: "
                            "remove it, or give another directory") from None
        raise UserError(f"{directory}: cannot claim the {what} ({e.strerror or e})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:  # a FIFO would never give the record back
        os.close(fd)
        what_is = outputs.kind(st.st_mode) if not stat.S_ISREG(st.st_mode) else \
            f"a hard link ({st.st_nlink} names)"
        raise UserError(f"{path}: is {what_is}, not rssprobe's claim file; rssprobe leaves it as it is: remove "
                        "it, or give another directory")
    return fd


def claim(directory: Path, what: str = "output directory") -> Path:
    """Create and claim `directory` for this process (see the module's doc); the directory. A directory that is,
    or lies inside, an input of the command is refused first (store/outputs.py)."""
    outputs.check_dir(directory, what)
    made = _mkdir(directory)
    key = directory.resolve()
    if key in _held:
        return directory
    path = directory / CLAIM
    while True:
        fd = _open(path, directory, what)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _holder(fd) or {}
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise UserError(f"{directory}: cannot claim the {what} ({e.strerror or e})") from None
            raise UserError(f"{directory}: the {what} is in use by {describe(holder)}; wait for it to end, or "
                            "give another directory") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path, follow_symlinks=False).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # its holder released it between our open and our lock: claim the new file
    previous = _holder(fd)  # {}: empty, a claim being made (its maker lost the lock to us) or a crash's leftover
    if previous is None or os.fstat(fd).st_nlink != 1:
        os.close(fd)
        raise UserError(f"{path}: is not one of rssprobe's claims (a hard link, or a file of something else); "
                        "rssprobe leaves it as it is: remove it, or give another directory")
    recorded = previous.get("orchestrator")
    if recorded:
        why = judgement.gone(recorded)
        if why is None and recorded.get("pid") != os.getpid():
            os.close(fd)
            raise UserError(f"{directory}: the {what} is in use by {describe(previous)}; wait for it to end, or "
                            "give another directory")
        say(f"{directory}: took over the claim of {describe(previous)}: {why}")
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"orchestrator": judgement.identity(), "command": ["rssprobe", *sys.argv[1:]],
                              "since": now_iso()}).encode(), 0)
    _held[key] = _Held(fd, path, made)
    return directory


def release(directory: Path) -> None:
    """End this process's claim of `directory` (no-op when it holds none): the claim file is removed while still
    locked, then the lock dropped; the directory too when the claim made it and nothing else was written."""
    held = _held.pop(directory.resolve(), None)
    if held is None:
        return
    try:
        held.path.unlink(missing_ok=True)
    finally:
        os.close(held.fd)
    if held.made:
        try:
            held.path.parent.rmdir()  # only if empty
        except OSError:
            pass


@atexit.register
def release_all() -> None:
    for key in list(_held):
        release(key)


def contents(directory: Path) -> list[Path]:
    """What a directory holds apart from a claim file (for "is it empty?")."""
    return [p for p in directory.iterdir() if p.name != CLAIM] if os.path.isdir(directory) else []


def clear(directory: Path) -> None:
    """Remove everything in a claimed directory but its claim and the command's inputs (a --fresh start never
    deletes the plan it was given: store/outputs.py)."""
    for p in contents(directory):
        if outputs.kept(p):
            say(f"{p}: kept (an input of this command)")
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
