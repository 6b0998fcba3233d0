"""A size sweep (analysis.sweep.Sweep.as_dict()) and a comparison of two (sweep.Comparison.as_dict()) -> tables."""

from __future__ import annotations

from typing import Any

from .. import verdicts
from ..analysis.metrics import HEADLINE
from ..analysis.resultparts import FitRow, SweepFigureComparison
from ..analysis.results import ScaleSweep, SweepComparison
from ..contract.status import Status
from . import html, plots
from .table import Table

MIB = 2**20
# sites whose fit is this small in both parts are not "key sites" (--all-sites shows them)
QUIET_SLOPE, QUIET_FIXED = 0.05, 1 * MIB


def _order(figure: str) -> tuple[int, int, str]:
    if figure in HEADLINE:
        return 0, HEADLINE.index(figure), figure
    for rank, prefix in enumerate(("role.", "part.", "site."), start=1):
        if figure.startswith(prefix):
            return rank, 0, figure
    return 4, 0, figure


def _shown(row: FitRow, all_rows: bool) -> bool:
    if _order(row["figure"])[0] == 4 and not all_rows:
        return False  # other phase figures (e.g. first_step.glibc_free): JSON and --all-sites only
    if not row["figure"].startswith("site.") or all_rows:
        return True
    return abs(row["slope_bytes_per_param"]) >= QUIET_SLOPE or abs(row["fixed_bytes"]) >= QUIET_FIXED


def _pm(value: float, interval: float | None, scale: float = 1.0, signed: bool = False) -> str:
    text = f"{value / scale:+.2f}" if signed else f"{value / scale:.2f}"
    return text + (f" ± {interval / scale:.2f}" if interval is not None else " (no interval)")


def header_lines(s: ScaleSweep) -> list[str]:
    sizes = ", ".join(f"{g['params'] / 1e6:.1f} M ({g['ok']}/{g['runs']} ok)" for g in s["sizes_run"])
    lines = [f"scale {s['scale']}: scenario {s.get('scenario_name')} [{s.get('label')}], repeat {s.get('repeat')}",
             f"sizes: {sizes}; {s['runs_in_fit']} runs in the fit",
             "fit per figure: bytes = fixed + slope x params, least squares over the finished runs, "
             "95% t intervals (none with 0 degrees of freedom)"]
    return lines + [f"WARNING: {p}" for p in s["problems"]]


def fit_table(s: ScaleSweep, all_rows: bool = False) -> Table:
    t = Table("Fit per figure: slope in bytes per parameter, fixed part in MiB",
              ["figure", "slope B/param", "fixed MiB", "worst residual MiB", "runs"])
    rows = sorted(s["fit"], key=lambda r: _order(r["figure"]))
    shown = [r for r in rows if _shown(r, all_rows)]
    for r in shown:
        t.rows.append([r["figure"], _pm(r["slope_bytes_per_param"], r["slope_interval_bytes_per_param"]),
                       _pm(r["fixed_bytes"], r["fixed_interval_bytes"], MIB),
                       f"{r['worst_residual_bytes'] / MIB:+.2f}", f"{r['runs']} ({r['sizes']} sizes)"])
    if len(shown) < len(rows):
        t.note = (f"{len(rows) - len(shown)} more figures (sites with |slope| < {QUIET_SLOPE} and |fixed| < 1 MiB, "
                  "other phase figures) in --all-sites and JSON")
    return t


def sizes_table(s: ScaleSweep) -> Table:
    return Table("Sizes", ["params", "runs", "finished ok", "group"],
                 [[f"{g['params']:,}", str(g["runs"]), str(g["ok"]), g["group"]] for g in s["sizes_run"]])


def diff_header_lines(r: SweepComparison) -> list[str]:
    a, b = r["a"], r["b"]
    lines = [f"A: {a['scale']} [{a.get('label')}] {a['runs_in_fit']} runs   B: {b['scale']} [{b.get('label')}] "
             f"{b['runs_in_fit']} runs   scenario {a.get('scenario_name')}",
             f"slope threshold {r['slope_threshold_bytes_per_param']} B/param, fixed threshold "
             f"{r['fixed_threshold_bytes'] / MIB:g} MiB; a change counts if it passes its threshold and its "
             f"{r['level']:.0%} interval (residual variance pooled over both fits) excludes 0",
             f"* = gated figure ({', '.join(r['gated'])}); the others inform"]
    return lines + [f"WARNING: {p}" for p in r["problems"]]


def _worth_showing(c: SweepFigureComparison) -> bool:
    """Gated figures, headline/roles/parts, and the sites whose slope or fixed part moved."""
    if c["gated"]:
        return True
    kind = _order(c["figure"])[0]
    moved = c["slope"]["verdict"] != "same" or c["fixed"]["verdict"] != "same"
    return kind < 3 or (kind == 3 and moved)


def diff_table(r: SweepComparison, all_rows: bool = False) -> Table:
    t = Table("B - A per figure: slope (B/param) and fixed part (MiB), each judged apart",
              ["figure", "slope A", "slope B", "slope B - A", "verdict", "fixed A", "fixed B", "fixed B - A",
               "verdict "])
    rows = sorted(r["comparisons"], key=lambda c: (not c["gated"], _order(c["figure"])))
    shown = [c for c in rows if all_rows or _worth_showing(c)]
    for c in shown:
        s, f = c["slope"], c["fixed"]
        t.rows.append([("* " if c["gated"] else "") + c["figure"], f"{s['a']:.2f}", f"{s['b']:.2f}",
                       _pm(s["delta"], s["interval"], signed=True), verdicts.mark(s["verdict"]) or "same",
                       f"{f['a'] / MIB:.1f}", f"{f['b'] / MIB:.1f}", _pm(f["delta"], f["interval"], MIB, True),
                       verdicts.mark(f["verdict"]) or "same"])
    if len(shown) < len(rows):
        t.note = f"{len(rows) - len(shown)} figures unchanged or informative only hidden (--all-sites shows them)"
    return t


def verdict_line(r: SweepComparison) -> str:
    moved = [f"{c['figure']} {part} {d['delta'] / (MIB if part == 'fixed' else 1):+.2f} "
             f"{'MiB' if part == 'fixed' else 'B/param'} ({d['verdict']})"
             for c in r["comparisons"] if c["gated"] for part, d in (("slope", c["slope"]), ("fixed", c["fixed"]))
             if d["verdict"] in ("regression", "improvement")]
    return f"verdict: {r['verdict'].upper()}" + (f" ({'; '.join(moved)})" if moved else "")


def report_parts(sweeps: list[Any]) -> tuple[list[html.Section], list[plots.Chart]]:
    """For `rssprobe report SCALEDIR...`: one fit section per sweep, one chart per headline figure."""
    sections, series = [], []
    for sweep in sweeps:  # analysis.sweep.Sweep
        data = sweep.as_dict()
        head: html.SectionHead = {"run": sweep.scale.id, "label": f"size sweep {data.get('label')}",
                                  "status": Status.OK, "scenario": data.get("scenario_name")}
        sections.append(html.Section(head, header_lines(data), [fit_table(data), sizes_table(data)]))
        series.append(plots.SweepSeries(f"{sweep.scale.id} [{data.get('label')}]",
                                        {f: sweep.series(f) for f in plots.FIT_FIGURES},
                                        {f.figure: f for f in sweep.fits()}))
    return sections, [plots.fit_chart(figure, series) for figure in plots.FIT_FIGURES] if series else []
