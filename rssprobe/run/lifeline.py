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
"""

from __future__ import annotations

import atexit
import os
import signal
from collections.abc import Callable
from typing import Any

from ..contract import (
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    ORCHESTRATOR_ENV,
    die_with_parent,
    kill_session,
    marked_processes,
)

__all__ = ["EXIT_INTERRUPTED", "EXIT_TERMINATED", "child_dies_with_me", "exit_code", "handle_sigterm_like_ctrl_c",
           "kill_marked", "kill_session", "terminated"]

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
