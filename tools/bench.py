"""make bench (python -m tools.bench): what the probes cost, measured side by side inside one process.

Each bench run sets `probes.alternate`: the worker keeps every default probe on for odd steps and
off (no sites, no sub-step peaks, no smaps) for even ones, so a probes-on step and the probes-off
step after it share the model, the allocator's state and the machine's load of that moment.
Prints, for steady steps (3 on, 4 off; 5 on, 6 off; ...) pooled over the runs:
  - the step-time ratio probes on / off: the geometric mean of the pairs' ratios with a 95% t
    interval on their log ratios (analysis.stats.paired_ratio); the target is <= 1.01, +-0.5%;
  - the probes' own time / step time, measured inside the on steps (the sites' clocks);
  - the probes' resident memory: RSS of the worker's probe modules once imported;
  - what one memory-map partition costs (it runs at census points only, never per step);
  - what the census costs per GiB of RSS, at two model sizes (separate short runs of `default`,
    2 steps each, glibc as users have it): the partition's cost grows with the RSS it names.
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import Progress

from rssprobe.analysis import stats
from rssprobe.analysis.summary import Summary
from rssprobe.config import scenario
from rssprobe.config.runoptions import RunOptions
from rssprobe.config.scenariospec import ScenarioSpec
from rssprobe.contract.glibc import STEADY_MALLOC_ENV
from rssprobe.reporters import terminal, views
from rssprobe.run import environment, launch, request
from rssprobe.run.ask import ask

ALTERNATE = {"probes.alternate": True}

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
print("RSSPROBE-IMPORT-BYTES", rss() - before)
"""


def probe_import_bytes() -> int:
    reply = ask(sys.executable, ["-c", IMPORT_COST], "RSSPROBE-IMPORT-BYTES ", environment.probe(sys.executable))
    if not isinstance(reply.answer, int):
        raise SystemExit(f"bench: the probes' import cost could not be measured ({reply.why})")
    return reply.answer


# the default scenario's own size, and one whose RSS (~6 GiB) the per-GiB cost of the partition dominates
CENSUS_PARAMS = (16.8e6, 256e6)
GIB = 1 << 30


def _one(scen: scenario.Scenario, out: Path, malloc_env: dict[str, str] | None = STEADY_MALLOC_ENV) -> Summary:
    req = request.make(ScenarioSpec(scen.name), RunOptions(malloc_env=dict(malloc_env or {})), scen=scen,
                       label="bench", out=out, argv=list(sys.argv))
    result = launch.run(req)
    if result.status != "ok":
        raise click.ClickException(f"bench run failed: {result.manifest.error} ({out})")
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


def census_cost(s: Summary) -> dict[str, Any]:
    """Seconds per GiB of the RSS the memory-map partition named, of the partition and of the whole census, at each
    census point after the pre-model one (whose fixed costs, the heap walk and the smaps read, dominate its
    ~0.25 GiB); and at the last point the RSS named and the partition's seconds."""
    points = [p for p in s.census_times()
              if p["at"] != "pre_model" and p["partition_time_s"] is not None and p["partition_rss_bytes"]]
    if not points:
        raise click.ClickException(f"bench run has no memory-map partition after the baseline ({s.run.path})")
    partition = [p["partition_time_s"] / (p["partition_rss_bytes"] / GIB) for p in points]
    census = [p["census_time_s"] / (p["partition_rss_bytes"] / GIB) for p in points if p["census_time_s"] is not None]
    return {"points": len(points), "partition_per_gib": partition, "census_per_gib": census,
            "rss_gib": points[-1]["partition_rss_bytes"] / GIB, "partition_s": points[-1]["partition_time_s"]}


def census_table(scenario_ref: str, params: tuple[float, ...], tmp: Path, progress: Progress) -> views.Table:
    table = views.Table(f"Census cost on scenario {scenario_ref}, 2 steps a run, glibc as users have it",
                        ["params", "RSS named at end (GiB)", "partition at end (s)",
                         "partition s per GiB: median [min, max]", "whole census s per GiB: median"])
    task = progress.add_task("census cost runs (one per model size)", total=len(params))
    for n in params:
        scen = ScenarioSpec(scenario_ref, steps=2, params=int(n)).load()
        c = census_cost(_one(scen, tmp / f"census-{int(n)}", malloc_env=None))
        per_gib = c["partition_per_gib"]
        table.rows.append([f"{scen.model.n_params:,}", f"{c['rss_gib']:.2f}", f"{c['partition_s']:.3f}",
                           f"{statistics.median(per_gib):.3f} [{min(per_gib):.3f}, {max(per_gib):.3f}]",
                           f"{statistics.median(c['census_per_gib']):.3f}" if c["census_per_gib"] else views.NA])
        progress.advance(task)
    table.note = ("Per GiB of the RSS each partition named, over the census points after the pre-model one "
                  "(after_init, after_first_step, end; the pre-model one, ~0.25 GiB, is mostly fixed cost). The whole "
                  "census also walks every live tensor. Target: partition <= 0.15 s per GiB at 256 M params.")
    return table


def _finite(ctx: click.Context, param: click.Parameter, values: tuple[float, ...]) -> tuple[float, ...]:
    if not all(math.isfinite(v) for v in values):  # nan passes FloatRange's comparisons unseen
        raise click.BadParameter("not a finite number", ctx, param)
    return values


@click.command()
@click.option("--scenario", "scenario_ref", default="default", help="A scenario, or a training script (.py) whose "
              "arguments follow -- (its loop must run at least --steps optimizer steps).")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--repeat", default=1, show_default=True, help="Runs (each alternates probes on and off).")
@click.option("--steps", default=2001, show_default=True,
              help="Steps per run: (steps - 1) // 2 pairs after step 2. The default is what the +-0.5% interval "
                   "took on 2 cores (README).")
@click.option("--census-params", "census_params", multiple=True, default=CENSUS_PARAMS, show_default=True,
              type=click.FloatRange(min=1e5), callback=_finite,
              help="Model sizes of the census cost runs (repeatable).")
@click.option("--census-only", is_flag=True, help="Only the census cost runs (no probes on/off runs).")
def main(scenario_ref: str, script_args: tuple[str, ...], repeat: int, steps: int, census_params: tuple[float, ...],
         census_only: bool) -> None:
    # a script's model is its own (model.params cannot size it): its census cost runs are default's
    census_ref = "default" if scenario_ref.endswith(".py") else scenario_ref
    if census_only:
        with tempfile.TemporaryDirectory(prefix="rssprobe-bench-") as tmp, Progress() as progress:
            census = census_table(census_ref, census_params, Path(tmp), progress)
        terminal.render([], [census], Console())
        return
    spec = ScenarioSpec(scenario_ref, steps=steps, script_args=tuple(script_args) if script_args else None)
    scen = scenario.load(spec.ref, [], {**spec.values(), **ALTERNATE})
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
        census = census_table(census_ref, census_params, Path(tmp), progress) if census_params else None
    ratio = stats.paired_ratio(off, on)
    params = s.params or 0
    table = views.Table(f"Probe overhead on {'script' if scen.script else 'scenario'} {scen.name} ({params:,} params, "
                        f"{repeat} runs of {steps} steps, probes on and off on alternate steps)",
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
    terminal.render([], [table] + ([census] if census else []), Console())


if __name__ == "__main__":
    main()
