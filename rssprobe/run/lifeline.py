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
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

from ..contract import EXIT_INTERRUPTED, EXIT_TERMINATED, die_with_parent, kill_session

__all__ = ["EXIT_INTERRUPTED", "EXIT_TERMINATED", "child_dies_with_me", "exit_code", "handle_sigterm_like_ctrl_c",
           "kill_session", "terminated"]

terminated = False  # set once this process got SIGTERM


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


def exit_code(code: int | str | None) -> int | str | None:
    """Ctrl-C's exit code 130 becomes 143 when it was a SIGTERM that interrupted."""
    return EXIT_TERMINATED if terminated and code == EXIT_INTERRUPTED else code
