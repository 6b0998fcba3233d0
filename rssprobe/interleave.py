"""Several run groups measured alternately, member by member, so that drift cannot pose as a difference.

Running all of one group before the other turns any drift of the machine (other load, page cache,
thermal state, a compile in another process) into a perfect separation of the two groups, which a
rank test then reads as significant. Alternating them spreads the drift over both. The order of
each round also alternates (A B, then B A, ...), so a steady drift does not favour the group that
always goes first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from . import storage
from .launcher import RunRequest, RunResult

# runs one request into its member directory (the caller's runner: a progress bar, or none)
Execute = Callable[[RunRequest, str], RunResult]


def order(n_groups: int, round_no: int) -> list[int]:
    """The groups' order in round `round_no` (1-based): forwards in odd rounds, backwards in even ones."""
    forwards = list(range(n_groups))
    return forwards if round_no % 2 else forwards[::-1]


def run_groups(reqs: list[RunRequest], repeat: int, execute: Execute) -> list[tuple[storage.GroupDir, list[str]]]:
    """`repeat` fresh runs of each request, one of each per round; stops after a run is interrupted.

    Returns, per request in the given order, its group directory and its runs' statuses.
    """
    groups = [storage.GroupDir.create(req.out, req.scenario.name, req.label, repeat) for req in reqs]
    statuses: list[list[str]] = [[] for _ in reqs]
    for i in range(1, repeat + 1):
        for j in order(len(reqs), i):
            req = reqs[j]
            result = execute(dataclasses.replace(req, out=groups[j].member(i)),
                             f"{req.scenario.name} [{req.label}] {i}/{repeat}")
            statuses[j].append(result.status)
            if result.status == "interrupted":
                return list(zip(groups, statuses, strict=True))
    return list(zip(groups, statuses, strict=True))
