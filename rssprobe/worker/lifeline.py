"""The worker's half of the lifeline (the orchestrator's is rssprobe/run/lifeline.py): first thing, die with
the parent, and end by SIGTERM through Python, so that nothing it started outlives it.

Python runs a signal's handler in the main thread only, between bytecodes: a rank blocked in C++ (the
process-group set-up waits in a TCP store) never runs it and lives on, parent 1, ignoring SIGTERM. So a
watchdog thread also hears every SIGTERM (through the interpreter's wakeup fd, written by the C-level
handler the moment the signal arrives) and, if the process is still alive GRACE_S later, kills it with
SIGKILL. (A C++ call that holds the GIL while it blocks stops the watchdog too: the orchestrator then
kills what it started, run/lifeline.kill_marked.)"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from ..contract.lifeline import die_with_parent, kill_session, session_members


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
    watch_sigterm()
    die_with_parent(signal.SIGTERM)


GRACE_S = 20.0  # a worker's Terminated path (its end event, its compilers stopped) takes ~2 s; then it is stuck


def _watchdog(fd: int, grace_s: float) -> None:
    while True:
        try:
            data = os.read(fd, 64)
        except OSError:
            return
        if not data:
            return
        if signal.SIGTERM in data:
            time.sleep(grace_s)
            os.kill(os.getpid(), signal.SIGKILL)  # still here: Python's handler never ran


def watch_sigterm(grace_s: float = GRACE_S) -> None:
    """Start the SIGTERM watchdog (see the module's doc); call from the main thread, after the handlers."""
    read, write = os.pipe()
    os.set_blocking(write, False)  # the C-level handler must never block on it
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    threading.Thread(target=_watchdog, args=(read, grace_s), daemon=True, name="rssprobe-sigterm-watchdog").start()


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
