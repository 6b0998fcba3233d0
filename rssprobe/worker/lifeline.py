"""The worker's half of the lifeline (the orchestrator's is rssprobe/run/lifeline.py): first thing, die with
the parent, and end by SIGTERM through Python, so that nothing it started outlives it."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from ..contract import die_with_parent, kill_session, session_members


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
