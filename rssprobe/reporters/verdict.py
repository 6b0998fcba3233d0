"""The #7693 verdict report: markdown and two PNGs from a plan's runs against its claims (the numbers:
analysis/claims.py).

    rssprobe verdict PLAN --runs DIR --out reports/issue7693-verdict.md   (make verdict)

  - one table per claim: the claimed B/param, what each configuration measured (baseline runs,
    mean ± sd over the repeats), and the verdict (verdicts.claim);
  - PR #8132: how often each part fired per run, and its effect on each figure against the
    baseline of the same configuration (difference, one-sided p, 95% Welch interval, verdict);
  - the first run of each environment: how long loading DeepSpeed's ops took (compiling them, or
    not), and whether the compiler cache served it;
  - the commands, the machine, the plan's wall time, and what was not run.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from .. import verdicts
from ..analysis import metrics, stats
from ..analysis.claims import BASELINE, ClaimRow, ClaimsReport, ClaimVersions, Config, PrEffect, claim_samples
from ..analysis.metrics import label

LIMIT = 6.0  # B/param either side of 0 in the PR #8132 chart
CHARTED = metrics.shown(metrics.VERDICT_CHART)  # the registry says which are charted (Metric.shown)


def _fmt(mean: float | None, sd: float | None = None, n: int | None = None) -> str:
    if mean is None:
        return "not run"
    text = f"{mean:.2f}" + (f" ± {sd:.2f}" if sd is not None else "")
    return text + (f" (n={n})" if n is not None else "")


def _versions(v: ClaimVersions) -> str:
    build = f" ({v['build']})" if v.get("build") else ""
    return f"torch {v.get('torch')}{build}, DeepSpeed {v.get('deepspeed')}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table and the blank line after it."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return [*out, *["| " + " | ".join(r) + " |" for r in rows], ""]


def claims_chart(report: ClaimsReport) -> bytes:
    measurable = report.measurable
    fig, axes = plt.subplots(len(measurable), 1, figsize=(9, 1.3 * len(measurable) + 1), squeeze=False)
    for ax, claim in zip(axes[:, 0], measurable, strict=True):
        labels, means, sds = [], [], []
        for config in report.ran:
            side = config.sides.get(BASELINE)
            mean, sd = stats.mean_sd(claim_samples(side, claim) if side else [])
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
    return _png(fig)


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def _charted(effects: list[PrEffect]) -> dict[str, dict[str, tuple[float, float | None]]]:
    return {e["configuration"]: {f["metric"]: (f["comparison"]["delta"], f["interval"]) for f in e["figures"]
                                 if f["metric"] in CHARTED} for e in effects}


def pr_chart(effects: list[PrEffect]) -> bytes:
    data = _charted(effects)
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(data) * 2 + 1.5))
    y = 0
    ticks, labels = [], []
    for config, figures in data.items():
        for k, metric in enumerate(CHARTED):
            if metric in figures:
                delta, half = figures[metric]
                ax.errorbar([delta], [y], xerr=[[half or 0.0], [half or 0.0]], fmt="os"[k],
                            color=("tab:orange", "tab:green")[k], label=label(metric) if y < 2 else None)
                ticks.append(y)
                labels.append(f"{config}: {label(metric)}")
                y += 1
    ax.axvline(0, color="grey", linewidth=0.8)
    ax.set_xlim(-LIMIT, LIMIT)  # an interval of 2 vs 2 runs is wider: the table has it
    ax.set_yticks(ticks, labels, fontsize=6)
    ax.set_xlabel(f"PR #8132 minus baseline, bytes per parameter, 95% interval (axis cut at ±{LIMIT:g})")
    ax.set_title("PR #8132's effect per configuration", fontsize=9)
    fig.tight_layout()
    return _png(fig)


def _summary(rows: list[ClaimRow]) -> str:
    pairs = [(r["verdict"], r["configuration"]) for r in rows if r["verdict"] != verdicts.NOT_RUN]
    words = [v for v, _label in pairs]
    if not words:
        return verdicts.NOT_RUN
    if len(set(words)) == 1:
        return words[0]
    common = max(set(words), key=words.count)
    rest = [f"{v} in {where}" for v, where in pairs if v != common]
    return f"{common} in {words.count(common)} of {len(words)} configurations; " + "; ".join(rest)


def paragraph(report: ClaimsReport) -> str:
    """The paragraph for #7693, from the verdicts and effects computed."""
    lines = [f"* {c.what}, claimed {c.claimed:g} B/param: **{_summary(rows)}**" for c, rows in report.claims]
    base = next((e for e in report.effects if e["configuration"] == "base"), None)
    figures = {f["metric"]: f for f in base["figures"]} if base else {}
    pr = []
    if base:
        fires = [", ".join(map(str, base["fires"][p])) or "-" for p in ("pr8132.float-scale", "pr8132.malloc-trim")]
        pr.append(f"on the base configuration float-scale fired [{fires[0]}] times per run and malloc-trim "
                  f"[{fires[1]}]")
    said = {"steady.rss": "steady RSS moved", metrics.TRIMMED: "RSS after a final malloc_trim moved"}
    for metric, words in said.items():
        if metric in figures:
            f = figures[metric]
            pr.append(f"{words} {f['comparison']['delta']:+.2f}" + (" B/param" if metric == "steady.rss" else "")
                      + (f" (± {f['interval']:.2f})" if f["interval"] is not None else ""))
    for metric in metrics.shown(metrics.VERDICT_MOVED):
        moved = [f"{e['configuration']} ({f['comparison']['delta']:+.2f})" for e in report.effects for f in e["figures"]
                 if f["metric"] == metric and f["comparison"]["verdict"] in verdicts.MOVED]
        pr.append(f"{label(metric)} changed significantly in " + (", ".join(moved) if moved else "no configuration"))
    return ("Measured with rssprobe on DeepSpeed's CPU accelerator (no GPU), ZeRO-2 with the optimizer offloaded to "
            f"the CPU, across {len(report.ran)} configurations (torch, DeepSpeed, allocator, ranks varied one at a "
            "time):\n\n" + "\n".join(lines) + "\n\nPR #8132: " + "; ".join(pr) + " (95% intervals; details below).")


def unmeasured(report: ClaimsReport) -> str:
    """The answer when no claim of the plan can be judged here (the page's first sentence, the command's line)."""
    count = len(report.claims)
    why = (f"its {count} claim{'s' if count != 1 else ''} cannot be measured on the CPU accelerator (each says "
           "why)") if count else "it declares no claim ([[claims]] in the plan)"
    return f"No claim of {report.plan_path} is judged: {why}."


def render(report: ClaimsReport, out: Path, generated: str) -> dict[Path, str | bytes]:
    """The page as files (the markdown at `out`, its charts in a folder named after it); the command writes them."""
    plan_path, runs, settings = report.plan_path, report.runs, report.loaded.plan.plan
    figdir = out.parent / out.stem
    files: dict[Path, str | bytes] = {}
    params = report.params
    lines = ["# DeepSpeed #7693 and PR #8132: the verdict, configuration by configuration", ""]
    if not report.measurable:
        lines += [f"**{unmeasured(report)}**", ""]
    lines += [f"Generated {generated} from the runs of `{plan_path}` in `{runs}`. Scenario `{settings.scenario}`"
             + (f" ({params:,} parameters)" if params else "") + "; ZeRO-2, optimizer offloaded to the CPU, bf16, "
             "clipping 1.0; every figure is bytes per parameter above each run's own pre-model baseline.", "",
             "The answer on one page, with CUDA's pinned-memory rounding and the fixes compared: "
             "[issue7693-answer.md](issue7693-answer.md); this report is its evidence on the CPU, claim by claim.", "",
             "## Commands", "", "```",
             "make verdict     # = the two lines below, after installing the allocator libraries and ccache",
             f"rssprobe matrix --plan {plan_path} --out {runs}",
             f"rssprobe verdict {plan_path} --runs {runs} --out {out}", "```", "",
             f"Machine: {report.machine}.", ""]
    cells_s, runs_s = report.wall
    not_run: list[Config] = [c for c in report.configs if not c.sides]
    lines += [f"Wall time of the plan on this machine: **{cells_s / 60:.1f} min** for {len(report.ran)} "
              f"configurations (runs alone {runs_s / 60:.1f} min; the rest is building environments). ", ""]
    if report.failed:
        lines += ["Runs that did not end ok (kept out of every figure): " + "; ".join(report.failed) + ".", ""]
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
    for claim, rows in report.claims:
        lines += [f"### {claim.what}: claimed {claim.claimed:g} B/param", ""]
        if claim.cpu_unmeasurable:
            lines += [f"Cannot be measured on the CPU accelerator: {claim.cpu_unmeasurable}.", ""]
            continue
        terms = " ".join(f"- {t[1:]}" if t.startswith("-") else f"+ {t}" for t in claim.metrics)[2:]
        lines += [f"Measured as {terms}." + (f" {claim.note}." if claim.note else ""), ""]
        lines += _table(["configuration", "versions", "allocator", "ranks", "measured B/param", "verdict"],
                        [[r["configuration"], _versions(r["versions"]), r["allocator"], str(r["ranks"]),
                          _fmt(r["mean"], r["sd"], r["n"]), r["verdict"]] for r in rows if r["mean"] is not None])
    if report.measurable:
        files[figdir / "claims.png"] = claims_chart(report)
        lines += [f"![claims]({figdir.name}/claims.png)", ""]
    lines += [f"## PR #8132 (`{report.patch}`)", "",
              "How often each part took effect per run (one number per run):", ""]
    lines += _table(["configuration", "float-scale", "malloc-trim"],
                    [[e["configuration"], *[", ".join(map(str, n)) or "-" for n in e["fires"].values()]]
                     for e in report.effects])
    lines += ["Its effect against the baseline of the same configuration: difference of the means, 95% Welch "
              "interval, one-sided exact permutation p in the direction of the change, and the verdict "
              f"(a change counts if ≥ {stats.THRESHOLD} B/param and p ≤ {stats.ALPHA}; the figures that are not "
              "low-noise are marked informative, as the gate marks them). With several ranks these are rank 0's "
              "figures per parameter of the whole model.", ""]
    lines += _table(["configuration", "figure", "baseline", "pr8132", "difference", "95% interval", "p", "verdict"],
                    [[e["configuration"], f["label"] + ("" if f["gated"] else " (raw RSS: informative)"),
                      _fmt(f["comparison"]["mean_a"], f["comparison"]["sd_a"]),
                      _fmt(f["comparison"]["mean_b"], f["comparison"]["sd_b"]), f"{f['comparison']['delta']:+.2f}",
                      "-" if f["interval"] is None else f"± {f['interval']:.2f}",
                      "-" if f["p"] is None else f"{f['p']:.3f}",
                      verdicts.mark(f["comparison"]["verdict"], f["gated"]) or "same"]
                     for e in report.effects for f in e["figures"]])
    if report.effects:
        files[figdir / "pr8132.png"] = pr_chart(report.effects)
        lines += [f"![pr8132]({figdir.name}/pr8132.png)", ""]
    lines += ["## For #7693", "", paragraph(report), ""]
    if report.op_loads:
        lines += ["## Compiling DeepSpeed's ops in a new environment", "",
                  "Each run that compiled ops: seconds from process start to DeepSpeed's ops loaded (compiling "
                  "cpu_adam and shm_comm, or taking them from the compiler cache), and whether ccache was behind "
                  "torch's extension builder (rssprobe/run/compilecache.py; only for rssprobe's environments). Runs "
                  "not listed found their ops built. The runs share the machine with other work, so seconds are "
                  "comparable within one sitting only.", ""]
        lines += _table(["configuration", "environment", "run", "ops compiled", "ops loaded after (s)", "ccache"],
                        [[r["configuration"], r["environment"], r["run"], ", ".join(r["ops"]), f"{r['seconds']:.0f}",
                          "yes" if r["ccache"] else "no"] for r in report.op_loads])
    return {out: "\n".join(lines), **files}
