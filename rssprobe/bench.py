"""make bench: what the probes cost, measured side by side inside one process.

Each bench run sets `probes.alternate`: the worker keeps every default probe on for odd steps and
off (no sites, no sub-step peaks, no smaps) for even ones, so a probes-on step and the probes-off
step after it share the model, the allocator's state and the machine's load of that moment.
Prints, for steady steps (3 on, 4 off; 5 on, 6 off; ...) pooled over the runs:
  - the step-time ratio probes on / off: the geometric mean of the pairs' ratios with a 95% t
    interval on their log ratios (analysis.stats.paired_ratio); the target is <= 1.01, +-0.5%;
  - the probes' own time / step time, measured inside the on steps (the sites' clocks);
  - the probes' resident memory: RSS of the worker's probe modules once imported;
  - what one memory-map partition costs (it runs at census points only, never per step).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import click
from rich.console import Console
from rich.progress import Progress

from . import launcher, scenario
from .analysis import stats
from .analysis.summary import Summary
from .reporters import terminal, views

ALTERNATE = "probes.alternate=true"
FIXED_GLIBC = {"MALLOC_MMAP_THRESHOLD_": "65536"}

# What the probe code costs a training process: torch and DeepSpeed are imported first
# (the worker imports them anyway, and they bring most of the stdlib), then the probes.
IMPORT_COST = """
import os
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
import torch, deepspeed
before = rss()
import rssprobe.worker.__main__, rssprobe.worker.census, rssprobe.worker.sites
print(rss() - before)
"""


def probe_import_bytes() -> int:
    env = {**os.environ, "PYTHONPATH": launcher.PACKAGE_PARENT, "DS_ACCELERATOR": "cpu"}
    out = subprocess.run([sys.executable, "-c", IMPORT_COST], capture_output=True, text=True, env=env, check=True)
    return int(out.stdout.strip())


def _one(scen: scenario.Scenario, out: Path) -> Summary:
    req = launcher.RunRequest(scenario=scen, scenario_ref=scen.name, label="bench", malloc_env=FIXED_GLIBC, out=out)
    result = launcher.run(req)
    if result.status != "ok":
        raise click.ClickException(f"bench run failed: {result.manifest.get('error')} ({out})")
    return Summary(result.run)


def pairs(steps: list[dict]) -> tuple[list[float], list[float]]:
    """(on, off) step times of the steady pairs: step 2k+1 (probes on) with step 2k+2 (off), k >= 1."""
    by_step = {e["step"]: e for e in steps}
    on, off = [], []
    for k in range(3, max(by_step, default=0), 2):
        a, b = by_step.get(k), by_step.get(k + 1)
        if a and b and a.get("probes_on") and b.get("probes_on") is False:
            on.append(a["time_s"])
            off.append(b["time_s"])
    return on, off


@click.command()
@click.option("--scenario", "scenario_ref", default="default", help="A scenario, or a training script (.py) whose "
              "arguments follow -- (its loop must run at least --steps optimizer steps).")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--repeat", default=1, show_default=True, help="Runs (each alternates probes on and off).")
@click.option("--steps", default=2001, show_default=True,
              help="Steps per run: (steps - 1) // 2 pairs after step 2. The default is what the +-0.5% interval "
                   "took on 2 cores (README).")
def main(scenario_ref: str, script_args: tuple[str, ...], repeat: int, steps: int) -> None:
    from .scriptrun import args_set

    scen = scenario.load(scenario_ref, [f"steps={steps}", ALTERNATE, *([args_set(list(script_args))]
                                                                       if script_args else [])])
    on: list[float] = []
    off: list[float] = []
    probe_share: list[float] = []  # the sites' own measured time / step time, in the on steps
    memmap_s: list[float] = []  # one memory-map partition, per census point
    mappings: list[int] = []
    with tempfile.TemporaryDirectory(prefix="rssprobe-bench-") as tmp, Progress() as progress:
        task = progress.add_task("bench runs (probes on / off on alternate steps)", total=repeat)
        for i in range(repeat):
            s = _one(scen, Path(tmp) / f"run-{i}")
            a, b = pairs(s.steps)
            on += a
            off += b
            probe_share += [e["probe_s"] / e["time_s"] for e in s.steps[2:] if e.get("probes_on")]
            partitions = [c["memmap"] for c in s.census.values() if c.get("memmap")]
            memmap_s += [m["time_s"] for m in partitions]
            mappings += [m["mappings"] for m in partitions]
            progress.advance(task)
    ratio = stats.paired_ratio(off, on)
    params = s.params or 0
    table = views.Table(f"Probe overhead on {'script' if scen.script else 'scenario'} {scen.name} ({params:,} params, "
                        f"{repeat} runs of "
                        f"{steps} steps, probes on and off on alternate steps)",
                        ["measure", "probes on", "probes off", "on / off"])
    table.rows.append([f"steady step time (s; median of {ratio.pairs} pairs)", f"{statistics.median(on):.4f}",
                       f"{statistics.median(off):.4f}",
                       f"{ratio.ratio:.4f} [{ratio.low:.4f}, {ratio.high:.4f}] (+-{100 * ratio.half_width:.2f}%)"])
    table.rows.append(["site probes' own time / step time (measured inside)", f"{statistics.median(probe_share):.4f}",
                       "-", f"{1 + statistics.median(probe_share):.4f}"])
    table.rows.append(["probe code imported after torch + DeepSpeed (MiB)", f"{probe_import_bytes() / 2**20:.2f}",
                       "-", "-"])
    if memmap_s:
        table.rows.append([f"memory-map partition per census (s; median {statistics.median(mappings):.0f} mappings)",
                           f"{statistics.median(memmap_s):.3f}", "-", f"max {max(memmap_s):.3f}"])
    table.note = ("Step time is measured inside the worker around forward+backward+step. on / off: geometric mean "
                  f"of the pairs' ratios, {ratio.confidence:.0%} t interval on their log ratios. Targets: <= 1.01 "
                  "with an interval of +-0.5% or better (more --steps narrows it), <= 5 MiB.")
    terminal.render([], [table], Console())


if __name__ == "__main__":
    main()
