"""The status words, one spelling each, as they are written on disk (manifests, end events, campaign indexes).

A run's manifest goes PREPARED -> RUNNING -> one of OK, FAILED, TIMEOUT, INTERRUPTED; a worker's end event says
OK, INTERRUPTED or TERMINATED (stopped by SIGTERM: its launcher ended, or another rank failed); a campaign cell
goes PENDING -> RUNNING -> DONE, FAILED or INTERRUPTED. Words only: what each means to a verdict or an exit code
is decided where it is used (store/judgement.py, run/group.py, campaign/engine.py).
"""

from __future__ import annotations


class Status:
    """Plain strings (JSON writes them as they are); a class so that no local variable named `status` hides them."""

    PREPARED = "prepared"
    RUNNING = "running"
    OK = "ok"
    FAILED = "failed"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    TERMINATED = "terminated"  # a worker's end event only
    PENDING = "pending"  # a campaign cell not started
    DONE = "done"  # a campaign cell whose runs all ended ok
