"""make gate-check (python -m tools.gatecheck): how often the gate is wrong, measured rather than assumed.

Runs N A/A gates (the candidate applies nothing: the scenario's patch set emptied) and N gates whose
candidate retains a known BPP bytes per parameter (testing.inject, kept from step 1 on, at
unscale_and_clip_grads; --bpp, default 1), interleaved (A/A 1, injected 1, A/A 2, ...) so that machine drift
hits both kinds alike. Each is a real `rssprobe gate SCENARIO --run`, which itself interleaves its baseline and
candidate runs, with glibc's mmap threshold fixed as bisect and matrix run (--glibc steady, the default) or
glibc as users have it (--glibc default: no knob, its dynamic threshold and its noise). Prints every command
with its verdict and time, then the counts: A/A false regressions out of N (target 0) and detections of the
injection out of N (target N). Exit 0 when both targets are met, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import click
from rich.console import Console

from rssprobe.contract.glibc import STEADY_MALLOC_ENV
from rssprobe.reporters import terminal, views

SITE = "deepspeed.runtime.zero.stage_1_and_2.DeepSpeedZeroOptimizer.unscale_and_clip_grads"
# the glibc a gate's runs get: as bisect and matrix run (the mmap threshold fixed: glibc's noise removed), or
# as users have it (no knob)
GLIBC = {"steady": [a for k, v in STEADY_MALLOC_ENV.items() for a in ("--malloc-env", f"{k}={v}")], "default": []}


def inject(bpp: float) -> str:
    return f"testing.inject:site={SITE},bytes_per_param={bpp:g},step=1,mode=retained"


def gate_argv(scenario: str, repeat: int, steps: int, injected: bool, bpp: float = 1.0,
              glibc: str = "steady") -> list[str]:
    candidate = ["--patch", inject(bpp)] if injected else ["--set", "patches.patched=[]"]
    return ["rssprobe", "gate", scenario, "--run", "--repeat", str(repeat), "--set", f"steps={steps}", *GLIBC[glibc],
            *candidate, "--format", "json"]


@click.command()
@click.option("--n", "n", default=10, show_default=True, type=click.IntRange(1), help="Gates of each kind.")
@click.option("--scenario", default="tiny", show_default=True)
@click.option("--repeat", default=3, show_default=True, type=click.IntRange(1), help="Runs per side of each gate.")
@click.option("--steps", default=3, show_default=True, type=click.IntRange(1))
@click.option("--bpp", default=1.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Bytes per parameter the injected gates' candidate retains.")
@click.option("--glibc", default="steady", show_default=True, type=click.Choice(sorted(GLIBC)),
              help="steady: MALLOC_MMAP_THRESHOLD_ fixed (as bisect and matrix run); default: glibc as users have it.")
@click.option("--out", type=click.Path(path_type=Path),
              help="Where the gates' runs go (default reports/gate-check/TIME).")
def main(n: int, scenario: str, repeat: int, steps: int, bpp: float, glibc: str, out: Path | None) -> None:
    out = out or Path("reports/gate-check") / datetime.now().strftime("%Y%m%d-%H%M%S")
    rows, counts = [], {"a/a": {"regression": 0}, "injected": {"regression": 0}}
    console = Console(stderr=True)
    for i in range(1, n + 1):
        for kind, injected in (("a/a", False), ("injected", True)):
            argv = gate_argv(scenario, repeat, steps, injected, bpp, glibc)
            runs = out / f"{i:02d}-{'inject' if injected else 'aa'}"
            command = f"RSSPROBE_RUNS={shlex.quote(str(runs))} " + shlex.join(argv)
            console.print(f"gate {i}/{n} {kind}: {command}")
            t0 = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "rssprobe", *argv[1:]], capture_output=True, text=True,
                                  env={**os.environ, "RSSPROBE_RUNS": str(runs)}, stdin=subprocess.DEVNULL)
            took = time.monotonic() - t0
            try:
                verdict = json.loads(proc.stdout)["verdict"]
            except (json.JSONDecodeError, KeyError, TypeError):
                verdict = f"error (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:] or ''}"
            counts[kind][verdict] = counts[kind].get(verdict, 0) + 1
            rows.append([str(i), kind, verdict, str(proc.returncode), f"{took:.0f}", command])
    false_regressions, detections = counts["a/a"]["regression"], counts["injected"]["regression"]
    table = views.Table(f"Gate reliability on {scenario} (glibc {glibc}): {n} A/A and {n} gates injecting {bpp:g} "
                        f"B/param, {repeat} vs {repeat} runs of {steps} steps each",
                        ["#", "kind", "verdict", "exit", "seconds", "command"], rows)
    table.note = (f"A/A false regressions: {false_regressions} of {n} (target 0); detections of a retained {bpp:g} "
                  f"B/param: {detections} of {n} (target {n}). Verdicts: A/A {counts['a/a']}, injected "
                  f"{counts['injected']}.")
    terminal.render([], [table], Console(width=250))
    sys.exit(0 if false_regressions == 0 and detections == n else 1)


if __name__ == "__main__":
    main()
