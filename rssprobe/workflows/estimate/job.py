"""What `estimate` says about the job as the trainer runs it (issue 41): each suggested change as the command line
that runs for this target, how to measure a phase the calibration did not, and the answer the other way round
(zero.Init off where it is on, and on where it is off) so that a ZeRO-3 user sees both."""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Any

from ...analysis import estimate as arithmetic
from ...analysis import provision, savephase
from ...analysis.calibration import Calibration

# the options that are one of a pair: giving one drops the other from the command line
PAIRS = {"--zero-init": "--no-zero-init", "--no-zero-init": "--zero-init",
         "--offload-param": "--no-offload-param", "--no-offload-param": "--offload-param"}
# options that take a value (replaced, not repeated, when a change gives them); --patch is repeatable (added)
VALUED = ("--stage", "--gpus-per-node", "--ranks-per-node", "--load-onto")


def command(argv: list[str], flags: list[str]) -> str:
    """`rssprobe ARGS` with `flags` applied: a valued option's value replaced, a pair's other half dropped, a
    repeatable --patch added once."""
    words = list(argv)
    i = 0
    out: list[str] = []
    valued = {flags[j]: flags[j + 1] for j in range(len(flags) - 1) if flags[j] in VALUED}
    # a change of rank count: --gpus-per-node and --ranks-per-node say the same thing, one of them is kept
    rank_flag = next((f for f in ("--gpus-per-node", "--ranks-per-node") if f in valued), None)
    while i < len(words):
        w = words[i]
        name = w.split("=", 1)[0]
        if name in valued or (rank_flag and name in ("--gpus-per-node", "--ranks-per-node")):
            i += 1 if "=" in w else 2
            continue
        if name in PAIRS and (name in flags or PAIRS[name] in flags):
            i += 1
            continue
        out.append(w)
        i += 1
    j = 0
    while j < len(flags):
        f = flags[j]
        if f in VALUED or f == "--patch":
            if f == "--patch" and any(out[k] == "--patch" and k + 1 < len(out) and out[k + 1] == flags[j + 1]
                                      for k in range(len(out))):
                j += 2
                continue
            out += [f, flags[j + 1]]
            j += 2
            continue
        out.append(f)
        j += 1
    return "rssprobe " + " ".join(shlex.quote(w) for w in out)


def user_argv(argv: list[str]) -> list[str]:
    """The user's words after the program (sys.argv[1:], `estimate` first)."""
    return [a for a in argv[1:] if a]


def measure_hint(accelerator: str, rows: list[dict[str, Any]], packaged: bool, argv: list[str]) -> str | None:
    """How to measure the phases the calibration did not (a command that runs), or None when all were."""
    missing = {r["key"] for r in rows if not r["measured"]}
    if not missing:
        return None
    sets = []
    if "checkpoint_load" in missing:
        sets += ["--set", "model.load=\"checkpoint\""]
    if "checkpoint_save" in missing:
        sets += ["--set", "checkpoint.every=6"]
    if accelerator == "cpu":
        return "run " + command(user_argv(argv), []) + " " + " ".join(shlex.quote(s) for s in sets) + \
            " to measure (its calibration then loads and saves)"
    return ("run rssprobe scale llama-small " + " ".join(shlex.quote(s) for s in sets)
            + " --params 20M,40M,80M --steps 12 --out DIR on a GPU machine to measure, then --calibration DIR"
            + (" (the packaged H200 calibration neither loads nor saves)" if packaged else ""))


def other_way(target: arithmetic.Target, cal: Calibration, ram: int | None, load_dtype: str) -> dict[str, Any]:
    """The same estimate with zero.Init the other way (ZeRO-3 only): its initialize peak, provision and verdict."""
    # a device_map load is never under zero.Init (refused): either way round, the other way loads onto the host
    other = replace(target, zero_init=not target.zero_init, load_onto_device=False)
    out = arithmetic.estimate(other, cal)
    rows = savephase.final_rows(provision.phases(out["node"], ram), other)
    prov = provision.provision(rows)
    init = next(r for r in rows if r["key"] == "initialize_peak")
    how = ("with zero.Init (each rank builds or loads only its partition)" if other.zero_init else
           f"without zero.Init (every rank holds the whole model, {load_dtype}, until deepspeed.initialize "
           "partitions it: the DeepSpeed config made after from_pretrained, or a model built outside the Trainer)")
    measured = [r for r in rows if r["measured"]]
    word = "fits" if all(r["verdict"] == "fits" for r in measured) else \
        "does not fit" if any(r["verdict"] == "does not fit" for r in measured) else "may not fit"
    partial = " during the phases estimated" if any(not r["measured"] for r in rows) else ""
    verdict = "" if ram is None else f": it {word} in {provision.gib(ram)} GiB{partial}"
    sentence = (f"The other way, {how}: initialize peaks at about {provision.gib(init['bytes'])} GiB per node; "
                f"provision at least {provision.gib(prov['bytes'])} GiB{verdict} "
                f"({'--zero-init' if other.zero_init else '--no-zero-init'}).")
    return {"zero_init": other.zero_init, "initialize_peak_bytes": init["bytes"], "provision_bytes": prov["bytes"],
            "phases": rows, "sentence": sentence}


def trainer_own(seen: int | None, steady: float) -> dict[str, Any]:
    """The trainer's own host memory on the node from what the user saw in steady training (--seen-steady) and this
    estimate's steady figure of DeepSpeed's buffers, with the assumption line and, where the user saw less than the
    estimate, a note saying so (nothing is taken away: the estimate is not fitted to one observation)."""
    if seen is None:
        return {"seen_steady_bytes": None, "estimated_steady_bytes": steady, "bytes": 0, "note": None,
                "assumption": "no host memory of the trainer's own beyond DeepSpeed's and torch's (its dataset, "
                              "data-loader workers, tokenizer): --seen-steady SIZE, what your job's node used "
                              "while it trained, adds it to every phase"}
    own = max(0, int(seen - steady))
    note = None if own else (f"--seen-steady {provision.gib(seen)} GiB is below this estimate's steady "
                             f"{provision.gib(steady)} GiB of DeepSpeed's buffers: nothing is added (check the rank "
                             "count, the offload and the dtype asked against the job's)")
    return {"seen_steady_bytes": seen, "estimated_steady_bytes": steady, "bytes": own, "note": note,
            "assumption": f"the trainer's own host memory {provision.gib(own)} GiB per node (its dataset, data-loader "
                          f"workers, tokenizer), in every phase: the {provision.gib(seen)} GiB seen in steady "
                          f"training (--seen-steady) less this estimate's steady {provision.gib(steady)} GiB"}
