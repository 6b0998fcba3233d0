"""What the commands show: a run, a group, a size sweep, a matrix or a plan; a comparison of two; a bisect's
result; a merge. Each view takes the data a workflow or campaign returned (its JSON form) and returns what it shows
(a View); view() renders it in the chosen format (output.render); nothing here reads a file or computes a figure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import kinds, verdicts
from ..analysis import metrics
from ..analysis.metrics import PATCH_EFFECTS, columns
from ..analysis.resultparts import MatrixCell, MatrixListCell, PlanListCell
from ..analysis.results import (
    Bisect,
    BisectCommits,
    BisectComponents,
    BisectVersions,
    Comparison,
    FigureComparison,
    GroupView,
    MatrixListing,
    MatrixTable,
    Merged,
    PlanListing,
    PlanTable,
    RunSummary,
    ScaleSweep,
    SweepComparison,
)
from ..contract.status import Status
from . import diffviews, output, scaleviews, views
from .table import Table, bpp
from .view import View


def status_table(summaries: list[RunSummary]) -> Table:
    """Each run's status (ok, failed, incomplete, running, ...) and why, as a table (CSV has no header lines)."""
    return Table("Status", ["run", "status", "reason", "steps", "zero"],
                 [[s["run"], s["status"], s.get("error") or "", f"{s['steps_done']}/{s['steps_requested']}",
                   views.zero_line(s)] for s in summaries])


def run(data: RunSummary, fmt: str, all_sites: bool = False, log_tail: str | None = None) -> View:
    tables, details = views.run_table_parts(data, all_sites=all_sites or fmt in ("csv", "json"))
    if fmt == "csv":  # the header lines, which carry the status, are not part of CSV
        tables = [status_table([data]), *tables]
    failed = data["status"] != Status.OK
    return View(data, views.header_lines(data), tables, failed or bool(data["never_took_effect"]),
                answer=data["answer"], details=details,
                details_summary=", ".join(t.title.split(" (")[0] for t in details),
                aside=f"last lines of the worker's output ({data['path']}/worker*.log):\n{log_tail}"
                if failed and log_tail else "")


def group(data: GroupView, fmt: str) -> View:
    summaries = data["runs"]
    lines = [f"group {data['group']}: {len(summaries)} runs of {data['scenario']} [{data['label']}]"]
    lines += [views.header_lines(s)[0] for s in summaries]
    bad = any(s["status"] != Status.OK or s["never_took_effect"] for s in summaries)
    tables = [status_table(summaries)] if fmt == "csv" else []
    return View(data, lines, [*tables, views.group_table(data)], bad, answer=data["answer"])


def scale(data: ScaleSweep, fmt: str, all_sites: bool = False) -> View:
    """A size sweep: the fit of every figure over its sizes."""
    tables = [scaleviews.fit_table(data, all_sites or fmt in ("csv", "json")), scaleviews.sizes_table(data)]
    return View(data, scaleviews.header_lines(data), tables, alarm=bool(data["problems"]), answer=data["answer"])


def _effect(c: FigureComparison | None) -> str:
    if c is None:
        return ""
    return bpp(c["delta"], signed=True) + ("" if c["verdict"] == verdicts.SAME else f" ({c['verdict']})")


FIGURES = columns(*metrics.MATRIX_FIGURES)


def _campaign_lines(kind: str, where: str, data: MatrixTable | PlanTable) -> list[str]:
    cells = data["cells"]
    shard = f" (shard {data['shard']}: the other shards' cells are theirs)" if data.get("shard") else ""
    lines = [f"{kind} {where}: {len(cells)} cells, {sum(c['status'] == 'done' for c in cells)} done{shard}"]
    return lines + [f"FAILED {line}" for line in data["failed"]]


def matrix(data: MatrixTable, fmt: str) -> View:
    """The one table: headline figures per cell and each patch's effect."""
    figures, effects = FIGURES, PATCH_EFFECTS
    rows = []
    libraries = _library_axes(data["cells"])
    for c in data["cells"]:
        versions = c["versions"]
        rows.append([versions.get("torch") or c["torch"] or "?", versions.get("deepspeed") or c["deepspeed"] or "?",
                     *[versions.get(lib) or c.get(lib) or "?" for lib in libraries],
                     c["patch"], c["allocator"], c["runs_ok"] or c["status"],
                     *[bpp(c["figures"].get(k)) for k in figures], *[_effect(c["effects"].get(k)) for k in effects]])
    columns = ["torch", "deepspeed", *libraries, "patch", "allocator", "runs ok", *figures.values(),
               *[f"effect: {figures[k]}" for k in effects]]
    name = data["matrix"].rstrip("/").rsplit("/", 1)[-1]
    table = Table(f"Matrix {name} (bytes per parameter above the pre-model baseline; mean of the finished runs)",
                  columns, rows, note="columns: " + ", ".join(f"{label} = {k}" for k, label in figures.items())
                  + "; effect = patched minus baseline of the same versions and allocator, with the verdict when "
                  "it is not 'same'")
    return View(data, _campaign_lines("matrix", data["matrix"], data), [table], alarm=bool(data["failed"]),
                answer=data["answer"])


def plan(data: PlanTable, fmt: str) -> View:
    """Headline figures per cell and each patch's effect against the baseline of the same configuration."""
    figures, effects = FIGURES, PATCH_EFFECTS
    rows = [[c["axis"], c["value"], c["patch"], c["runs_ok"] or c["status"],
             *[bpp(c["figures"].get(k)) for k in figures], *[_effect(c["effects"].get(k)) for k in effects]]
            for c in data["cells"]]
    name = data["directory"].rstrip("/").rsplit("/", 1)[-1]
    table = Table(f"Plan {name} (bytes per parameter above the pre-model baseline; mean of the finished runs)",
                  ["axis", "value", "patch", "runs ok", *figures.values(),
                   *[f"effect: {figures[k]}" for k in effects]], rows)
    return View(data, _campaign_lines("plan", data["directory"], data), [table], alarm=bool(data["failed"]),
                answer=data["answer"])


def _owner(c: MatrixListCell | PlanListCell, data: MatrixListing | PlanListing) -> str:
    shard = data.get("shard")
    if not shard:
        return ""
    return " (this shard)" if str(c["shard"]) == shard.split("/")[0] else f" (shard {c['shard']})"


def _library_axes(cells: Sequence[MatrixCell | MatrixListCell]) -> list[str]:
    """The library axes (transformers, accelerate) some cell of a matrix has: a column each, else none."""
    return [lib for lib in ("transformers", "accelerate") if any(c.get(lib) for c in cells)]


def matrix_list(data: MatrixListing, fmt: str) -> View:
    libraries = _library_axes(data["cells"])
    rows = [[c["id"], c["torch"] or "(worker's)", c["deepspeed"] or "(worker's)", *[c.get(lib) for lib in libraries],
             c["patch"], c["allocator"], ("finished" if c["finished"] else "to run") + _owner(c, data)]
            for c in data["cells"]]
    table = Table(f"{len(rows)} cells x {data['repeat']} runs in {data['matrix']}",
                  ["cell", "torch", "deepspeed", *libraries, "patch", "allocator", "state"], rows)
    return View(data, tables=[table])


def plan_list(data: PlanListing, fmt: str) -> View:
    cells = data["cells"]
    rows = [[c["axis"], c["value"], c["torch"] or "(worker's)", c["deepspeed"] or "(worker's)", c["allocator"],
             str(c["ranks"]), c["patch"], str(c["repeat"]), ("finished" if c["finished"] else "to run")
             + _owner(c, data)] for c in cells]
    skipped = data["not_selected"]
    table = Table(f"{len(cells)} cells, {sum(c['repeat'] for c in cells)} runs in {data['directory']}",
                  ["axis", "value", "torch", "deepspeed", "allocator", "ranks", "patch", "runs", "state"], rows,
                  note=("optional, not selected (--optional runs them): " + ", ".join(skipped)) if skipped else "")
    return View(data, tables=[table])


def comparison(result: Comparison, fmt: str, all_sites: bool = False) -> View:
    """A comparison (analysis.compare.Result.as_dict()) as diff and gate print it: the answer, what was compared,
    the key figures and what differs; every figure's table behind --all (folded in markdown: a job summary's, a
    report page's)."""
    return View(result, diffviews.header_lines(result), diffviews.lead_tables(result, compact=fmt == "markdown"),
                alarm=verdicts.exit_code(result["verdict"]) != 0, answer=result["answer"],
                details=diffviews.tables(result, all_sites or fmt in ("json", "csv"), compact=fmt == "markdown"),
                details_summary=diffviews.detail_summary(result))


def scale_comparison(result: SweepComparison, fmt: str, all_sites: bool = False) -> View:
    """Two size sweeps: slope and fixed part of every figure, each with its own verdict."""
    lines = [*scaleviews.diff_header_lines(result), scaleviews.verdict_line(result)]
    tables = [scaleviews.diff_table(result, all_sites or fmt in ("json", "csv"))]
    return View(result, lines, tables, alarm=verdicts.exit_code(result["verdict"]) != 0, answer=result["answer"])


def compared(kind: str, data: Any, fmt: str, all_sites: bool = False, show_all: bool = False) -> None:
    """Two runs or groups, or two size sweeps (workflows/inspect.Compared's kind and data)."""
    view(kind, data, fmt, all_sites, show_all=show_all)


def made(kind: str, data: Any, fmt: str, all_sites: bool = False, log_tail: str | None = None) -> View:
    """What the view rssprobe/kinds.py names for this result kind returns, given the options it takes."""
    entry = kinds.result(kind)
    if entry.view is None:
        raise ValueError(f"the result kind {kind!r} has no view of its own (rssprobe/kinds.py)")
    given = {"all_sites": all_sites, "log_tail": log_tail}
    shown: View = kinds.load(entry.view)(data, fmt, **{name: given[name] for name in entry.options})
    return shown


def view(kind: str, data: Any, fmt: str, all_sites: bool = False, log_tail: str | None = None,
         show_all: bool = False) -> None:
    """Whatever a command found or made, by its result kind: its view (made()) rendered in the chosen format, the
    detail tables shown with show_all (--all)."""
    output.render(fmt, made(kind, data, fmt, all_sites, log_tail), show_all)


def probes_table(data: BisectVersions | BisectComponents) -> Table:
    """A bisect's probes, each against the reference."""
    rows = [[i + 1, r["what"], r["round"], r["runs"], bpp(r.get("a")), bpp(r.get("b")), bpp(r.get("delta"), True),
             verdicts.mark(r["verdict"]) if r["verdict"] in verdicts.TABLE else r["verdict"], r["answer"]]
            for i, r in enumerate(data.get("probes", []))]
    sought = {"up": "an increase", "down": "a decrease", None: "either way"}[data["direction"]]
    return Table(f"Probes ({data['metric']}, bytes per parameter; A = {data['reference']})",
                 ["probe", "tried", "round", "runs ok", "A", "B", "B - A", "verdict", "answer"], rows,
                 note=f"a change counts at >= {data['threshold']} B/param and p <= {data['alpha']}, and only "
                      f"{sought}; undecided probes get another round of repeats")


def commits_table(data: BisectCommits) -> Table:
    return Table(f"Commits tested ({data['metric']}, bytes per parameter)",
                 ["commit", "subject", "verdict", data["metric"]],
                 [[c["commit"][:10], c["subject"], c["verdict"], bpp(c["mean"])] for c in data["commits"]])


def bisect(data: Bisect, fmt: str) -> View:
    tables = [commits_table(data) if "commits" in data else probes_table(data)]  # the commits mode's result
    if data.get("comparison"):
        tables += diffviews.tables(data["comparison"])
    lines = [*data["lines"], *[f"WARNING: {w}" for w in data["warnings"]], f"runs under {data['root']}"]
    return View(data, lines, tables, alarm=data.get("status") != "unchanged", answer=data.get("answer") or [])


def merged(data: Merged, fmt: str) -> View:
    lines = [f"merged {len(data['taken'])} groups into {data['out']} ({data['kind']})"]
    lines += [f"WARNING: {key}: in no shard; to run (the campaign's command with --out {data['out']} runs it)"
              for key in data["missing"]]
    table = Table("Groups and the shard each came from", ["group", "from"],
                  [[key, source] for key, source in data["taken"].items()])
    return View(data, lines, [table], alarm=bool(data["missing"]))
