"""The lifeline both sides keep: a child dies with its parent; a session ends whole.

Part of the contract (rssprobe/contract/__init__.py): stdlib only."""

import ctypes
import os
import signal
import sys

from .environment import ORCHESTRATOR_ENV

# ---- the lifeline: a child dies with its parent; a session ends whole -------------------------------------

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM, parent: int | None = None) -> bool:
    """Have the kernel send `sig` to this process when its parent dies (Linux only).

    `parent`: the pid the parent had before the call (default: the current parent). If it already
    died before the request took effect (the race every PDEATHSIG user has), the signal is sent now.
    A parent of pid 1 counts as gone only under rssprobe's own launcher (itself not pid 1): started
    some other way, init (or a container's init) may well be the real parent.
    False where the kernel has no prctl (not Linux): the process then lives on as before.
    """
    if not sys.platform.startswith("linux"):
        return False
    expected = os.getppid() if parent is None else parent
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    launched = os.environ.get(ORCHESTRATOR_ENV, "")
    reparented_to_init = expected == 1 and launched.isdigit() and int(launched) != 1
    if os.getppid() != expected or reparented_to_init:  # the parent is already gone
        os.kill(os.getpid(), sig)
    return True


def session_members(sid: int) -> list[int]:
    """Live processes of session `sid` other than this one (ninja puts each compiler in a process group
    of its own, so a signal to the worker's group misses them; the session still holds them all)."""
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if os.getsid(int(entry.name)) == sid:
                    out.append(int(entry.name))
            except OSError:
                continue  # ended meanwhile
    return out


def marked_processes(key: str, value: str) -> list[int]:
    """Live processes (but this one) whose environment has key=value: every process a launcher started, however
    it left the launcher's session (torchrun puts each rank in a session of its own) or lost its parent."""
    want = f"{key}={value}".encode()
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    if want in f.read().split(b"\0"):
                        out.append(int(entry.name))
            except OSError:
                continue  # ended meanwhile, or not ours to read
    return out


def kill_session(sid: int, sig: int = signal.SIGKILL) -> None:
    """Send `sig` to every process of session `sid` (except this one)."""
    for pid in session_members(sid):
        try:
            os.kill(pid, sig)
        except OSError:
            continue
