"""Nothing outlives the orchestrator: SIGTERM is an interruption, and children die with their parent.

Two halves, both stdlib only (the worker imports this before anything heavy):

* The orchestrator (``rssprobe ...``) treats SIGTERM, which CI systems send on cancel or time-out,
  like Ctrl-C: a handler raises KeyboardInterrupt, so a run in progress is stopped the way Ctrl-C
  stops it and is marked "interrupted" with its finished steps. The command then exits with 143
  (128 + SIGTERM) instead of Ctrl-C's 130, so a caller can tell the two apart.
* Every process the orchestrator launches (the worker, or torchrun) and every worker rank asks the
  kernel for a signal when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``). That covers what no
  handler can: a SIGKILL of rssprobe, or of torchrun (whose ranks run in sessions of their own and
  are out of reach of a signal to torchrun's process group).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

PR_SET_PDEATHSIG = 1
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130

terminated = False  # set once this process got SIGTERM


ORCHESTRATOR_ENV = "RSSPROBE_ORCHESTRATOR_PID"  # set by the launcher for the processes it starts


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


def child_dies_with_me(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A Popen preexec_fn: the child (and what it execs) gets `sig` when this process dies.

    SIGTERM, not SIGKILL: the worker then ends its compilers and releases torch's build lock
    (see worker_lifeline), and torchrun stops its ranks before it exits.
    """
    me = os.getpid()
    # The kernel sends it when the *thread* that forked the child ends: rssprobe launches from its main thread.

    def preexec() -> None:
        die_with_parent(sig, parent=me)

    return preexec


def _on_sigterm(_signum: int, _frame: Any) -> None:
    global terminated
    terminated = True
    raise KeyboardInterrupt


def handle_sigterm_like_ctrl_c() -> None:
    """In the orchestrator: SIGTERM takes Ctrl-C's path (and the exit code becomes 143).

    Only from the main thread (Python's rule for handlers); elsewhere (a CLI invoked from a thread) a no-op.
    """
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:
        pass


class Terminated(BaseException):
    """Raised in the worker by SIGTERM (a BaseException: library code's `except Exception` must not eat it)."""


def _raise_terminated(_signum: int, _frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once is enough
    raise Terminated


def worker_lifeline() -> None:
    """In the worker, first thing: die with the parent, and end by SIGTERM through Python.

    The exception unwinds through torch's JIT build (its `finally` removes the build directory's
    `lock` file; a worker killed outright leaves it behind and every later run waits on it).
    """
    signal.signal(signal.SIGTERM, _raise_terminated)
    # Ctrl-C's path (the orchestrator's SIGINT) even where SIGINT came in ignored, as it does for a
    # background job of a non-interactive shell (`rssprobe run ... &` in a CI script)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    die_with_parent(signal.SIGTERM)


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


def kill_session(sid: int, sig: int = signal.SIGKILL) -> None:
    """Send `sig` to every process of session `sid` (except this one)."""
    for pid in session_members(sid):
        try:
            os.kill(pid, sig)
        except OSError:
            continue


def end_own_session(grace_s: float = 2.0) -> None:
    """The worker, on its way out, ends what it started (ninja and the compilers under it, which would
    otherwise finish their work as orphans). Only as a session leader, as the launcher's worker and every
    torchrun rank are; a worker started some other way leaves its session alone."""
    if os.getsid(0) != os.getpid():
        return
    kill_session(os.getpid(), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while session_members(os.getpid()) and time.monotonic() < deadline:
        time.sleep(0.05)
    kill_session(os.getpid(), signal.SIGKILL)


def exit_code(code: int | str | None) -> int | str | None:
    """Ctrl-C's exit code 130 becomes 143 when it was a SIGTERM that interrupted."""
    return EXIT_TERMINATED if terminated and code == EXIT_INTERRUPTED else code
