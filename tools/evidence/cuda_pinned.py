"""Markdown tables for reports/cuda-pinned.md, from run directories (every figure read from the runs):

    python -m tools.evidence.cuda_pinned releases DIR...   # matrix dirs: per DeepSpeed release and rank
    python -m tools.evidence.cuda_pinned runs RUN...       # runs: predicted (and on CUDA measured) side by side
    python -m tools.evidence.cuda_pinned pairs A1 B1 A2 B2 ...  # step time B/A, paired, 95% t interval

Each run's recorded pin requests are replayed through torch's rule (rssprobe.analysis.pinrule) three ways:
as the run was (its torch, its PYTORCH_CUDA_ALLOC_CONF), with pin.register (every request at its own pages)
and with the torch knob pinned_max_round_threshold_mb:1 (torch >= 2.13 only; refused by older torch).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from rssprobe.analysis import stats
from rssprobe.analysis.pinned import request_ops as _ops
from rssprobe.analysis.pinrule import Rule, predict
from rssprobe.analysis.summary import Summary
from rssprobe.config.torch_alloc_conf import release
from rssprobe.store import campaign
from rssprobe.store.rundir import RunDir

KNOB = "pinned_max_round_threshold_mb:1"


def _requests(s: Summary) -> tuple[list[dict], list[dict]]:
    events = s.by_kind.get("pins", [])
    return [r for e in events for r in e["requests"]], [f for e in events for f in e["freed"]]


def replayed(s: Summary) -> dict[str, float | None]:
    """Bytes per parameter of the model: requested, held as run, with pin.register,
    with the knob (None where the run's torch has no such key)."""
    reqs, freed = _requests(s)
    view = s.pinned() or {}
    torch = view.get("torch")
    rule = Rule.of(torch, view.get("alloc_conf"))
    ops = _ops(reqs, freed)
    register = [(op[0], op[1], op[2], "register") if op[0] == "alloc" else op for op in ops]
    knob = dataclasses.replace(Rule.of("2.13.0", KNOB), torch=torch or "2.13.0")
    live = (view.get("totals") or {}).get("requested_live") or 0
    out = {"requested": live, "held": predict(ops, rule).pinned, "register": predict(register, rule).pinned,
           "knob": predict(ops, knob).pinned if release(torch) >= (2, 13, 0) else None,
           "measured": (view.get("totals") or {}).get("held_measured")}
    return {k: None if v is None else v / s.params for k, v in out.items()} if s.params else out


def _f(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def releases(dirs: list[str]) -> None:
    print("| DeepSpeed | ranks | zero.pin_memory (effective) | pin requests (rank 0) | requested | held, predicted "
          "for CUDA | slack | with pin.register | with the knob (torch 2.13) | node: requested | node: held |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for d in dirs:
        index = campaign.read_index(Path(d), "matrix")
        for cell in campaign.entries(index):
            group = Path(d) / campaign.entry_dir(index, cell)  # where the matrix directory is now
            run = RunDir(next(p for p in sorted(group.iterdir()) if p.name.startswith("run-")))
            world = run.manifest().world_size
            ranks = [Summary(run, r) for r in range(world)]
            figures = [replayed(s) for s in ranks]
            worst = max(figures, key=lambda f: f["held"] or 0)  # ranks' partitions differ by padding only
            s = ranks[0]
            eff = ((s.pinned() or {}).get("pin_memory") or {}).get("effective") or {}
            n = len(_requests(s)[0])
            print(f"| {cell['deepspeed']} | {world} | {eff.get('offload_optimizer')} | {n} | {_f(worst['requested'])} "
                  f"| {_f(worst['held'])} | {_f((worst['held'] or 0) - (worst['requested'] or 0))} "
                  f"| {_f(worst['register'])} | {_f(worst['knob'])} "
                  f"| {_f(sum(f['requested'] or 0 for f in figures))} | {_f(sum(f['held'] or 0 for f in figures))} |")
    print("\nB/param of the whole model: the rank with the most held, and the node (every rank's summed).")


def runs(paths: list[str]) -> None:
    print("| run | torch | alloc conf | requested | held, predicted | held, measured (CUDA) | with pin.register "
          "| with the knob |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for path in paths:
        s = Summary(RunDir(Path(path)))
        f = replayed(s)
        view = s.pinned() or {}
        print(f"| {Path(path).name} | {view.get('torch')} | {view.get('alloc_conf') or 'unset'} | {_f(f['requested'])} "
              f"| {_f(f['held'])} | {_f(f['measured'])} | {_f(f['register'])} | {_f(f['knob'])} |")


def pairs(paths: list[str]) -> None:
    """Step time of B over A, pair by pair (mean of steps 2..N of each run), paired as make bench pairs them
    (rssprobe.analysis.stats.paired_ratio: the geometric mean of the ratios, with a 95% t interval)."""
    times = [Summary(RunDir(Path(p))).as_dict()["mean_step_time_s"] for p in paths]
    done = [(a, b) for a, b in zip(times[0::2], times[1::2], strict=True) if a and b]
    ratios = [b / a for a, b in done]
    if len(done) > 1:
        r = stats.paired_ratio([a for a, _b in done], [b for _a, b in done])
        head = f"step time ratio {r.ratio:.4f} [{r.low:.4f}, {r.high:.4f}]"
    else:
        head = "step time ratio n/a (fewer than two pairs)"
    print(f"{head} over {len(ratios)} pairs: {', '.join(f'{r:.4f}' for r in ratios)}")


if __name__ == "__main__":
    {"releases": releases, "runs": runs, "pairs": pairs}[sys.argv[1]](sys.argv[2:])
