"""Report assembly: the runs a report shows (workflows/report.py collects them) -> one self-contained HTML
page and, given a directory, PNG charts and a markdown page."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import UserError
from . import diffviews, html, markdown, plots, scaleviews

HTML_NAME = "report.html"
MD_NAME = "report.md"


@dataclass
class Written:
    """What write() wrote, so the CLI can print it and tests can open it."""

    html: Path
    markdown: Path | None = None
    images: list[Path] = field(default_factory=list)


def markdown_page(sections: list[html.Section], charts: list[plots.Chart], generated: str,
                  compared: dict[str, Any] | None = None) -> str:
    """report.md: the same tables as `show --format markdown`, with the charts linked as sibling PNG files; two
    runs or groups lead with what `diff` says."""
    out = ["# rssprobe report", "",
           f"_generated {generated}; every figure is bytes per parameter above the run's own pre-model baseline_", ""]
    if compared:
        out += ["## Comparison: B against A (rssprobe diff)", "", diffviews.verdict_paragraph(compared), "",
                markdown.render([], diffviews.lead_tables(compared)), ""]
    out += ["## Charts", ""]
    for c in charts:
        out += [f"![{c.title}]({c.name}.png)", "", f"_{c.caption}_", ""]
    out += ["## Runs", ""]
    out += [markdown.render(sec.lines, sec.tables) for sec in sections]
    return "\n".join(out)


def render(pages: Any, all_sites: bool = False) -> tuple[Written, dict[Path, str | bytes]]:
    """Render `pages` (workflows.report.Pages: runs, sweeps, where the HTML goes, the --out directory): what
    will be written, and each file's contents (the command writes them: store/outputs.py)."""
    sections = [html.section(p.summary, all_sites) for p in pages.runs]
    series = [plots.RunSeries.of(p.summary, p.baseline, p.steps) for p in pages.runs]
    charts = plots.charts(series, [sec.summary for sec in sections])
    fit_sections, fit_charts = scaleviews.report_parts(pages.sweeps)
    sections, charts = [*fit_sections, *sections], [*fit_charts, *charts]
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    files: dict[Path, str | bytes] = {pages.html: html.render(sections, charts, generated,
                                                              compared=pages.comparison)}
    written = Written(pages.html)
    if pages.out is not None:
        written.images = [pages.out / f"{c.name}.png" for c in charts]
        written.markdown = pages.out / MD_NAME
        for path, data in ((written.markdown, markdown_page(sections, charts, generated, pages.comparison)),
                           *zip(written.images, [c.png for c in charts], strict=True)):
            if path.resolve() == pages.html.resolve():  # one output over another: refused before writing any
                raise UserError(f"--html {pages.html}: is where the report's {path.name} goes (--out "
                                f"{pages.out}); give another file")
            files[path] = data
    return written, files
