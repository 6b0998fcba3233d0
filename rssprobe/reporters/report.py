"""Report assembly: runs -> one self-contained HTML page (and, given a directory, PNG charts + markdown)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pandas as pd

from .. import layout, scale, storage
from ..analysis.summary import Summary
from ..analysis.tables import steps_frame
from ..errors import UserError
from . import html, markdown, plots, scaleviews

HTML_NAME = "report.html"
MD_NAME = "report.md"


@dataclass
class Written:
    """What write_report wrote, so the CLI can print it and tests can open it."""

    html: Path
    markdown: Path | None = None
    images: list[Path] = field(default_factory=list)


def steps_table(run: storage.RunDir, summary: Summary) -> pd.DataFrame:
    """steps.parquet when the run wrote it (the normal end), else the same table from the events."""
    path = run.path / storage.STEPS
    if not path.exists():
        return steps_frame(summary.events)
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        raise UserError(f"{path}: unreadable per-step table ({e})") from None


def load(refs: list[str], all_sites: bool = False) -> tuple[list[html.Section], list[plots.RunSeries]]:
    """Resolve every ref first, so a typo in the last one fails before any work is done."""
    if not refs:
        raise UserError("report: name at least one run (a run directory, an id under reports/runs, or 'latest')")
    runs: list[storage.RunDir] = []
    for ref in refs:
        members = scale.Sweep.load(ref).runs() if scale.ScaleDir.is_scale(ref) else storage.resolve_runs(ref)[1]
        for run in members:  # a group or a size sweep contributes every member run
            if run.path.resolve() not in {r.path.resolve() for r in runs}:
                runs.append(run)
    sections, series = [], []
    for run in runs:
        summary = Summary(run)
        data = summary.as_dict()
        sections.append(html.section(data, all_sites))
        series.append(plots.RunSeries.of(data, summary.baseline, steps_table(run, summary)))
    return sections, series


def markdown_page(sections: list[html.Section], charts: list[plots.Chart], generated: str) -> str:
    """report.md: the same tables as `show --format markdown`, with the charts linked as sibling PNG files."""
    out = ["# rssprobe report", "",
           f"_generated {generated}; every figure is bytes per parameter above the run's own pre-model baseline_",
           "", "## Charts", ""]
    for c in charts:
        out += [f"![{c.title}]({c.name}.png)", "", f"_{c.caption}_", ""]
    out += ["## Runs", ""]
    out += [markdown.render(sec.lines, sec.tables) for sec in sections]
    return "\n".join(out)


def _default_html() -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = layout.reports_root() / f"report-{stamp}.html"
    n = 2
    while path.exists():  # two reports in one second must not overwrite each other
        path = layout.reports_root() / f"report-{stamp}-{n}.html"
        n += 1
    return path


def _write(path: Path, data: str | bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data, encoding="utf-8")
    except OSError as e:
        raise UserError(f"{path}: cannot write ({e.strerror or e})") from None


def write_report(refs: list[str], out: Path | None = None, html_file: Path | None = None,
                 all_sites: bool = False) -> Written:
    """Build the report for refs; HTML to html_file, else out/report.html, else reports/report-<stamp>.html."""
    if out is not None and out.exists() and not out.is_dir():
        raise UserError(f"{out}: --out must be a directory")
    sections, series = load(refs, all_sites)
    charts = plots.charts(series, [sec.summary for sec in sections])
    sweeps = [scale.Sweep.load(r) for r in refs if scale.ScaleDir.is_scale(r)]
    fit_sections, fit_charts = scaleviews.report_parts(sweeps)
    sections, charts = [*fit_sections, *sections], [*fit_charts, *charts]
    generated = storage.now_iso()
    target = html_file or (out / HTML_NAME if out is not None else _default_html())
    _write(target, html.render(sections, charts, generated))
    written = Written(target)
    if out is not None:
        for c in charts:
            written.images.append(out / f"{c.name}.png")
            _write(written.images[-1], c.png)
        written.markdown = out / MD_NAME
        _write(written.markdown, markdown_page(sections, charts, generated))
    return written
