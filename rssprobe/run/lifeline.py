"""Nothing outlives the orchestrator: SIGTERM is an interruption, and children die with their parent.

The orchestrator's half (the worker's is rssprobe/worker/lifeline.py; what both use, the kernel's parent-death
signal and ending a session whole, is the contract's):

* The orchestrator (``rssprobe ...``) treats SIGTERM, which CI systems send on cancel or time-out,
  like Ctrl-C: a handler raises KeyboardInterrupt, so a run in progress is stopped the way Ctrl-C
  stops it and is marked "interrupted" with its finished steps. The command then exits with 143
  (128 + SIGTERM) instead of Ctrl-C's 130, so a caller can tell the two apart.
* Every process the orchestrator launches (the worker, or torchrun) asks the kernel for a signal when
  its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``). That covers what no handler can: a SIGKILL of
  rssprobe, or of torchrun (whose ranks run in sessions of their own and are out of reach of a signal
  to torchrun's process group).
* When a run ends, whatever ended it (its end, a time-out, Ctrl-C, a rank's death), the orchestrator kills
  every process that still carries its marker in the environment (ORCHESTRATOR_ENV = its pid): a rank
  that could not act on SIGTERM (stopped, or blocked in C++ in the process-group set-up, where Python's
  handler cannot run) dies with its launcher instead of living on with parent 1.
* and every process the run caused that is still alive, marked or not: the orchestrator is a child
  subreaper (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``), so a process whose parent ended (a daemon the user's
  script started in a new session with an empty environment, double-forked away) is re-parented to it, not
  to init, and stays its descendant; kill_descendants() ends them all. A subreaper needs no privilege and
  works in any container; a cgroup would need a delegated, writable cgroup v2 subtree, which CI runners and
  containers rarely give. What a subreaper cannot catch: a process started outside the tree on the run's
  behalf (by a system service), and descendants of an orchestrator killed outright (SIGKILL: they go to init;
  the worker's parent-death signal still ends the worker and torchrun's ranks).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from ..contract.environment import ORCHESTRATOR_ENV
from ..contract.exitcodes import EXIT_INTERRUPTED, EXIT_TERMINATED
from ..contract.lifeline import die_with_parent, kill_session, marked_processes

__all__ = ["EXIT_INTERRUPTED", "EXIT_TERMINATED", "become_subreaper", "child_dies_with_me", "descendants",
           "exit_code", "handle_sigterm_like_ctrl_c", "kill_descendants", "kill_marked", "kill_session",
           "terminated"]

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h

terminated = False  # set once this process got SIGTERM
_registered = False


def child_dies_with_me(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A Popen preexec_fn: the child (and what it execs) gets `sig` when this process dies.

    SIGTERM, not SIGKILL: the worker then ends its compilers and releases torch's build lock
    (see worker/lifeline.py), and torchrun stops its ranks before it exits.
    """
    me = os.getpid()
    # The kernel sends it when the *thread* that forked the child ends: rssprobe launches from its main thread.

    def preexec() -> None:
        die_with_parent(sig, parent=me)

    return preexec


def kill_marked() -> list[int]:
    """SIGKILL every process this orchestrator started that is still alive (its marker in their environment);
    the pids killed."""
    pids = marked_processes(ORCHESTRATOR_ENV, str(os.getpid()))
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
    return pids


def become_subreaper() -> bool:
    """Make this process the reaper of every orphan among its descendants (Linux >= 3.4); False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _processes() -> list[tuple[int, bytes, int]]:
    """(pid, state, parent pid) of every process, read from /proc (one that ends meanwhile is left out)."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()  # the name may hold spaces and parentheses
        out.append((int(entry.name), fields[0], int(fields[1])))
    return out


def descendants(root: int | None = None) -> list[int]:
    """Every live process below `root` (default: this one) in the process tree (a zombie has ended: it is
    reaped, not killed)."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    for pid, state, parent in _processes():
        if state != b"Z":
            children.setdefault(parent, []).append(pid)
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def kill_descendants(grace_s: float = 5.0) -> list[int]:
    """SIGKILL every descendant of this process (see the module's doc) until none is left or `grace_s` passed,
    reaping those that became its children; the pids killed. Called when a run's worker has been waited for,
    so no child this process still means to wait for is among them."""
    killed: list[int] = []
    deadline = time.monotonic() + grace_s
    while True:
        alive = descendants()
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
            if pid not in killed:
                killed.append(pid)
        _reap()
        if not alive or time.monotonic() > deadline:
            return killed
        time.sleep(0.01)


def _reap() -> None:
    """Reap the zombies among this process's children (orphans re-parented here: kill_descendants runs after the
    run's own Popen child was waited for, so no zombie here is one a Popen still waits for)."""
    me = os.getpid()
    for pid, state, parent in _processes():
        if state == b"Z" and parent == me:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue


def _on_sigterm(_signum: int, _frame: Any) -> None:
    global terminated
    terminated = True
    raise KeyboardInterrupt


def handle_sigterm_like_ctrl_c() -> None:
    """In the orchestrator: SIGTERM takes Ctrl-C's path (and the exit code becomes 143), and whatever it started
    is killed when it exits (kill_marked, at exit: a second Ctrl-C cannot leave a rank behind).

    Only from the main thread (Python's rule for handlers); elsewhere (a CLI invoked from a thread) a no-op.
    """
    global _registered
    if not _registered:
        atexit.register(kill_marked)
        _registered = True
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:
        pass


def exit_code(code: int | str | None) -> int | str | None:
    """Ctrl-C's exit code 130 becomes 143 when it was a SIGTERM that interrupted."""
    return EXIT_TERMINATED if terminated and code == EXIT_INTERRUPTED else code
