"""make bench: what the probes cost, measured side by side in one sitting.

Runs the same scenario alternately with every default probe on and with probes off
(no sites, no sub-step peaks, no smaps), several times each, interleaved so machine drift
hits both alike, and prints ratios of medians:
  - steady step time, probes on / off (the target is <= 1.02);
  - the probes' resident memory: RSS of the worker's probe modules once imported, and the
    difference in end-of-run RSS (on - off) with glibc's mmap threshold fixed, so that
    glibc retention noise does not swamp a few MiB;
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
from .analysis.summary import Summary
from .reporters import terminal, views

OFF = ["probes.sites=none", "probes.parts=false", "probes.smaps=false"]
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


@click.command()
@click.option("--scenario", "scenario_ref", default="default")
@click.option("--repeat", default=3, show_default=True, help="Runs per mode.")
@click.option("--steps", default=12, show_default=True)
def main(scenario_ref: str, repeat: int, steps: int) -> None:
    on = scenario.load(scenario_ref, [f"steps={steps}"])
    off = scenario.load(scenario_ref, [f"steps={steps}", *OFF])
    times: dict[str, list[float]] = {"on": [], "off": []}
    probe_share: list[float] = []  # the sites' own measured time / step time, in the "on" runs
    end_rss: dict[str, list[float]] = {"on": [], "off": []}
    memmap_s: list[float] = []  # one memory-map partition, per census point
    mappings: list[int] = []
    with tempfile.TemporaryDirectory(prefix="rssprobe-bench-") as tmp, Progress() as progress:
        task = progress.add_task("bench runs (probes on / off, interleaved)", total=2 * repeat)
        for i in range(repeat):
            for mode, scen in (("on", on), ("off", off)):
                s = _one(scen, Path(tmp) / f"{mode}-{i}")
                times[mode] += [e["time_s"] for e in s.steps[1:]]
                if mode == "on":
                    probe_share += [e["probe_s"] / e["time_s"] for e in s.steps[1:]]
                    partitions = [c["memmap"] for c in s.census.values() if c.get("memmap")]
                    memmap_s += [m["time_s"] for m in partitions]
                    mappings += [m["mappings"] for m in partitions]
                end_rss[mode].append(s.steps[-1]["rss"])
                progress.advance(task)
    t_on, t_off = statistics.median(times["on"]), statistics.median(times["off"])
    rss_delta = statistics.median(end_rss["on"]) - statistics.median(end_rss["off"])
    table = views.Table(f"Probe overhead on scenario {on.name} ({on.model.n_params:,} params, {repeat} runs per mode, "
                        f"{steps} steps)", ["measure", "probes on", "probes off", "on / off"])
    table.rows.append(["median steady step time (s)", f"{t_on:.4f}", f"{t_off:.4f}", f"{t_on / t_off:.3f}"])
    table.rows.append(["site probes' own time / step time (measured inside)", f"{statistics.median(probe_share):.4f}",
                       "-", f"{1 + statistics.median(probe_share):.3f}"])
    table.rows.append(["median end-of-run RSS (MiB)", f"{statistics.median(end_rss['on']) / 2**20:.1f}",
                       f"{statistics.median(end_rss['off']) / 2**20:.1f}", f"{rss_delta / 2**20:+.1f} MiB"])
    table.rows.append(["probe code imported after torch + DeepSpeed (MiB)", f"{probe_import_bytes() / 2**20:.2f}",
                       "-", "-"])
    if memmap_s:
        table.rows.append([f"memory-map partition per census (s; median {statistics.median(mappings):.0f} mappings)",
                           f"{statistics.median(memmap_s):.3f}", "-", f"max {max(memmap_s):.3f}"])
    table.note = "Step time is measured inside the worker around forward+backward+step; targets: <= 1.02, <= 5 MiB."
    terminal.render([], [table], Console())


if __name__ == "__main__":
    main()
