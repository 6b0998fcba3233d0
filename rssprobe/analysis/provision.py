"""Does it fit: an estimate's node figures against the node's RAM, phase by phase, what to provision, the changes
that would make it fit with their estimated savings, and the answer in sentences (pure arithmetic).

A phase fits when its upper 95% bound is within the node's RAM, does not fit when its estimate alone exceeds
it, and may not fit in between. "Provision at least X" is the largest upper bound of any phase (its phase
named). Phases not measured by the calibration (checkpoint save without a [checkpoint] table; checkpoint load
unless the scenario loads its model, model.load = "checkpoint") say so instead of a number. Pinned memory
that is locked (mlock: DeepSpeed's native pin backend, DS_PIN_MEMORY_BACKEND=native) is also compared with the
lock limit per process (`ulimit -l`).

The changes are the estimate recomputed for a changed target (analysis/estimate.terms), cheapest first: pinned
buffers at their own size (CUDA: the pinned slack, a term of its own), the model built under zero.Init (no
whole copy per rank during initialize; ZeRO-3 only), ZeRO-3, fewer ranks per node. Each is a prediction from
the same calibration: a change of stage keeps the calibration's fitted terms, and zero.Init keeps its
measured load (the saving on a load made without it is not measured, so not counted).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from . import estimate as arithmetic
from . import partition
from .calibration import Calibration
from .estimate import PHASES, Target, Term

GIB = 2**30


def gib(n: float) -> str:
    """A figure in GiB as the sentences give it (two decimals below 10 GiB, none from 100 GiB)."""
    v = n / GIB
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}" if v >= 10 else f"{v:,.2f}"


LOAD_NOT_ESTIMATED = "not estimated: the calibration loads no checkpoint (the answer says how to measure it)"
SAVE_NOT_ESTIMATED = "not estimated: the calibration saves no checkpoint (the answer says how to measure it)"
# (workflows/estimate/entry.py replaces the parenthesis with the command that measures it for the target)


def phases(node: dict[str, Any], ram: int | None) -> list[dict[str, Any]]:
    """Each phase of a run with the node's estimate, its upper bound and whether it fits `ram` bytes."""
    out = []
    for label, key in PHASES:
        field = arithmetic.FIELDS.get(key, key)
        if f"{field}_bytes" not in node:
            why = LOAD_NOT_ESTIMATED if key == "checkpoint_load" else SAVE_NOT_ESTIMATED
            out.append({"phase": label, "key": key, "measured": False, "why": why})
            continue
        value, high = node[f"{field}_bytes"], node[f"{field}_bytes_high"]
        upper = value if high is None else high
        verdict = None if ram is None else "fits" if upper <= ram else "does not fit" if value > ram \
            else "may not fit"
        out.append({"phase": label, "key": key, "measured": True, "bytes": value, "upper_bytes": upper,
                    "interval": high is not None, "verdict": verdict})
    return out


def provision(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What to provision per node: the largest upper bound of any measured phase, and that phase."""
    worst = max((r for r in rows if r["measured"]), key=lambda r: r["upper_bytes"])
    # a phase whose figure is a prediction (its row's "from": a CUDA save from a CPU calibration) says so
    return {"bytes": worst["upper_bytes"], "phase": worst["phase"], "interval": worst["interval"],
            "predicted": str(worst.get("from", "")).startswith("predicted")}


def _node_peak(target: Target, cal: Calibration) -> Term:
    return arithmetic.terms(target, cal, target.ranks_per_node)["peak"]


def changes(target: Target, cal: Calibration, ram: int | None) -> list[dict[str, Any]]:
    """The changes that lower the node's peak, cheapest first, each with its estimated saving on the peak's upper
    bound and whether the node's RAM then holds it (None without a RAM to hold): each single change, those of
    them that change no rank count together, and the most ranks per node that fit (without a RAM: half)."""
    before = _node_peak(target, cal).upper
    options: list[tuple[str, str, Target]] = []
    flags: dict[str, list[str]] = {}
    if target.zero.accelerator != "cpu":
        options.append(("pinned buffers at their own size", "--patch pin.register: DeepSpeed's pinned buffers "
                        "registered at their own size, no power-of-two rounding (issue 30 names the fixes)",
                        replace(target, via="register")))
        flags["pinned buffers at their own size"] = ["--patch", "pin.register"]
    one = arithmetic.terms(target, cal, 1)
    if one["initialize_model_copy"].value >= one["initialize_state"].value and not target.zero_init:
        z3 = target.zero if target.zero.stage == 3 else replace(target.zero, stage=3, offload_param=False)
        options.append(("zero.Init", "build the model under deepspeed.zero.Init (ZeRO-3"
                        + ("" if target.zero.stage == 3 else "; optimizer "
                           + ("on the device" if target.optimizer_on_device else "offloaded")
                           + ", parameters on the device")
                        + "): no whole copy of the model per rank during initialize",
                        replace(target, zero=z3, zero_init=True)))
        flags["zero.Init"] = ["--zero-init"] + ([] if target.zero.stage == 3 else
                                                ["--stage", "3", "--no-offload-param"])
    if target.zero.stage < 3 and not any(name == "zero.Init" for name, _how, _t in options):
        z3 = replace(target, zero=replace(target.zero, stage=3))
        z3_flags = ["--stage", "3", "--offload-param" if target.zero.offload_param else "--no-offload-param"]
        if target.load_onto_device:  # no device_map at ZeRO-3 (ms-swift's): the trainer loads under zero.Init
            z3, z3_flags = replace(z3, zero_init=True, load_onto_device=False), [*z3_flags, "--zero-init",
                                                                                 "--load-onto", "host"]
        options.append(("ZeRO-3", "zero_optimization.stage 3 (parameters partitioned; offloaded where they are "
                        "offloaded now" + ("; loaded under zero.Init, no device_map" if target.load_onto_device
                                           else "") + ")", z3))
        flags["ZeRO-3"] = z3_flags if target.load_onto_device else [*z3_flags, "--no-zero-init"]
    if len(options) > 1:
        both = target
        for _name, _how, changed in options:
            both = replace(both, via=changed.via if changed.via != target.via else both.via,
                           zero=changed.zero if changed.zero != target.zero else both.zero,
                           zero_init=both.zero_init or changed.zero_init,
                           load_onto_device=both.load_onto_device and changed.load_onto_device)
        together = " and ".join(name for name, _how, _t in options)
        flags[together] = [w for name, _how, _t in options for w in flags[name]]
        options.append((together, "all of the above", both))
    fewer = _fewer_ranks(target, cal, ram)
    if fewer is not None:
        options.append(fewer)
        word = "--gpus-per-node" if target.zero.accelerator == "cuda" else "--ranks-per-node"
        flags[fewer[0]] = [word, str(fewer[2].ranks_per_node)]
    out = []
    for name, how, changed in options:
        after = _node_peak(changed, cal).upper
        if after >= before:
            continue
        out.append({"change": name, "how": how, "saving_bytes": before - after, "peak_upper_bytes": after,
                    "fits": None if ram is None else after <= ram, "flags": flags[name]})
    return out


def _fewer_ranks(target: Target, cal: Calibration, ram: int | None) -> tuple[str, str, Target] | None:
    """The most ranks per node (fewer than now) whose node fits `ram` (without a RAM: half as many)."""
    def with_ranks(k: int) -> Target | None:
        zero = replace(target.zero, world=k * target.nodes)
        return None if partition.refusal(target.shape, zero) else replace(target, zero=zero, ranks_per_node=k)

    for k in range(target.ranks_per_node - 1, 0, -1) if ram is not None else [target.ranks_per_node // 2]:
        changed = with_ranks(k) if k >= 1 else None
        if changed is not None and (ram is None or _node_peak(changed, cal).upper <= ram):
            unit = "GPU" if target.zero.accelerator == "cuda" else "rank"
            label = f"{k} {unit}{'s' if k > 1 else ''} per node"
            return label, f"world {k * target.nodes}", changed
    return None


def lock_check(pinned_rank_bytes: int, lock_limit: int | None) -> dict[str, Any] | None:
    """mlock'ed pinned memory (DS_PIN_MEMORY_BACKEND=native) against the lock limit of one process."""
    if lock_limit is None or pinned_rank_bytes == 0:
        return None
    return {"pinned_rank_bytes": pinned_rank_bytes, "limit_bytes": lock_limit, "fits": pinned_rank_bytes <= lock_limit}


def _phases(rows: list[dict[str, Any]]) -> str:
    names = [r["phase"] for r in rows]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def answer(what: str, node: dict[str, Any], rows: list[dict[str, Any]], prov: dict[str, Any], ram: int | None,
           ram_from: str | None, fixes: list[dict[str, Any]], measure: str | None = None,
           commands: list[str] | None = None) -> list[str]:
    """The answer in sentences, the first answering "how much host RAM per node, and does it fit" in numbers. Each
    phase's verdict word is its row's (fits / may not fit / does not fit); a phase that is not estimated is named in
    the first sentence, with `measure` (how to measure it), and the answer never says only "fits" then.
    `commands`: each change's command line, as it runs for this target."""
    steady = next(r for r in rows if r["key"] == "steady")
    first = (f"{what} needs about {gib(steady['bytes'])} GiB of host RAM per node steady and "
             f"{gib(node['peak_rss_bytes'])} GiB at its peak; provision at least {gib(prov['bytes'])} GiB "
             f"(highest phase: {_named(prov)}, {'upper 95%' if prov['interval'] else 'no interval'})")
    missing = [r for r in rows if not r["measured"]]
    unknown = "" if not missing else (f"; the {_phases(missing)} {'is' if len(missing) == 1 else 'are'} not "
                                      "estimated" + (f": {measure}" if measure else ""))
    if ram is None:
        return [first + unknown + "."]
    measured = [r for r in rows if r["measured"]]
    by_word = {word: [r for r in measured if r["verdict"] == word] for word in ("does not fit", "may not fit", "fits")}
    short = by_word["does not fit"] + by_word["may not fit"]
    if not short:
        where = f" during {_phases(measured)}" if missing else ""
        return [first + f": it fits in {gib(ram)} GiB ({ram_from}){where}{unknown}."]
    parts = []
    for word in ("does not fit", "may not fit"):
        if by_word[word]:
            worst = max(by_word[word], key=lambda r: r["upper_bytes"])
            parts.append(f"{word} during {_phases(by_word[word])} (short by up to "
                         f"{gib(worst['upper_bytes'] - ram)} GiB)")
    out = [first + f": in {gib(ram)} GiB ({ram_from}) it " + " and ".join(parts)
           + (f"; it fits during {_phases(by_word['fits'])}" if by_word["fits"] else "") + unknown + "."]
    fitting = [(i, c) for i, c in enumerate(fixes) if c["fits"]]
    if fitting:
        i, c = fitting[0]
        out.append(f"The cheapest change that makes it fit: {c['change']} ({c['how']}), saving about "
                   f"{gib(c['saving_bytes'])} GiB of the peak"
                   + (f": {commands[i]}" if commands else "") + ".")
    elif fixes:
        out.append("No change here makes it fit: " + "; ".join(f"{c['change']} saves about "
                                                              f"{gib(c['saving_bytes'])} GiB" for c in fixes) + ".")
    return out


def _named(prov: dict[str, Any]) -> str:
    return prov["phase"] + (" (predicted for CUDA)" if prov.get("predicted") else "")


def provision_line(prov: dict[str, Any]) -> str:
    """The line the output ends with."""
    return (f"provision at least {gib(prov['bytes'])} GiB per node (highest phase: {_named(prov)}, "
            f"{'upper 95%' if prov['interval'] else 'no interval: calibrate nearer'})")
