"""One self-contained HTML page: charts as base64 PNG data URIs, tables from `views`.

No external assets (CSS inline, images embedded), so the file can be mailed, attached to an
issue or opened offline and still show everything. All text goes through `html.escape`:
run labels, errors and site names come from files and are not trusted markup.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from html import escape
from typing import TypedDict

from .. import verdicts
from ..analysis.results import Comparison, RunSummary
from ..contract.status import Status
from . import diffviews, views
from .plots import Chart, run_name
from .table import Table

CSS = """
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1150px;padding:0 1em;
color:#222}
h1{font-size:18px;margin:0 0 .4em;color:#555;font-weight:600}
h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:1.8em;font-size:20px}
.meta{color:#666;font-size:13px}
header.answer{border-radius:6px;padding:1em 1.3em;margin:.3em 0 1em;border:1px solid;border-left-width:8px}
header.answer p{margin:.35em 0}header.answer p.lead{font-size:19px;font-weight:600;line-height:1.4}
header.answer .kicker{font-size:12px;letter-spacing:.06em;text-transform:uppercase;font-weight:700}
header.pass,header.same,header.improvement{background:#eef8ee;border-color:#2e7d32;color:#173d19}
header.regression,header.failed{background:#fdecec;border-color:#c62828;color:#5a1010}
header.undecided,header.not-significant{background:#fff6e0;border-color:#c77800;color:#4d3300}
header.info{background:#eef3fb;border-color:#2a5ea8;color:#12315c}
figure{margin:1.2em 0}figure img{max-width:100%;border:1px solid #eee}figcaption{color:#555;font-size:13px}
details.run{border:1px solid #ddd;border-left:6px solid #3a7;border-radius:4px;padding:.5em 1em;margin:.8em 0}
details.run.bad{border-left-color:#c22;background:#fff6f6}
details.run>summary{cursor:pointer;font-weight:600}
.banner{background:#c22;color:#fff;font-weight:bold;padding:.4em .8em;border-radius:3px;margin:.5em 0}
.warn{background:#fff3cd;border:1px solid #e0c060;padding:.4em .8em;border-radius:3px;margin:.5em 0}
ul.header{list-style:none;padding:0;margin:.5em 0;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px}
table{border-collapse:collapse;margin:1em 0 .2em;font-size:13px}
caption{text-align:left;font-weight:bold;padding-bottom:.3em}
th,td{border:1px solid #ddd;padding:.2em .6em}th{background:#f4f4f4}
td:first-child{white-space:pre}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr:nth-child(even) td{background:#fafafa}.note{color:#666;font-size:12px;margin:0 0 1em}
"""
LEAD_CHART = "change"  # a comparison's change chart comes right under the answer (plots.comparison_chart)
# the page's colour follows the comparison's verdict (rssprobe.verdicts' TABLE: css, kicker); a page of runs is "info"


class SectionHead(TypedDict, total=False):
    """What a section's fold reads of a run's summary: a size sweep's section (scaleviews) has these only."""

    run: str
    label: str | None
    status: str
    scenario: str | None
    answer: list[str]
    error: str | None
    never_took_effect: list[str]


@dataclass(frozen=True)
class Section:
    """One run as the page shows it; `lines` and `tables` come from `views`, so every format agrees."""

    summary: RunSummary | SectionHead
    lines: list[str]
    tables: list[Table]

    @property
    def ok(self) -> bool:
        return self.summary.get("status") == Status.OK


def patches_line(s: RunSummary) -> str:
    """The requested patches and whether each took effect: a patch that never ran proves nothing."""
    items = s.get("interventions") or []
    if not items:
        return "patches: none"
    return "patches: " + ", ".join(
        f"{i['spec']} ({'took effect' if i['took_effect'] else 'NEVER took effect'}, {i['count']} {i['counter']})"
        for i in items)


def section(summary: RunSummary, all_sites: bool = False) -> Section:
    return Section(summary, [*views.header_lines(summary), patches_line(summary)],
                   views.run_tables(summary, all_sites=all_sites))


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def table(t: Table) -> str:
    """A Table as HTML; numeric columns right-aligned like the terminal's."""
    numeric = [bool(t.rows) and t.numeric(i) for i in range(len(t.columns))]
    head = "".join(f"<th>{escape(c)}</th>" for c in t.columns)
    cell = ['<td class="num">' if n else "<td>" for n in numeric]
    body = "\n".join("<tr>" + "".join(f"{cell[i]}{escape(str(c))}</td>" for i, c in enumerate(row)) + "</tr>"
                     for row in t.rows)
    out = (f"<table>\n<caption>{escape(t.title)}</caption>\n<thead><tr>{head}</tr></thead>\n"
           f"<tbody>\n{body}\n</tbody>\n</table>")
    if t.note:
        out += f'\n<p class="note">{escape(t.note)}</p>'
    return out


def _anchor(s: RunSummary | SectionHead) -> str:
    return "run-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in str(s["run"]))


def run_title(sec: Section) -> str:
    """'baseline run-01 (ok)': a run's fold heading."""
    return f"{run_name(sec.summary)}: {sec.summary.get('status') or 'unknown'}"


def run_section(sec: Section) -> str:
    """One run, folded (open when it did not finish ok: that is what a reader must see)."""
    s = sec.summary
    answer = " ".join(s.get("answer") or [])
    parts = [f'<details class="run{"" if sec.ok else " bad"}" id="{escape(_anchor(s))}"'
             f'{"" if sec.ok else " open"}>',
             f"<summary>{escape(run_title(sec))}</summary>", f"<p>{escape(answer)}</p>" if answer else ""]
    if not sec.ok:
        reason = s.get("error") or "no error message recorded"
        parts.append(f'<div class="banner">{escape(str(s.get("status") or "unknown").upper())}: '
                     f"{escape(str(reason))}</div>")
    if s.get("never_took_effect"):
        parts.append(f'<div class="warn">Requested patch never took effect: {escape(", ".join(s["never_took_effect"]))}'
                     " &mdash; this run proves nothing about it.</div>")
    parts.append('<ul class="header">' + "".join(f"<li>{escape(line)}</li>" for line in sec.lines) + "</ul>")
    parts += [table(t) for t in sec.tables]
    parts.append("</details>")
    return "\n".join(parts)


def figure(chart: Chart) -> str:
    """A chart as a figure; a chart of figures carries what it drew as data-points (JSON), so a reader's script,
    or a test, can check the picture's numbers against the table's."""
    points = f' data-points="{escape(json.dumps(chart.points))}"' if chart.points is not None else ""
    return (f'<figure id="chart-{escape(chart.name)}"{points}><img alt="{escape(chart.title)}" '
            f'src="{data_uri(chart.png)}"><figcaption>{escape(chart.caption)}</figcaption></figure>')


def answer_banner(answer: list[str], verdict: str | None, failed: int) -> str:
    """The page's first screen: the answer, coloured by the verdict (or red when a run did not finish)."""
    meaning = verdicts.TABLE.get(verdict or "")  # the verdict's banner: its class and word (rssprobe/verdicts.py)
    kind = "failed" if failed and verdict is None else meaning.css if meaning else "info"
    kicker = meaning.kicker if meaning else "Runs did not finish" if failed else "What these runs hold"
    first, *rest = answer or ["(no answer: nothing was measured)"]
    return "\n".join([f'<header class="answer {kind}" id="answer">', f'<div class="kicker">{escape(kicker)}</div>',
                      f'<p class="lead">{escape(first)}</p>', *(f"<p>{escape(x)}</p>" for x in rest), "</header>"])


def comparison(r: Comparison) -> str:
    """Two runs or groups compared, as `rssprobe diff A B` shows it: what was compared, the key figures, what
    differs (the answer is the page's banner)."""
    lines = "".join(f"<li>{escape(line)}</li>" for line in diffviews.header_lines(r))
    return "\n".join(["<h2>Key figures: B against A</h2>", f'<ul class="header">{lines}</ul>',
                      *[table(t) for t in diffviews.lead_tables(r)]])


def render(sections: list[Section], charts: list[Chart], generated: str, title: str = "rssprobe report",
           compared: Comparison | None = None, answer: list[str] | None = None,
           verdict: str | None = None) -> str:
    """The whole page: the answer (a banner coloured by the verdict), the key figures of a comparison, the charts
    (the comparison's change chart first), then every run folded (open if it did not finish)."""
    failed = sum(not sec.ok for sec in sections)
    alarm = (f'<div class="banner">{failed} of {len(sections)} runs did not finish ok; their figures cover only '
             "what was measured before they stopped.</div>") if failed else ""
    body = "\n".join([
        f"<h1>{escape(title)}</h1>",
        answer_banner(answer or [], verdict, failed),
        f'<p class="meta">generated {escape(generated)}; every figure is bytes per parameter above the run\'s '
        "own pre-model baseline (RSS after imports and op loading).</p>",
        alarm,
        *[figure(c) for c in charts if c.name == LEAD_CHART],
        comparison(compared) if compared else "",
        "<h2>Charts</h2>",
        *[figure(c) for c in charts if c.name != LEAD_CHART],
        f"<h2>Runs ({len(sections)})</h2>",
        *[run_section(sec) for sec in sections],
    ])
    return (f'<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>{escape(title)}</title>\n'
            f"<style>{CSS}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n")
