"""The held-out validation of reports/estimate.md: the plan's measured runs, then `rssprobe estimate` for every
configuration of it, the way a user asks (its calibration made on first use, into $OUT/calibrations).

    nice -n 10 python -m tools.evidence.estimate_heldout reports/estimate/heldout.toml $OUT [--shard K/N]
    python -m tools.evidence.estimate heldout reports/estimate/heldout.toml $OUT   # the table

Resumable: the runs are a plan campaign (`rssprobe matrix --plan`: a finished cell is never run again, --shard
K/N runs one machine's share); an estimate already written is kept, and its calibration is cached. Each
configuration's estimate is asked with the configuration's scenario, --set values, ranks (--ranks-per-node R
--accelerator cpu) and glibc knobs, nothing else.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rssprobe.config import plan as plans
from rssprobe.config.allocators import parse_allocator


def estimate_argv(loaded: plans.LoadedPlan, cell: plans.PlanCell) -> list[str]:
    """The `rssprobe estimate` command line of one configuration of the plan."""
    settings = loaded.plan.plan
    argv = ["estimate", cell.scenario or settings.scenario]
    for s in [*settings.sets, *cell.sets]:
        argv += ["--set", s]
    argv += ["--ranks-per-node", str(cell.ranks), "--accelerator", "cpu"]
    name, env = parse_allocator(cell.allocator)
    if name != "glibc":
        argv += ["--allocator", name]
    for k, v in env.items():
        argv += ["--malloc-env", f"{k}={v}"]
    return [*argv, "--format", "json"]


def main(plan_path: Path, out: Path, shard: str | None) -> int:
    loaded = plans.load(plan_path)
    rssprobe = [sys.executable, "-m", "rssprobe"]
    measured = subprocess.run([*rssprobe, "matrix", "--plan", str(plan_path), "--out", str(out / "runs"),
                               *(["--shard", shard] if shard else [])])
    (out / "estimates").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "RSSPROBE_ESTIMATE": str(out / "calibrations")}
    failed = 0
    for cell in loaded.cells:
        path = out / "estimates" / f"{cell.id}.json"
        if path.is_file() and path.stat().st_size:
            continue
        argv = estimate_argv(loaded, cell)
        print(f"heldout: rssprobe {' '.join(argv)}", file=sys.stderr, flush=True)
        got = subprocess.run([*rssprobe, *argv], stdout=subprocess.PIPE, env=env, text=True)
        if got.returncode:
            failed += 1
            continue
        path.write_text(got.stdout)
    return measured.returncode or (1 if failed else 0)


if __name__ == "__main__":
    args = sys.argv[1:]
    shard_arg = args[args.index("--shard") + 1] if "--shard" in args else None
    sys.exit(main(Path(args[0]), Path(args[1]), shard_arg))
