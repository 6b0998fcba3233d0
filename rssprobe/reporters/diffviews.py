"""A comparison (analysis.compare.Result.as_dict()) -> its answer, context lines, the key table, the full tables.

The key table fits a review comment (six columns, the figures' words, ± defined in the note): the gated figures,
the raw RSS of each phase, and any other figure that moved. The full tables (every figure by its name) are the
detail: behind --all in a terminal, folded in markdown and HTML.
"""

from __future__ import annotations

from typing import Any

from .. import verdicts
from ..analysis import answers, metrics
from ..analysis.resultparts import LeadEffect
from ..analysis.results import Comparison, FigureComparison, SideDescription
from .table import Table, bpp

GROUP_TITLES = {
    "phases": "Phases and budget",
    "roles": "Live-buffer roles (census) and ZeRO-3 gathered weights",
    "pinned": "Pinned host memory (held and slack predicted for CUDA on a CPU run)",
    "node": "The node: every rank summed, per parameter of the whole model",
    "parts": "Parts of RSS by memory mapping, at the end",
    "saves": "The save phase: per save kind, per parameter of the whole model",
    "sites": "Code sites",
}


def _p(c: FigureComparison) -> float:
    """The one-sided p in the direction of the change."""
    p = c["p_increase"] if (c["delta"] or 0) >= 0 else c["p_decrease"]
    return 1.0 if p is None else p


def _side(mean: float | None, sd: float | None) -> str:
    return f"{mean:.2f}" + (f" ± {sd:.2f}" if sd is not None else "")


def _verdict(c: FigureComparison, short: bool = False) -> str:
    """A figure's verdict as a cell; `short` where the row's name says whether it is gated (the key table)."""
    if short and not c["gated"] and c["verdict"] in verdicts.DIRECTION:
        return verdicts.DIRECTION[c["verdict"]]
    return verdicts.mark(c["verdict"], c["gated"]) or verdicts.SAME


def side_heading(side: SideDescription, letter: str) -> str:
    return f"{letter}: {side['label']} ({side['ok']} run{'s' if side['ok'] != 1 else ''})"


def header_lines(r: Comparison) -> list[str]:
    """What was compared, and how a change is decided (the legend as a sentence), then the warnings."""
    a, b = r["a"], r["b"]
    params = f", {a['params']:,} parameters" if a.get("params") else ""
    lines = [f"A = {_named(a)}, {a['ok']} of {a['runs']} runs ok; B = {_named(b)}, {b['ok']} of {b['runs']} runs ok; "
             f"scenario {a['scenario']}{params}.",
             f"The gate counts a change of a gated figure ({', '.join(r['gated'])}) only if it is at least "
             f"{r['threshold_bytes_per_param']} B/param and significant in a one-sided exact permutation test at "
             f"p ≤ {r['alpha']}; the other figures inform. A ± B is the mean ± the standard deviation over the runs."]
    return lines + [f"WARNING: {p}" for p in r["problems"]]


def _named(side: SideDescription) -> str:
    return side["name"] if side["name"] == side["label"] else f"{side['name']} [{side['label']}]"


def _row(c: FigureComparison, name: str, short: bool = False) -> list[str]:
    decidable = c["p_increase"] is not None
    return [name, _side(c["mean_a"], c["sd_a"]), _side(c["mean_b"], c["sd_b"]), bpp(c["delta"], True),
            f"{_p(c):.3f}" if decidable else "n/a",
            _verdict(c, short)]


def _columns(r: Comparison, first: str) -> list[str]:
    return [first, side_heading(r["a"], "A"), side_heading(r["b"], "B"), "B - A", "p", "verdict"]


NBSP = "\u00a0"  # joins a number's parts in markdown, so a narrow PR column never wraps "29.20 ± 0.00"


def _joined(text: str, compact: bool) -> str:
    return text.replace(" ", NBSP) if compact else text


def _effect_p(e: LeadEffect) -> str:
    return "exact" if e["exact"] else ("n/a" if e["p_adjusted"] is None else f"{e['p_adjusted']:.3f}")


def _effect_side(mean: float | None, sd: float | None, compact: bool) -> str:
    return f"{mean:.2f}" if compact or sd is None else f"{mean:.2f} ± {sd:.2f}"


def key_table(r: Comparison, compact: bool = False) -> Table:
    """The lead's figures by the reviewer's words, each as the lead assessed it (analysis/effects.py): B - A with
    its simultaneous interval, the corrected p and the claim. `compact` (markdown, a PR comment at 80 columns):
    the sides' means only, each number's parts joined by no-break spaces."""
    lead = r.get("lead") or {}
    effects = lead.get("effects") or []
    m, alpha, t = lead.get("m", 0), lead.get("alpha", r["alpha"]), r["threshold_bytes_per_param"]
    rows = [[answers.LEAD_WORDS.get(e["metric"], metrics.label(e["metric"])) + (" (gated)" if e["gated"] else ""),
             _effect_side(e["mean_a"], e["sd_a"], compact), _effect_side(e["mean_b"], e["sd_b"], compact),
             _joined(answers.interval_text(e).removesuffix(", exact"), compact), _effect_p(e), e["claim"]]
            for e in effects]
    a, b = f"A: {r['a']['label']}", f"B: {r['b']['label']}"  # the runs of each: the header line's
    note = (f"B - A [simultaneous {100 * (1 - alpha):.0f}% interval]: Welch t intervals, Bonferroni over the {m} "
            f"figures that vary (each at {100 * lead.get('level', 0.95):.1f}%); p: the one-sided exact permutation "
            f"p times {m}. A figure is lower or higher only when p ≤ {alpha} and its whole interval lies beyond "
            f"±{t} B/param; unchanged when it lies within; exact: identical in every run. (gated) figures decide "
            "the gate.")
    return Table("Key figures (bytes per parameter above each run's own pre-model baseline)",
                 ["figure", a, b, "B - A [interval]", "p", "claim"], rows,
                 note=note if compact else note + " Every figure by its name: --all.")


def moved_sites(r: Comparison, most: int = 2) -> list[FigureComparison]:
    """The code sites that moved, largest first; of nested sites that moved alike (a caller retains what its
    callee retained) the one that retains least, the innermost, stands for them."""
    moved = [c for c in r["comparisons"].get("sites", []) if c["verdict"] in verdicts.MOVED]
    alike: dict[float, FigureComparison] = {}
    for c in moved:
        key = round(c["delta"] or 0.0, 2)
        if key not in alike or abs(c["mean_a"] or 0.0) < abs(alike[key]["mean_a"] or 0.0):
            alike[key] = c
    return sorted(alike.values(), key=lambda c: -abs(c["delta"] or 0.0))[:most]


def site_words(metric: str) -> str:
    """'site.DeepSpeedCPUAdam.step.first_step.retained' -> 'DeepSpeedCPUAdam.step, first step, retained'."""
    *name, phase, kind = metric.removeprefix("site.").split(".")
    return f"{'.'.join(name)}, {phase.replace('_', ' ')}, {kind}"


def differences_table(r: Comparison) -> Table | None:
    if not r["differences"]:
        return None
    return Table("What differs between A and B", ["what", "A", "B"],
                 [[d["what"], _value(d["a"]), _value(d["b"])] for d in r["differences"]])


def _value(v: Any) -> str:
    """A difference's value as words: patches as 'name x12 per run', not a Python dict."""
    if isinstance(v, dict):
        return ", ".join(f"{k} ({_counts(x)})" if isinstance(x, list) else f"{k}={x}" for k, x in v.items()) or "none"
    return "none" if v is None else str(v)


def _counts(counts: list[int]) -> str:
    if counts and len(set(counts)) == 1:
        return f"took effect {answers.times(counts[0])} per run"
    return "took effect " + ", ".join(str(c) for c in counts) + " times in its runs"


def tables(r: Comparison, all_sites: bool = False, compact: bool = False) -> list[Table]:
    """Every figure, by its name, a table per group ('(gated)' marks the ones that decide); `compact` (markdown):
    no command-line hint in a note."""
    out = []
    comps = r["comparisons"]
    for group, title in GROUP_TITLES.items():
        rows = comps.get(group, [])
        if group in ("pinned", "node", "parts", "saves") and not rows:
            continue
        shown = rows if group != "sites" or all_sites else [c for c in rows if c["verdict"] != verdicts.SAME]
        t = Table(f"{title} (bytes per parameter)", _columns(r, "figure"),
                  [_row(c, c["metric"] + (" (gated)" if c["gated"] else "")) for c in shown])
        if len(shown) < len(rows):
            t.note = f"{len(rows) - len(shown)} site figures below the threshold " + (
                "are not shown" if compact else "hidden (--all-sites shows them)")
        out.append(t)
    return out


def detail_summary(r: Comparison) -> str:
    return "Every figure: " + "; ".join(GROUP_TITLES[g].split(" (")[0] for g in GROUP_TITLES
                                         if r["comparisons"].get(g) or g in ("phases", "roles", "sites"))


def lead_tables(r: Comparison, compact: bool = False) -> list[Table]:
    """What a report of two runs or groups leads with: the key figures and what differs (as diff shows them);
    `compact` for markdown (key_table)."""
    differences = differences_table(r)
    return [key_table(r, compact), *([differences] if differences else [])]
