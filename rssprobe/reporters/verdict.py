"""The #7693 verdict report: a plan's runs against the claims the plan declares, and PR #8132's effects.

Reads the plan file (matrix/plan.py: base, axes, claims) and the plan's run directory
(`rssprobe matrix --plan`), and writes a markdown report with two PNGs:
  - one table per claim: the claimed B/param, what each configuration measured (baseline runs,
    mean ± sd over the repeats), and the verdict (verdicts.claim);
  - PR #8132: how often each part fired per run, and its effect on each figure against the
    baseline of the same configuration (difference, one-sided p, 95% Welch interval, verdict);
  - the first run of each environment: how long loading DeepSpeed's ops took (compiling them, or
    not), and whether the compiler cache served it;
  - the commands, the machine, the plan's wall time, and what was not run.
Every number comes from the runs; a configuration that did not run says so.

On several ranks the partitioned buffers and the code sites are shown per parameter of the
rank's partition (rank 0), so that they read on the same scale as one rank.
"""

from __future__ import annotations

import fnmatch
import json
import platform
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean, stdev
from typing import Any

import click
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from .. import host, layout, storage, verdicts
from ..analysis import stats
from ..analysis.compare import GATED, Side
from ..matrix import cells as matrix
from ..matrix.plan import Claim, LoadedPlan, PlanCell, load
from ..matrix.planrun import run_seconds
from ..worker.census import partitioned_roles

PR_FIGURES = {"steady.rss": "steady RSS", "peak": "peak RSS", "budget.rss_above_baseline": "RSS at the end",
              "budget.rss_after_trim_above_baseline": "RSS after a final trim", "budget.live": "live buffers",
              "part.glibc_free_resident": "glibc free, resident"}
PARTS = ("pr8132.float-scale", "pr8132.malloc-trim")
LIMIT = 6.0  # B/param either side of 0 in the PR #8132 chart


@dataclass
class Config:
    """One configuration of the plan: its baseline and patched cells and their run groups."""

    axis: str
    value: str
    cells: dict[str, PlanCell]  # patch -> cell
    sides: dict[str, Side]  # patch -> its group, where it ran

    @property
    def label(self) -> str:
        return "base" if self.axis == "base" else f"{self.axis} = {self.value}"

    @property
    def first(self) -> PlanCell:
        return next(iter(self.cells.values()))


def configs(loaded: LoadedPlan, runs: Path) -> list[Config]:
    out: dict[tuple[str, str], Config] = {}
    for cell in loaded.cells:
        config = out.setdefault((cell.axis, cell.value), Config(cell.axis, cell.value, {}, {}))
        config.cells[cell.patch] = cell
        group = runs / cell.id
        if (group / storage.GROUP).is_file() and storage.GroupDir(group).runs():
            config.sides[cell.patch] = Side.load(str(group))
    return list(out.values())


def value(summary: dict[str, Any], metric: str) -> float | None:
    """A metric of one run; on several ranks partitioned roles and sites per parameter of the partition."""
    metrics = summary["metrics"]
    ratio = 1.0
    if (summary.get("world_size") or 1) > 1 and summary.get("partition_params"):
        ratio = summary["params"] / summary["partition_params"]
    if ratio != 1.0 and metric == "budget.live":
        roles = [value(summary, m) for m in metrics if m.startswith("role.")]
        return sum(r for r in roles if r is not None) if roles else None
    raw = metrics.get(metric)
    if raw is None and metric.startswith("role.") and "budget.live" in metrics:
        return 0.0  # the census ran and found no buffer of this role (e.g. h2d_staging before DeepSpeed 0.17.0)
    if raw is None:
        return None
    partitioned = metric.startswith("site.") or metric.removeprefix("role.") in partitioned_roles()
    return raw * ratio if partitioned else raw


def claim_samples(side: Side, claim: Claim) -> list[float]:
    out = []
    for summary in side.ok:
        total = 0.0
        for term in claim.metrics:
            v = value(summary, term.lstrip("-"))
            if v is None:
                break
            total += -v if term.startswith("-") else v
        else:
            out.append(total)
    return out


def _mean_sd(samples: list[float]) -> tuple[float | None, float | None]:
    return (fmean(samples) if samples else None), (stdev(samples) if len(samples) > 1 else None)


def _fmt(mean: float | None, sd: float | None = None, n: int | None = None) -> str:
    if mean is None:
        return "not run"
    text = f"{mean:.2f}" + (f" ± {sd:.2f}" if sd is not None else "")
    return text + (f" (n={n})" if n is not None else "")


def _versions(config: Config) -> str:
    side = config.sides.get(matrix.BASELINE) or next(iter(config.sides.values()), None)
    cell = config.first
    if side is None:
        return f"torch {cell.torch}, DeepSpeed {cell.deepspeed}"
    v = side.describe()["versions"] or {}
    build = "CPU build" if "+cpu" in str(v.get("torch")) else "CUDA build, run on the CPU"
    return f"torch {v.get('torch')} ({build}), DeepSpeed {v.get('deepspeed')}"


def claim_rows(claim: Claim, all_configs: list[Config]) -> tuple[list[list[str]], list[str]]:
    """Rows (configuration, versions, allocator, ranks, measured, verdict) and the verdicts of those run."""
    rows, seen = [], []
    for config in all_configs:
        cell = config.first
        side = config.sides.get(matrix.BASELINE)
        if claim.cpu_unmeasurable:
            verdict, measured = "cannot be measured on the CPU accelerator", "-"
        else:
            samples = claim_samples(side, claim) if side else []
            mean, sd = _mean_sd(samples)
            verdict = verdicts.claim(claim.claimed, mean, sd, stats.THRESHOLD)
            measured = _fmt(mean, sd, len(samples) if samples else None)
        if verdict != "not run":
            seen.append(f"{verdict}\t{config.label}")
        rows.append([config.label, _versions(config), cell.allocator, str(cell.ranks), measured, verdict])
    return rows, seen


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table and the blank line after it."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return [*out, *["| " + " | ".join(r) + " |" for r in rows], ""]


def pr_rows(all_configs: list[Config], patch: str) -> tuple[list[list[str]], list[list[str]], dict[str, Any]]:
    """Fire counts per part and the effect on each figure, per configuration where both sides ran."""
    fires, effects, data = [], [], {}
    for config in all_configs:
        a, b = config.sides.get(matrix.BASELINE), config.sides.get(patch)
        if a is None or b is None:
            continue
        counts: dict[str, list[int]] = {}
        for summary in b.ok:
            for i in summary["interventions"]:
                counts.setdefault(i["name"], []).append(i["count"])
        fires.append([config.label, *[", ".join(map(str, counts.get(p, []))) or "-" for p in PARTS]])
        data[config.label] = {}
        for metric, label in PR_FIGURES.items():
            sa, sb = a.samples(metric), b.samples(metric)
            if not sa or not sb:
                continue
            c = stats.compare(metric, sa, sb)
            half = stats.interval(sa, sb)
            p = c.p_decrease if c.delta < 0 else c.p_increase
            data[config.label][metric] = (c.delta, half)
            decides = any(fnmatch.fnmatchcase(metric, g) for g in GATED)
            effects.append([config.label, label + ("" if decides else " (raw RSS: informative)"),
                            _fmt(c.mean_a, c.sd_a), _fmt(c.mean_b, c.sd_b),
                            f"{c.delta:+.2f}", "-" if half is None else f"± {half:.2f}",
                            "-" if p is None else f"{p:.3f}", verdicts.mark(c.verdict, decides) or "same"])
            data[config.label].setdefault("verdicts", {})[metric] = c.verdict
    return fires, effects, data


def op_loads(all_configs: list[Config], runs: Path) -> list[list[str]]:
    """Per environment, the first run's time from process start to DeepSpeed's ops loaded, and later runs'."""
    rows = []
    for config in all_configs:
        for patch, cell in config.cells.items():
            group = runs / cell.id
            if not (group / storage.GROUP).is_file():
                continue
            for run in storage.GroupDir(group).runs():
                times = {e.get("name"): e["t"] for e in _events(run.path) if e.get("event") == "phase"}
                compiled = [e["op"] for e in _events(run.path) if e.get("event") == "compiling"]
                if "process_start" in times and "ops_loaded" in times and compiled:
                    m = run.manifest()
                    python = Path(m.get("python") or "")
                    where = python.parent.parent.name if host.is_rssprobe_env(str(python)) else "the project's venv"
                    rows.append([config.label, where, f"{patch}/{run.id}", ", ".join(compiled),
                                 f"{times['ops_loaded'] - times['process_start']:.0f}",
                                 "yes" if m.get("compiler_cache") else "no"])
    return rows


def _events(path: Path) -> list[dict[str, Any]]:
    out = []
    with open(path / layout.EVENTS, encoding="utf-8") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def claims_chart(plan_claims: list[Claim], all_configs: list[Config], path: Path) -> None:
    measurable = [c for c in plan_claims if not c.cpu_unmeasurable]
    fig, axes = plt.subplots(len(measurable), 1, figsize=(9, 1.3 * len(measurable) + 1), squeeze=False)
    for ax, claim in zip(axes[:, 0], measurable, strict=True):
        labels, means, sds = [], [], []
        for config in all_configs:
            side = config.sides.get(matrix.BASELINE)
            mean, sd = _mean_sd(claim_samples(side, claim) if side else [])
            if mean is not None:
                labels.append(config.label)
                means.append(mean)
                sds.append(sd or 0.0)
        ax.errorbar(means, range(len(means)), xerr=sds, fmt="o", color="tab:blue", label="measured")
        ax.axvline(claim.claimed, color="tab:red", linestyle="--", label=f"claimed {claim.claimed:g}")
        ax.set_xlim(min([*means, claim.claimed]) - 1, max([*means, claim.claimed]) + 1)
        ax.ticklabel_format(axis="x", useOffset=False)
        ax.set_yticks(range(len(labels)), labels, fontsize=6)
        ax.set_title(claim.what, fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.legend(fontsize=6, loc="lower right")
    axes[-1, 0].set_xlabel("bytes per parameter")
    fig.tight_layout()
    fig.subplots_adjust(left=0.3)  # room for the longest configuration label
    fig.savefig(path, dpi=110)
    plt.close(fig)


def pr_chart(data: dict[str, dict[str, Any]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(data) * 2 + 1.5))
    y = 0
    ticks, labels = [], []
    for config, effects in data.items():
        for k, metric in enumerate(("steady.rss", "budget.rss_after_trim_above_baseline")):
            if metric in effects:
                delta, half = effects[metric]
                ax.errorbar([delta], [y], xerr=[[half or 0.0], [half or 0.0]], fmt="os"[k],
                            color=("tab:orange", "tab:green")[k], label=PR_FIGURES[metric] if y < 2 else None)
                ticks.append(y)
                labels.append(f"{config}: {PR_FIGURES[metric]}")
                y += 1
    ax.axvline(0, color="grey", linewidth=0.8)
    ax.set_xlim(-LIMIT, LIMIT)  # an interval of 2 vs 2 runs is wider: the table has it
    ax.set_yticks(ticks, labels, fontsize=6)
    ax.set_xlabel(f"PR #8132 minus baseline, bytes per parameter, 95% interval (axis cut at ±{LIMIT:g})")
    ax.set_title("PR #8132's effect per configuration", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def wall_time(runs: Path, all_configs: list[Config]) -> tuple[float, float]:
    """(wall time of the plan's cells, including environment builds; sum of the runs' own wall times), s."""
    index = json.loads((runs / layout.MATRIX_INDEX).read_text())
    cells_s = sum(c.get("wall_s") or 0.0 for c in index.get("cells", []))
    runs_s = sum(sum(run_seconds(runs / cell.id)) for config in all_configs for cell in config.cells.values())
    return cells_s, runs_s


def machine(all_configs: list[Config]) -> str:
    side = next((s for c in all_configs for s in c.sides.values()), None)
    if side is None:
        return "no run"
    m = side.runs[0].manifest()
    h = m.get("host", {})
    v = side.describe()["versions"] or {}
    return (f"{h.get('machine')}, {h.get('cpu_model')}, {h.get('cpu_count')} cores, "
            f"{(h.get('mem_total_bytes') or 0) / 2**30:.0f} GiB, no GPU (DeepSpeed's {m.get('accelerator') or 'cpu'} "
            f"accelerator), {h.get('libc')}, kernel {h.get('kernel')}, "
            f"Python {v.get('python') or platform.python_version()}"
            f"; rssprobe {h.get('rssprobe_revision')}")


def paragraph(plan_claims: list[Claim], results: dict[str, list[str]], pr_data: dict[str, Any],
              fires: list[list[str]], n_configs: int) -> str:
    """The paragraph for #7693, from the verdicts and effects computed above."""
    def summary(claim: Claim) -> str:
        pairs = [item.split("\t") for item in results.get(claim.what, [])]
        words = [v for v, _label in pairs]
        if not words:
            return "not run"
        if len(set(words)) == 1:
            return words[0]
        common = max(set(words), key=words.count)
        rest = [f"{v} in {label}" for v, label in pairs if v != common]
        return f"{common} in {words.count(common)} of {len(words)} configurations; " + "; ".join(rest)
    lines = [f"* {c.what}, claimed {c.claimed:g} B/param: **{summary(c)}**" for c in plan_claims]
    base = pr_data.get("base", {})
    trim = base.get("budget.rss_after_trim_above_baseline")
    steady = base.get("steady.rss")
    fire = next((f for f in fires if f[0] == "base"), None)
    pr = []
    if fire:
        pr.append(f"on the base configuration float-scale fired [{fire[1]}] times per run and malloc-trim [{fire[2]}]")
    if steady:
        pr.append(f"steady RSS moved {steady[0]:+.2f} B/param" + (f" (± {steady[1]:.2f})" if steady[1] is not None
                                                                   else ""))
    if trim:
        pr.append(f"RSS after a final malloc_trim moved {trim[0]:+.2f}" + (f" (± {trim[1]:.2f})" if trim[1] is not None
                                                                           else ""))
    for metric in ("part.glibc_free_resident", "steady.rss"):
        moved = [f"{config} ({effects[metric][0]:+.2f})" for config, effects in pr_data.items()
                 if effects.get("verdicts", {}).get(metric) in ("improvement", "regression")]
        pr.append(f"{PR_FIGURES[metric]} changed significantly in "
                  + (", ".join(moved) if moved else "no configuration"))
    return ("Measured with rssprobe on DeepSpeed's CPU accelerator (no GPU), ZeRO-2 with the optimizer offloaded to "
            f"the CPU, across {n_configs} configurations (torch, DeepSpeed, allocator, ranks varied one at a time):\n\n"
            + "\n".join(lines) + "\n\nPR #8132: " + "; ".join(pr) + " (95% intervals; details below).")


def write(plan_path: Path, runs: Path, out: Path) -> Path:
    loaded = load(plan_path)
    all_configs = configs(loaded, runs)
    ran = [c for c in all_configs if c.sides]
    figdir = out.parent / out.stem
    figdir.mkdir(parents=True, exist_ok=True)
    settings = loaded.plan.plan
    params = next((s.describe()["params"] for c in ran for s in c.sides.values()), None)
    lines = ["# DeepSpeed #7693 and PR #8132: the verdict, configuration by configuration", "",
             f"Generated {storage.now_iso()} from the runs of `{plan_path}` in `{runs}`. Scenario `{settings.scenario}`"
             + (f" ({params:,} parameters)" if params else "") + "; ZeRO-2, optimizer offloaded to the CPU, bf16, "
             "clipping 1.0; every figure is bytes per parameter above each run's own pre-model baseline.", "",
             "## Commands", "", "```",
             "make verdict     # = the two lines below, after installing the allocator libraries and ccache",
             f"rssprobe matrix --plan {plan_path} --out {runs}",
             f"python -m rssprobe.reporters.verdict {plan_path} --runs {runs} --out {out}", "```", "",
             f"Machine: {machine(all_configs)}.", ""]
    cells_s, runs_s = wall_time(runs, all_configs) if (runs / layout.MATRIX_INDEX).is_file() else (0.0, 0.0)
    not_run = [c for c in all_configs if not c.sides]
    lines += [f"Wall time of the plan on this machine: **{cells_s / 60:.1f} min** for {len(ran)} configurations "
              f"(runs alone {runs_s / 60:.1f} min; the rest is building environments). ", ""]
    failed = [f"{c.label} [{patch}] {s['run']}: {s['status']} ({s.get('error')})" for c in all_configs
              for patch, side in c.sides.items() for s in side.failed]
    if failed:
        lines += ["Runs that did not end ok (kept out of every figure): " + "; ".join(failed) + ".", ""]
    if not_run:
        optional = any(c.first.optional for c in not_run)
        lines += ["Not run: " + ", ".join(f"{c.label}" + (" (optional)" if c.first.optional else "") for c in not_run)
                  + ". They run with `rssprobe matrix --plan " + str(plan_path) + f" --out {runs}"
                  + (" --optional" if optional else "") + "` (finished cells are reused), then the report command.", ""]
    lines += ["## #7693's claims, one table each", "",
              "Measured on the baseline runs of each configuration (mean ± sd over the repeats; with several "
              "ranks, rank 0's partitioned buffers and code sites per parameter of its partition). A claim is "
              f"reproduced when the mean lies within {stats.THRESHOLD} B/param of the claimed figure (or two standard "
              "deviations of the repeats, if wider).", ""]
    results: dict[str, list[str]] = {}
    for claim in loaded.plan.claims:
        rows, seen = claim_rows(claim, all_configs)
        results[claim.what] = seen
        lines += [f"### {claim.what}: claimed {claim.claimed:g} B/param", ""]
        if claim.cpu_unmeasurable:
            lines += [f"Cannot be measured on the CPU accelerator: {claim.cpu_unmeasurable}.", ""]
        else:
            terms = " ".join(f"- {t[1:]}" if t.startswith("-") else f"+ {t}" for t in claim.metrics)[2:]
            lines += [f"Measured as {terms}."
                      + (f" {claim.note}." if claim.note else ""), ""]
            lines += _table(["configuration", "versions", "allocator", "ranks", "measured B/param", "verdict"],
                            [r for r in rows if r[4] != "not run"])
    claims_chart(loaded.plan.claims, ran, figdir / "claims.png")
    lines += [f"![claims]({figdir.name}/claims.png)", ""]
    patch = next((p for p in settings.patches if p != matrix.BASELINE), None)
    fires, effects, pr_data = pr_rows(all_configs, patch) if patch else ([], [], {})
    lines += [f"## PR #8132 (`{patch}`)", "",
              "How often each part took effect per run (one number per run):", ""]
    lines += _table(["configuration", "float-scale", "malloc-trim"], fires)
    lines += ["Its effect against the baseline of the same configuration: difference of the means, 95% Welch "
              "interval, one-sided exact permutation p in the direction of the change, and the verdict "
              f"(a change counts if ≥ {stats.THRESHOLD} B/param and p ≤ {stats.ALPHA}; the figures that are not "
              "low-noise are marked informative, as the gate marks them). With several ranks these are rank 0's "
              "figures per parameter of the whole model.", ""]
    lines += _table(["configuration", "figure", "baseline", "pr8132", "difference", "95% interval", "p", "verdict"],
                    effects)
    if pr_data:
        pr_chart(pr_data, figdir / "pr8132.png")
        lines += [f"![pr8132]({figdir.name}/pr8132.png)", ""]
    lines += ["## For #7693", "", paragraph(loaded.plan.claims, results, pr_data, fires, len(ran)), ""]
    loads = op_loads(all_configs, runs)
    if loads:
        lines += ["## Compiling DeepSpeed's ops in a new environment", "",
                  "Each run that compiled ops: seconds from process start to DeepSpeed's ops loaded (compiling "
                  "cpu_adam and shm_comm, or taking them from the compiler cache), and whether ccache was behind "
                  "torch's extension builder (rssprobe/compilecache.py; only for rssprobe's environments). Runs "
                  "not listed found their ops built. The runs share the machine with other work, so seconds are "
                  "comparable within one sitting only.", ""]
        lines += _table(["configuration", "environment", "run", "ops compiled", "ops loaded after (s)", "ccache"],
                        loads)
    out.write_text("\n".join(lines))
    return out


@click.command()
@click.argument("plan_file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--runs", type=click.Path(path_type=Path), required=True, help="The plan's run directory.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("reports/issue7693-verdict.md"),
              show_default=True)
def main(plan_file: Path, runs: Path, out: Path) -> None:
    """Write the verdict report (markdown + PNGs beside it) from a plan's runs."""
    if not (runs / layout.MATRIX_INDEX).is_file():
        raise click.UsageError(f"{runs}: not a plan's run directory (no {layout.MATRIX_INDEX}); run "
                               f"`rssprobe matrix --plan {plan_file} --out {runs}` first")
    click.echo(f"wrote {write(plan_file, runs, out)}", err=True)


if __name__ == "__main__":
    main()



