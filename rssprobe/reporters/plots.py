"""Charts for `rssprobe report`: summaries and per-step tables -> PNG bytes.

Figures are built on `matplotlib.figure.Figure` with an explicit Agg canvas, so nothing here
touches pyplot's global state (safe in tests, threads and headless CI). Every y value is
bytes per parameter above the run's own pre-model baseline, the same convention as the
tables, so a chart and a table row can be read against each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from io import BytesIO
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # matplotlib is imported where a chart is drawn: every command imports this module, few draw
    from matplotlib.figure import Figure

from ..contract import IN_USE
from ..contract import glibc_in_use as in_use

Y_LABEL = "B/param above pre-model baseline"


@dataclass(frozen=True)
class Chart:
    """One rendered chart: `name` is the PNG file stem, `caption` says what is shown and what is left out."""

    name: str
    title: str
    png: bytes
    caption: str


@dataclass(frozen=True)
class RunSeries:
    """What the per-step charts need from one run (built once, read by every measure)."""

    name: str  # legend entry: label + run id
    params: int | None
    baseline_rss: float | None
    baseline_mallinfo: dict[str, int] | None
    steps: pd.DataFrame

    @classmethod
    def of(cls, summary: dict[str, Any], baseline_event: dict[str, Any] | None, steps: pd.DataFrame) -> RunSeries:
        """summary: `Summary.as_dict()`; baseline_event: `Summary.baseline` (the pre_model phase event)."""
        return cls(name=run_name(summary), params=summary.get("params"),
                   baseline_rss=summary.get("baseline_rss_bytes"),
                   baseline_mallinfo=(baseline_event or {}).get("mallinfo"), steps=steps)


def run_name(summary: dict[str, Any]) -> str:
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


def measure_chart(runs: list[RunSeries], measure: str) -> Chart:
    """One line per run for one measure, x = step."""
    title = MEASURES[measure][0]
    fig = _figure(len(runs))
    ax = fig.subplots()
    skipped = []
    drawn = 0
    for run in runs:
        got = per_param(run, measure)
        if isinstance(got, str):
            skipped.append(f"{run.name}: {got}")
            continue
        steps, values = got
        ax.plot(steps, values, marker="o", markersize=4, linewidth=1.6, label=run.name)
        drawn += 1
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(Y_LABEL)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.ticklabel_format(axis="y", useOffset=False)  # an offset like "+3.84e1" is easy to misread
    ax.grid(True, alpha=0.3)
    if drawn:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", title="run")
    else:
        _empty(ax, "no run has this measure")
    caption = f"{title}, bytes per parameter above each run's pre-model baseline, one line per run."
    if measure.startswith("glibc"):
        caption += " The baseline is the run's own mallinfo2 at pre_model."
    if skipped:
        caption += " Not shown: " + "; ".join(skipped) + "."
    return Chart(measure, title, _png(fig), caption)


UNEXPLAINED = "unexplained (RSS - live)"
NOT_ATTRIBUTED = "not attributed"


def budget_chart(summaries: list[dict[str, Any]]) -> Chart:
    """The 'end' budget as one stacked bar per run: roles, then the other named parts of RSS
    (memory-map partition), then what is not attributed (or, for runs without a partition,
    the unexplained rest).

    Positive and negative segments stack away from zero separately, so a negative segment
    (less resident than at the baseline) cannot hide a positive one.
    """
    title = "RSS above baseline at the end of the run, by part"
    with_budget = [s for s in summaries if s.get("budget")]
    skipped = [f"{run_name(s)}: no live-buffer census at 'end'" for s in summaries if not s.get("budget")]
    roles: list[str] = []
    parts: list[str] = []
    for s in with_budget:
        roles += [r for r in s["budget"]["roles"] if r not in roles]
        parts += [p for p in s["budget"].get("parts", {}) if p not in parts and p != "live tensors"]
    rest = [NOT_ATTRIBUTED] if parts else [UNEXPLAINED]
    segments = [*roles, *parts, *rest]
    fig = _figure(len(segments))
    ax = fig.subplots()
    names = [run_name(s) for s in with_budget]
    x = np.arange(len(with_budget))
    pos, neg = np.zeros(len(x)), np.zeros(len(x))
    colors = _colors(len(roles) + len(parts))
    for i, segment in enumerate(segments):
        style: dict[str, Any] = {"color": colors[i]} if i < len(colors) else \
            {"color": "0.8", "hatch": "//", "edgecolor": "0.45"}
        if segment == UNEXPLAINED:
            values = [s["budget"].get("unexplained_bytes_per_param") for s in with_budget]
        elif segment == NOT_ATTRIBUTED:
            values = [s["budget"].get("not_attributed_bytes_per_param") for s in with_budget]
        elif segment in roles:
            values = [s["budget"]["roles"].get(segment) for s in with_budget]
        else:
            values = [(s["budget"].get("parts", {}).get(segment) or {}).get("bytes_per_param") for s in with_budget]
        v = np.nan_to_num(np.array([np.nan if val is None else val for val in values], dtype="float64"))
        bottom = np.where(v >= 0, pos, neg)
        ax.bar(x, v, bottom=bottom, width=0.6, label=segment, linewidth=0.5, **style)
        pos += np.where(v >= 0, v, 0)
        neg += np.where(v < 0, v, 0)
    above = np.array([np.nan if a is None else a for a in
                      (s["budget"].get("rss_above_baseline_bytes_per_param") for s in with_budget)], dtype="float64")
    if with_budget:
        ax.plot(x, above, linestyle="none", marker="_", markersize=40, markeredgewidth=2.5, color="black",
                zorder=3, label="RSS above baseline")
        for xi, a, top in zip(x, above, pos, strict=True):
            if not np.isnan(a):  # above its bar and its tick, whichever is higher, so no segment hides it
                ax.annotate(f"{a:.2f}", (xi, max(a, top)), xytext=(0, 4), textcoords="offset points", ha="center",
                            va="bottom", fontsize="small")
        handles, labels = ax.get_legend_handles_labels()
        # top segment first, as the bars read from top to bottom
        order = [labels.index(name) for name in ("RSS above baseline", *reversed(segments))]
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
    if skipped:
        caption += " Not shown: " + "; ".join(skipped) + "."
    return Chart("budget", title, _png(fig), caption)


def _colors(n: int) -> list[Any]:
    """Distinct role colours, the same role the same colour in every bar."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


# A size sweep's headline figures, plotted against model size with their fitted lines.
FIT_FIGURES = ("steady.rss", "peak", "budget.rss_after_trim_above_baseline", "budget.live", "budget.unexplained")


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


def charts(runs: list[RunSeries], summaries: list[dict[str, Any]]) -> list[Chart]:
    """Every chart of the report, in page order."""
    return [*(measure_chart(runs, m) for m in MEASURES), budget_chart(summaries)]
