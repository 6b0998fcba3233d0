"""A comparison (analysis.compare.Result.as_dict()) -> header lines, a verdict paragraph, tables."""

from __future__ import annotations

from typing import Any

from .. import verdicts
from .table import Table, bpp


def _p(c: dict[str, Any]) -> float:
    """The one-sided p in the direction of the change."""
    p = c["p_increase"] if c["delta"] >= 0 else c["p_decrease"]
    return 1.0 if p is None else p


def _side(c: dict[str, Any], which: str) -> str:
    mean, sd, n = c[f"mean_{which}"], c[f"sd_{which}"], c[f"n_{which}"]
    return f"{mean:.2f}" + (f" ± {sd:.2f}" if sd is not None else "") + (f" (n={n})" if n != 1 else "")


def header_lines(r: dict[str, Any]) -> list[str]:
    a, b = r["a"], r["b"]
    lines = [f"A: {a['name']} [{a['label']}] {a['ok']}/{a['runs']} runs ok   "
             f"B: {b['name']} [{b['label']}] {b['ok']}/{b['runs']} runs ok   scenario {a['scenario']}",
             f"threshold {r['threshold_bytes_per_param']} B/param, one-sided exact permutation test at "
             f"alpha {r['alpha']}"]
    lines.append(f"* = gated figure ({', '.join(r['gated'])}); the others inform")
    lines += [f"WARNING: {p}" for p in r["problems"]]
    return lines


def verdict_paragraph(r: dict[str, Any]) -> str:
    a, b, t, alpha = r["a"], r["b"], r["threshold_bytes_per_param"], r["alpha"]
    head = [c for group in r["comparisons"].values() for c in group if c["gated"]]
    moved = [c for c in head if c["verdict"] in ("regression", "improvement")]
    text = verdicts.meaning(r["verdict"]).words
    parts = [f"**Verdict: {r['verdict']}** — {text}: B = {b['name']} ({b['label']}, {b['ok']} runs) against "
             f"A = {a['name']} ({a['label']}, {a['ok']} runs), {a['params'] or 0:,} parameters; a change counts "
             f"only if it is at least {t} B/param and significant at p ≤ {alpha}. Gated figures (low-noise): "
             f"{', '.join(r['gated'])}; raw RSS figures are shown for information."]
    if moved:
        parts.append("Significant: " + "; ".join(
            f"{c['metric']} {c['mean_a']:.2f} → {c['mean_b']:.2f} ({c['delta']:+.2f} B/param, p = {_p(c):.3f})"
            for c in moved) + ".")
    elif head:
        largest = max(head, key=lambda c: abs(c["delta"]))
        parts.append(f"Largest change: {largest['metric']} {largest['delta']:+.2f} B/param "
                     f"({verdicts.mark(largest['verdict']) or 'below threshold'}).")
    for side in (a, b):
        for spec, counts in side["patches"].items():
            parts.append(f"{side['name']}: {spec} took effect {counts} times per run.")
    parts += [f"⚠ {p}." for p in r["problems"]]
    return " ".join(parts)


def _rows(t: Table, comparisons: list[dict[str, Any]]) -> Table:
    for c in comparisons:
        decidable = c["p_increase"] is not None
        t.rows.append([("* " if c["gated"] else "") + c["metric"], _side(c, "a"), _side(c, "b"), bpp(c["delta"], True),
                       f"{_p(c):.3f}" if decidable else "n/a", verdicts.mark(c["verdict"], c["gated"])])
    return t


def tables(r: dict[str, Any], all_sites: bool = False) -> list[Table]:
    out = []
    if r["differences"]:
        out.append(Table("What differs between A and B", ["what", "A", "B"],
                         [[d["what"], str(d["a"]), str(d["b"])] for d in r["differences"]]))
    columns = ["figure", "A", "B", "B - A", "p", "verdict"]
    comps = r["comparisons"]
    out.append(_rows(Table("Phases and budget (bytes per parameter)", columns), comps.get("phases", [])))
    out.append(_rows(Table("Live-buffer roles, ZeRO-3 gathered weights (bytes per parameter)", columns),
                     comps.get("roles", [])))
    if comps.get("pinned"):
        out.append(_rows(Table("Pinned host memory (bytes per parameter; *_predicted: for CUDA, not measured)",
                               columns), comps["pinned"]))
    if comps.get("node"):
        out.append(_rows(Table("The node: every rank summed, absolute (bytes per parameter of the model)", columns),
                         comps["node"]))
    if comps.get("parts"):
        out.append(_rows(Table("Parts of RSS by memory mapping, at the end (bytes per parameter)", columns),
                         comps["parts"]))
    sites = comps.get("sites", [])
    shown = sites if all_sites else [c for c in sites if c["verdict"] != "same"]
    t = _rows(Table("Code sites (bytes per parameter)", columns), shown)
    if len(shown) < len(sites):
        t.note = f"{len(sites) - len(shown)} site figures below the threshold hidden (--all-sites shows them)"
    out.append(t)
    return out


def lead_tables(r: dict[str, Any]) -> list[Table]:
    """What a report of two runs or groups leads with: what differs, and the gated figures (as diff shows them)."""
    columns = ["figure", "A", "B", "B - A", "p", "verdict"]
    gated = [c for group in r["comparisons"].values() for c in group if c["gated"]]
    out = [t for t in tables(r)[:1] if t.title.startswith("What differs")]
    return [*out, _rows(Table("Gated figures (bytes per parameter; these decide the verdict)", columns), gated)]
