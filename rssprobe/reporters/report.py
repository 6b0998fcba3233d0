"""Report assembly: the runs a report shows (workflows/report.py collects them) -> one self-contained HTML
page and, given a directory, PNG charts and a markdown page."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..analysis.results import Comparison
from ..errors import UserError
from . import diffviews, html, markdown, output, plots, scaleviews
from .view import View

HTML_NAME = "report.html"
MD_NAME = "report.md"


@dataclass
class Written:
    """What write() wrote, so the CLI can print it and tests can open it."""

    html: Path
    markdown: Path | None = None
    images: list[Path] = field(default_factory=list)


def markdown_page(sections: list[html.Section], charts: list[plots.Chart], generated: str,
                  compared: Comparison | None = None, answer: list[str] | None = None) -> str:
    """report.md: the answer first, then (two runs or groups) what `diff` shows, the charts linked as sibling PNG
    files, and every run's tables folded (the same tables as `show --format markdown`)."""
    out = ["# rssprobe report", "", output.markdown_text(View(answer, answer=answer or [])).rstrip("\n"), "",
           markdown.line(f"generated {generated}; every figure is bytes per parameter above the run's own "
                         "pre-model baseline"), ""]
    if compared:
        out += ["## Key figures: B against A (rssprobe diff)", "",
                output.markdown_text(View(compared, diffviews.header_lines(compared),
                                          diffviews.lead_tables(compared, compact=True))), ""]
    out += ["## Charts", ""]
    for c in charts:
        out += [f"![{markdown.escape(c.title)}]({c.name}.png)", "", markdown.line(c.caption), ""]
    out += ["## Runs", ""]
    out += [markdown.folded(f"{html.run_title(sec)}: {(sec.summary.get('answer') or [''])[0]}", sec.tables,
                            lines=sec.lines) for sec in sections]
    return "\n".join(out)


def render(pages: Any, all_sites: bool = False) -> tuple[Written, dict[Path, str | bytes]]:
    """Render `pages` (workflows.report.Pages: runs, sweeps, where the HTML goes, the --out directory): what
    will be written, and each file's contents (the command writes them: store/outputs.py)."""
    sections = [html.section(p.summary, all_sites) for p in pages.runs]
    series = [plots.RunSeries.of(p.summary, p.baseline, p.steps, p.side, p.side_name) for p in pages.runs]
    charts = plots.charts(series, [p.summary for p in pages.runs], pages.comparison)
    fit_sections, fit_charts = scaleviews.report_parts(pages.sweeps)
    sections, charts = [*fit_sections, *sections], [*fit_charts, *charts]
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    files: dict[Path, str | bytes] = {pages.html: html.render(sections, charts, generated, compared=pages.comparison,
                                                              answer=pages.answer, verdict=pages.verdict)}
    written = Written(pages.html)
    if pages.out is not None:
        written.images = [pages.out / f"{c.name}.png" for c in charts]
        written.markdown = pages.out / MD_NAME
        contents: list[tuple[Path, str | bytes]] = [
            (written.markdown, markdown_page(sections, charts, generated, pages.comparison, pages.answer)),
            *zip(written.images, [c.png for c in charts], strict=True)]
        for path, data in contents:
            if path.resolve() == pages.html.resolve():  # one output over another: refused before writing any
                raise UserError(f"--html {pages.html}: is where the report's {path.name} goes (--out "
                                f"{pages.out}); give another file")
            files[path] = data
    return written, files
