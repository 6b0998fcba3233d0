"""Charts for `rssprobe report`: summaries and per-step tables -> PNG bytes.

Figures are built on `matplotlib.figure.Figure` with an explicit Agg canvas, so nothing here
touches pyplot's global state (safe in tests, threads and headless CI). Every y value is
bytes per parameter above the run's own pre-model baseline, the same convention as the
tables, so a chart and a table row can be read against each other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from io import BytesIO
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # matplotlib is imported where a chart is drawn: every command imports this module, few draw
    from matplotlib.figure import Figure

from ..analysis import metrics
from ..analysis.resultparts import Budget
from ..analysis.results import Comparison, RunSummary
from ..analysis.stats import THRESHOLD
from ..contract.glibc import IN_USE
from ..contract.glibc import glibc_in_use as in_use

Y_LABEL = "B/param above pre-model baseline"
# a y axis never spans less than this many thresholds (B/param): noise of 0.007 B/param must not look like a climb
MIN_SPAN_THRESHOLDS = 2
SIDE_COLORS = {"A": "#1f77b4", "B": "#ff7f0e"}  # runs of a comparison by side: A blue, B orange


@dataclass(frozen=True)
class Chart:
    """One rendered chart: `name` is the PNG file stem, `caption` says what is shown and what is left out."""

    name: str
    title: str
    png: bytes
    caption: str
    points: list[ChangePoint] | None = None  # what a chart of figures drew, for the page to carry as data


@dataclass(frozen=True)
class RunSeries:
    """What the per-step charts need from one run (built once, read by every measure)."""

    name: str  # legend entry: label + run id
    params: int | None
    baseline_rss: float | None
    baseline_mallinfo: dict[str, int] | None
    steps: pd.DataFrame
    side: str | None = None  # "A" or "B" in a report of two runs or groups: coloured and named by side
    side_name: str = ""  # the side's legend entry ("A: baseline (3 runs)")

    @classmethod
    def of(cls, summary: RunSummary, baseline_event: dict[str, Any] | None, steps: pd.DataFrame,
           side: str | None = None, side_name: str = "") -> RunSeries:
        """summary: `Summary.as_dict()`; baseline_event: `Summary.baseline` (the pre_model phase event)."""
        return cls(name=run_name(summary), params=summary.get("params"),
                   baseline_rss=summary.get("baseline_rss_bytes"),
                   baseline_mallinfo=(baseline_event or {}).get("mallinfo"), steps=steps, side=side,
                   side_name=side_name)


def run_name(summary: Mapping[str, Any]) -> str:
    """Legend text; the id is needed because several runs often share a label."""
    return f"{summary.get('label') or '?'} ({summary['run']})"


def _column(steps: pd.DataFrame, name: str) -> np.ndarray:
    """A column as float64 with NaN for missing values (pandas' nullable NA does not plot)."""
    if name not in steps.columns:
        return np.full(len(steps), np.nan)
    return steps[name].to_numpy(dtype="float64", na_value=np.nan)


# run -> bytes above baseline per step, or None and why not
Values = Callable[[RunSeries], tuple[np.ndarray | None, str | None]]


def _glibc(getter: Callable[[pd.DataFrame, dict[str, int]], tuple[np.ndarray, float]]) -> Values:
    """glibc figures above the baseline's own mallinfo2 (not above RSS: different counters)."""

    def values(run: RunSeries) -> tuple[np.ndarray | None, str | None]:
        if run.baseline_mallinfo is None:
            return None, "glibc mallinfo2 not available"
        raw, base = getter(run.steps, run.baseline_mallinfo)
        if len(raw) and np.isnan(raw).all():
            return None, "no glibc figures in its steps"
        return raw - base, None
    return values


def _rss_like(column: str) -> Values:
    def values(run: RunSeries) -> tuple[np.ndarray | None, str | None]:
        return _column(run.steps, column) - (run.baseline_rss or 0.0), None
    return values


# measure -> (chart title, values)
MEASURES: dict[str, tuple[str, Values]] = {
    "rss": ("RSS at the end of each step", _rss_like("rss")),
    "peak": ("Exact peak RSS within each step", _rss_like("peak")),
    "glibc_in_use": ("glibc in use (uordblks + hblkhd) at the end of each step", _glibc(
        lambda f, b: (in_use({k: _column(f, f"glibc_{k}") for k in IN_USE}), in_use(b)))),
    "glibc_free": ("glibc free-retained (fordblks) at the end of each step", _glibc(
        lambda f, b: (_column(f, "glibc_fordblks"), b["fordblks"]))),
}


def per_param(run: RunSeries, measure: str) -> tuple[np.ndarray, np.ndarray] | str:
    """(steps, bytes/param above baseline) for one run, or the reason it cannot be plotted."""
    if not run.params:
        return "no parameter count (failed before the model was built)"
    if run.baseline_rss is None:
        return "no pre-model baseline"
    above, why = MEASURES[measure][1](run)
    if above is None:
        return why or "not measured"
    if not len(above):
        return "no finished steps"
    return _column(run.steps, "step"), above / run.params


def _png(fig: Figure) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})  # no version stamp: same input, same bytes
    return buf.getvalue()


def _figure(n_entries: int) -> Figure:
    """Wider when the legend (placed outside the axes so it never hides a line) has many entries."""
    from matplotlib.figure import Figure

    return Figure(figsize=(9.5 if n_entries > 1 else 8.0, 4.6), layout="constrained")


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")


def min_span(ax: Any, span: float) -> None:
    """Widen the y axis about its middle to at least `span` (a threshold's worth of B/param)."""
    low, high = ax.get_ylim()
    if high - low < span:
        middle = (low + high) / 2
        ax.set_ylim(middle - span / 2, middle + span / 2)


def measure_chart(runs: list[RunSeries], measure: str, threshold: float = THRESHOLD) -> Chart:
    """One line per run for one measure, x = step; the runs of a comparison coloured and named by side."""
    title = MEASURES[measure][0]
    by_side = any(run.side for run in runs)
    fig = _figure(2 if by_side else len(runs))
    ax = fig.subplots()
    skipped = []
    drawn = 0
    named: set[str] = set()
    for run in runs:
        got = per_param(run, measure)
        if isinstance(got, str):
            skipped.append(f"{run.name}: {got}")
            continue
        steps, values = got
        style: dict[str, Any] = {"label": run.name}
        if run.side:
            style = {"color": SIDE_COLORS.get(run.side, "0.4"), "alpha": 0.8,
                     "label": None if run.side in named else run.side_name or run.side}
            named.add(run.side)
        ax.plot(steps, values, marker="o", markersize=4, linewidth=1.6, **style)
        drawn += 1
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(Y_LABEL)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.ticklabel_format(axis="y", useOffset=False)  # an offset like "+3.84e1" is easy to misread
    ax.grid(True, alpha=0.3)
    if drawn:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", title="side" if by_side else "run")
        min_span(ax, MIN_SPAN_THRESHOLDS * threshold)
    else:
        _empty(ax, "no run has this measure")
    caption = (f"{title}, bytes per parameter above each run's pre-model baseline, one line per run"
               + (", coloured by side." if by_side else ".")
               + f" The y axis spans at least {MIN_SPAN_THRESHOLDS * threshold:g} B/param (twice the "
               "threshold a change must pass), so noise does not look like a trend.")
    if measure.startswith("glibc"):
        caption += " The baseline is the run's own mallinfo2 at pre_model."
    if skipped:
        caption += " Not shown: " + "; ".join(skipped) + "."
    return Chart(measure, title, _png(fig), caption)


UNEXPLAINED = "unexplained (RSS - live)"
NOT_ATTRIBUTED = "not attributed"


def budget_chart(summaries: list[RunSummary]) -> Chart:
    """The 'end' budget as one stacked bar per run: roles, then the other named parts of RSS
    (memory-map partition), then what is not attributed (or, for runs without a partition,
    the unexplained rest).

    Positive and negative segments stack away from zero separately, so a negative segment
    (less resident than at the baseline) cannot hide a positive one.
    """
    title = "RSS above baseline at the end of the run, by part"
    with_budget = [s for s in summaries if s.get("budget")]
    budgets = [b for s in with_budget if (b := s["budget"])]
    skipped = [f"{run_name(s)}: no live-buffer census at 'end'" for s in summaries if not s.get("budget")]
    roles: list[str] = []
    parts: list[str] = []
    for b in budgets:
        roles += [r for r in b["roles"] if r not in roles]
        parts += [p for p in b.get("parts", {}) if p not in parts and p != "live tensors"]
    rest = [NOT_ATTRIBUTED] if parts else [UNEXPLAINED]
    def largest(seg: str) -> float:
        return max((abs(v or 0.0) for v in _segment(seg, roles, budgets)), default=0.0)

    # parts that never reach SMALL_PART B/param are drawn as one segment: the legend names what matters
    small = [p for p in parts if ZERO_SEGMENT <= largest(p) < SMALL_PART]
    segments = [seg for seg in (*roles, *parts, *rest) if largest(seg) >= (SMALL_PART if seg in parts
                                                                              else ZERO_SEGMENT)]
    if small:
        segments.insert(len([seg for seg in segments if seg not in rest]), SMALL_PARTS)
    dropped = len(roles) + len(parts) + len(rest) - len(segments) + (1 if small else 0) - len(small)
    fig = _figure(len(segments))
    ax = fig.subplots()
    names = [run_name(s) for s in with_budget]
    x = np.arange(len(with_budget))
    pos, neg = np.zeros(len(x)), np.zeros(len(x))
    colors = _colors(len([seg for seg in segments if seg not in rest]))
    for i, segment in enumerate(segments):
        style: dict[str, Any] = {"color": colors[i]} if segment not in rest else \
            {"color": "0.8", "hatch": "//", "edgecolor": "0.45"}
        values = _segment(segment, roles, budgets, small)
        v = np.nan_to_num(np.array([np.nan if val is None else val for val in values], dtype="float64"))
        bottom = np.where(v >= 0, pos, neg)
        ax.bar(x, v, bottom=bottom, width=0.6, label=segment, linewidth=0.5, **style)
        pos += np.where(v >= 0, v, 0)
        neg += np.where(v < 0, v, 0)
    above = np.array([np.nan if a is None else a for a in
                      (b.get("rss_above_baseline_bytes_per_param") for b in budgets)], dtype="float64")
    if with_budget:
        ax.plot(x, above, linestyle="none", marker="_", markersize=40, markeredgewidth=2.5, color="black",
                zorder=3, label="RSS above baseline")
        for xi, a, top in zip(x, above, pos, strict=True):
            if not np.isnan(a):  # above its bar and its tick, whichever is higher, so no segment hides it
                ax.annotate(f"{a:.2f}", (xi, max(a, top)), xytext=(0, 4), textcoords="offset points", ha="center",
                            va="bottom", fontsize="small")
        handles, labels = ax.get_legend_handles_labels()
        # top segment first, as the bars read from top to bottom
        order = [labels.index(name) for name in ("RSS above baseline", *reversed(segments)) if name in labels]
        ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), fontsize="small", title="segment", markerscale=0.4)
        # room above the tallest bar for its label, below the title (autoscaling left the labels on the title)
        high = max(float(pos.max()), float(np.nanmax(above)) if not np.all(np.isnan(above)) else 0.0)
        low = min(float(neg.min()), 0.0)
        span = (high - low) or 1.0
        ax.set_ylim(low - 0.05 * span, high + 0.15 * span)
    else:
        _empty(ax, "no run has a live-buffer census")
    ax.axhline(0, color="0.3", linewidth=0.8)
    ax.set_xticks(x, names, rotation=20 if len(names) > 3 else 0, ha="right" if len(names) > 3 else "center")
    ax.set_title(title, pad=10)
    ax.set_ylabel(Y_LABEL)
    ax.grid(True, axis="y", alpha=0.3)
    caption = (f"{title}: resident bytes per parameter of each buffer role (DeepSpeed's own attributes), "
               "then the rest of RSS named by memory mapping (hatched: not attributed); the black tick is the "
               "RSS above the baseline.")
    if small:
        caption += f" {SMALL_PARTS}: " + ", ".join(small) + "."
    if dropped:
        caption += f" {dropped} parts below {ZERO_SEGMENT} B/param in every run are left out."
    if skipped:
        caption += " Not shown: " + "; ".join(skipped) + "."
    return Chart("budget", title, _png(fig), caption)


ZERO_SEGMENT = 0.005  # B/param: a part below this in every bar is not drawn nor listed (it rounds to 0.00)
SMALL_PART = 0.1  # B/param: parts below this in every bar are drawn together as SMALL_PARTS
SMALL_PARTS = "other parts (each < 0.1 B/param)"


def _segment(segment: str, roles: list[str], budgets: list[Budget],
             small: list[str] | None = None) -> list[float | None]:
    """One segment's value in each run's 'end' budget (SMALL_PARTS: the sum of the `small` parts)."""
    if segment == SMALL_PARTS:
        sums = [sum(v or 0.0 for v in values) for values in zip(*(_segment(p, roles, budgets)
                                                                  for p in small or []), strict=True)]
        return list(sums)
    if segment == UNEXPLAINED:
        return [b.get("unexplained_bytes_per_param") for b in budgets]
    if segment == NOT_ATTRIBUTED:
        return [b.get("not_attributed_bytes_per_param") for b in budgets]
    if segment in roles:
        return [b["roles"].get(segment) for b in budgets]
    return [(b.get("parts", {}).get(segment) or {}).get("bytes_per_param") for b in budgets]


def _colors(n: int) -> list[Any]:
    """Distinct role colours, the same role the same colour in every bar."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


# A size sweep's headline figures, plotted against model size with their fitted lines.
FIT_FIGURES = metrics.shown(metrics.FIT_CHART)  # the registry says which are charted (Metric.shown)


@dataclass(frozen=True)
class SweepSeries:
    """One size sweep for the fit charts: name, (params, bytes) points and the fit of each figure."""

    name: str
    points: dict[str, list[tuple[int, float]]]
    fits: dict[str, Any]  # figure -> analysis.fit.Fit


def _pm(interval: float | None, scale: float = 1.0) -> str:
    return " (no interval)" if interval is None else f" ± {interval / scale:.2f}"


def fit_chart(figure: str, sweeps: list[SweepSeries]) -> Chart:
    """Bytes above the baseline against parameters, one colour per sweep: the runs and the fitted line."""
    title = f"{figure} against model size"
    fig = _figure(len(sweeps))
    ax = fig.subplots()
    notes = []
    for i, sweep in enumerate(sweeps):
        color = _colors(max(len(sweeps), 1))[i]
        pts = sweep.points.get(figure, [])
        f = sweep.fits.get(figure)
        if not pts or f is None:
            notes.append(f"{sweep.name}: not fitted (fewer than 2 sizes measured)")
            continue
        x = np.array([p for p, _v in pts], dtype="float64")
        ax.plot(x / 1e6, np.array([v for _p, v in pts]) / 2**20, linestyle="none", marker="o", color=color)
        line = np.linspace(0, x.max() * 1.05, 50)
        ax.plot(line / 1e6, (f.fixed_bytes + f.slope_bytes_per_param * line) / 2**20, color=color,
                label=f"{sweep.name}: {f.slope_bytes_per_param:.2f}{_pm(f.slope_interval)} B/param, fixed "
                      f"{f.fixed_bytes / 2**20:.1f}{_pm(f.fixed_interval, 2**20)} MiB")
    ax.set_title(title)
    ax.set_xlabel("parameters (M)")
    ax.set_ylabel("MiB above pre-model baseline")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize="small", title="fit: slope, fixed (95%)")
    else:
        _empty(ax, "no sweep has this figure at 2 sizes or more")
    caption = (f"{title}: each point one finished run, the line bytes = fixed + slope x params by least squares, "
               "drawn from 0 parameters so the fixed part is where it meets the axis.")
    if notes:
        caption += " Not shown: " + "; ".join(notes) + "."
    return Chart(f"fit-{figure.replace('.', '-')}", title, _png(fig), caption)


CLAIM_COLORS = {"lower": "#2e7d32", "higher": "#c62828", "unchanged": "#123a6b", "unconfirmed": "#c77800",
                "within noise": "0.55"}


class ChangePoint(TypedDict):
    """One point of the change chart, as the page carries it (data-points)."""

    metric: str
    delta: float
    low: float | None
    high: float | None
    claim: str
    gated: bool


def change_points(r: Comparison) -> list[ChangePoint]:
    """What the change chart draws, one point per figure: exactly the lead's effects (analysis/effects.py), so
    the chart's interval is the table's and the sentence's (tests/test_pr_verdict.py checks it)."""
    return [{"metric": e["metric"], "delta": e["delta"], "low": e["low"], "high": e["high"], "claim": e["claim"],
             "gated": e["gated"]} for e in (r.get("lead") or {}).get("effects") or []]


def comparison_chart(r: Comparison) -> Chart:
    """B - A for the lead's figures of a comparison (analysis.compare.Result.as_dict()), each with the simultaneous
    interval the lead and the key table read, the band a change must leave (the threshold) shaded."""
    from ..analysis import answers

    lead = r.get("lead") or {}
    title = f"B - A: each figure's change, with its simultaneous {100 * (1 - lead.get('alpha', 0.05)):.0f}% interval"
    points = change_points(r)
    threshold = r["threshold_bytes_per_param"]
    fig = _figure(1)
    ax = fig.subplots()
    ax.axvspan(-threshold, threshold, color="#d8f0d8", label=f"within the threshold (±{threshold:g} B/param)")
    ax.axvline(0, color="0.3", linewidth=0.8)
    y = np.arange(len(points))[::-1]
    for yi, p in zip(y, points, strict=True):
        color = CLAIM_COLORS.get(p["claim"], "0.55")
        low = p["delta"] if p["low"] is None else p["low"]
        high = p["delta"] if p["high"] is None else p["high"]
        ax.errorbar(p["delta"], yi, xerr=[[p["delta"] - low], [high - p["delta"]]], fmt="o", color=color, capsize=4,
                    markersize=6, linewidth=1.6)
        ax.annotate(f"{p['delta']:+.2f} ({p['claim']})", (p["delta"], yi), xytext=(0, 7), textcoords="offset points",
                    ha="center", fontsize="small", color=color)
    ax.set_yticks(y, [answers.LEAD_WORDS.get(p["metric"], p["metric"]) + (" (gated)" if p["gated"] else "")
                      for p in points])
    for tick, p in zip(ax.get_yticklabels(), points, strict=True):
        tick.set_fontweight("bold" if p["gated"] else "normal")
    ax.set_xlabel(f"B - A, bytes per parameter (A = {r['a']['label']}, B = {r['b']['label']})")
    low, high = ax.get_xlim()
    span = max(high - low, 4 * threshold)
    middle = (low + high) / 2
    ax.set_xlim(middle - span / 2, middle + span / 2)
    ax.set_ylim(-0.7, len(points) - 0.3)
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    caption = (f"{title}: the change of each figure's mean over the runs (B minus A) with its Welch t interval, "
               f"Bonferroni over the {lead.get('m', 0)} figures that vary ({r['a']['ok']} vs {r['b']['ok']} runs): "
               "the interval and the claim beside each point are the key table's and the answer's. Shaded: smaller "
               f"than the {threshold:g} B/param a change must pass. Green lower, red higher, blue unchanged, orange "
               "beyond the threshold but unconfirmed by the corrected test, grey within noise; gated figures (bold) "
               "decide the gate.")
    return Chart("change", title, _png(fig), caption, points)


def charts(runs: list[RunSeries], summaries: list[RunSummary], comparison: Comparison | None = None) -> list[Chart]:
    """Every chart of the report, in page order: the comparison first when there is one."""
    lead = [comparison_chart(comparison)] if comparison and change_points(comparison) else []
    return [*lead, *(measure_chart(runs, m) for m in MEASURES), budget_chart(summaries)]
