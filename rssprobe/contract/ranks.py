"""The world a launch command asks for, as the orchestrator tells each rank of the user's own launcher
(run/launchranks.py reads the command; worker/__main__.py compares): shared words, stdlib only."""

from __future__ import annotations

from .environment import RANKS_ENV  # noqa: F401  (the variable this module's words travel in)


def asked(value: str | None) -> tuple[int, str] | None:
    """(ranks, launcher) from RANKS_ENV's value; None when absent or not of that form."""
    count, _, launcher = (value or "").partition(" ")
    return (int(count), launcher or "the launcher") if count.isdigit() and int(count) > 0 else None


def mismatch(asked: int, launcher: str, reached: int) -> str:
    """The one line a run fails with when the world its ranks got is not the one its command asked for."""
    if launcher == "accelerate":
        cause = ("accelerate launch starts one plain process unless told to distribute: add --multi_gpu (or use a "
                 "config whose distributed_type is MULTI_CPU/MULTI_GPU); run alone, the job would fail in "
                 "DeepSpeed's rendezvous")
    else:
        cause = f"{launcher} started a world of {reached}: check its options and hostfile"
    return (f"the launch command asks for {asked} ranks but {reached} reached DeepSpeed ({cause}); nothing was "
            "measured")
