"""Bisect over ordered versions of torch, DeepSpeed, transformers or accelerate: the first version whose figure
moved (transformers and accelerate: releases, or revisions of a local clone, PATH@REV).

The first version is the reference; one environment per version is built on demand (a
version whose environment cannot be built is skipped, like `git bisect skip`). The change
sought goes the way --direction says (default up: more bytes), or with --direction auto
the way the last version (the bad endpoint) moved, which is then probed first.
"""

from __future__ import annotations

from ... import verdicts
from ...errors import UserError
from ...log import say
from ...run import envs
from ...store import layout
from ..matrix import Outcome
from . import search
from .rounds import Runner, bpp


def bisect_versions(runner: Runner, axis: str, values: list[str],
                    fixed: str | tuple[str | None, str | None, tuple[str, ...]] | None, retries: int,
                    pip: tuple[str, ...]) -> Outcome:
    """`fixed`: the other of torch and DeepSpeed for those axes; for a library axis (torch, DeepSpeed, the other
    libraries' requirements)."""
    pythons: dict[int, tuple[str, str | None] | UserError] = {}

    def python_for(i: int) -> tuple[str, str | None]:
        if i not in pythons:
            try:
                if isinstance(fixed, tuple):  # transformers or accelerate: torch and DeepSpeed stay
                    torch, ds, others = fixed
                    pythons[i] = envs.for_versions(torch, ds, pip, say,
                                                   (envs.library_requirement(axis, values[i]), *others))
                else:
                    pair = (fixed, values[i]) if axis == "deepspeed" else (values[i], fixed)
                    pythons[i] = envs.for_versions(*pair, pip, say)
            except UserError as e:
                pythons[i] = e
        got = pythons[i]
        if isinstance(got, UserError):
            raise got
        return got

    keys = [f"{i:02d}-{axis}{layout.slug(v, 60)}" for i, v in enumerate(values)]
    runner.round(keys[0], f"{axis}{values[0]}", python_for(0), [])
    runner.reference(keys[0])
    answers: dict[int, list[search.Answer]] = {}

    def probe(i: int) -> search.Answer:
        if answers.get(i):  # asked already (the bad endpoint, with --direction auto)
            return answers[i].pop(0)
        try:
            worker = python_for(i)
        except UserError as e:
            runner.note(keys[i], f"{axis} {values[i]}", str(e))
            return "skip"
        runner.round(keys[i], f"{axis}{values[i]}", worker, [])
        return runner.judge(keys[0], keys[i], f"{axis} {values[i]}")

    last = len(values) - 1
    result = None
    if runner.direction is None:  # the bad endpoint first: it says which way is bad
        log: list[search.Probe] = []
        answer = search.decide(last, probe, retries, log)
        if answer == "same":
            result = search.SearchResult("unchanged", last, None, [], log)
        elif answer == "skip":
            result = search.SearchResult("ambiguous", 0, None, list(range(1, len(values))), log, [last])
        else:
            answers[last] = [answer]
    if result is None:
        result = search.search(len(values), probe, retries)
    mean = {k: runner.mean(k) for k in runner.groups}
    name = {i: f"{axis} {v}" for i, v in enumerate(values)}
    lines = [f"bisect {axis} {', '.join(values)} on {runner.scen.name}: {runner.metric}, threshold "
             f"{runner.threshold} B/param against {name[0]} ({bpp(mean[keys[0]])})"]
    before = after = None
    if result.status == "found" and result.first_moved is not None:
        before, after = keys[result.last_same], keys[result.first_moved]
        lines.append(f"FIRST MOVED: {name[result.first_moved]}: {runner.metric} {bpp(mean[before])} "
                     f"({name[result.last_same]}) -> {bpp(mean[after])} B/param")
    elif result.status == "unchanged":
        lines.append(f"no version moved {runner.metric} by {runner.threshold} B/param or more against {name[0]}")
    else:
        lines.append("UNDECIDED: the change came with one of " + ", ".join(name[i] for i in result.candidates)
                     + f" (last same: {name[result.last_same]}; undecided or untestable: "
                     + ", ".join(name[i] for i in result.skipped) + ")")
    other_way = [r["what"] for r in runner.log if r["verdict"] in verdicts.MOVED and r["answer"] == "same"]
    if other_way:
        lines.append(f"moved the other way (reported, not the change sought): {', '.join(dict.fromkeys(other_way))}")
    data = {"mode": "versions", "axis": axis, "values": values, "status": result.status,
            "first_moved": None if result.first_moved is None else values[result.first_moved],
            "last_same": values[result.last_same], "candidates": [values[i] for i in result.candidates],
            "probes": runner.log}
    outcome = runner.report(lines, name[0], before, after, data)
    outcome.exit_code = 125 if result.status == "ambiguous" else 0
    return outcome
