"""One self-contained HTML page: charts as base64 PNG data URIs, tables from `views`.

No external assets (CSS inline, images embedded), so the file can be mailed, attached to an
issue or opened offline and still show everything. All text goes through `html.escape`:
run labels, errors and site names come from files and are not trusted markup.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from html import escape
from typing import Any

from . import diffviews, views
from .plots import Chart, run_name
from .table import Table

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;
color:#222}
h1{margin-bottom:.2em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}
h3{margin:.2em 0}.meta{color:#666}
figure{margin:1.5em 0}figure img{max-width:100%;border:1px solid #eee}figcaption{color:#555;font-size:13px}
section.run{border:1px solid #ddd;border-left:6px solid #3a7;border-radius:4px;padding:.8em 1em;margin:1.5em 0}
section.run.bad{border-left-color:#c22;background:#fff6f6}
.badge{display:inline-block;padding:.1em .6em;border-radius:3px;font-weight:bold;font-size:12px;color:#fff;
background:#3a7;vertical-align:middle}
.badge.bad{background:#c22}
.banner{background:#c22;color:#fff;font-weight:bold;padding:.4em .8em;border-radius:3px;margin:.5em 0}
.warn{background:#fff3cd;border:1px solid #e0c060;padding:.4em .8em;border-radius:3px;margin:.5em 0}
ul.header{list-style:none;padding:0;margin:.5em 0;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px}
table{border-collapse:collapse;margin:1em 0 .2em;font-size:13px}
caption{text-align:left;font-weight:bold;padding-bottom:.3em}
th,td{border:1px solid #ddd;padding:.2em .6em}th{background:#f4f4f4}
td:first-child{white-space:pre}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr:nth-child(even) td{background:#fafafa}.note{color:#666;font-size:12px;margin:0 0 1em;font-style:italic}
nav ul{padding-left:1.2em}
"""


@dataclass(frozen=True)
class Section:
    """One run as the page shows it; `lines` and `tables` come from `views`, so every format agrees."""

    summary: dict[str, Any]
    lines: list[str]
    tables: list[Table]

    @property
    def ok(self) -> bool:
        return self.summary.get("status") == "ok"


def patches_line(s: dict[str, Any]) -> str:
    """The requested patches and whether each took effect: a patch that never ran proves nothing."""
    items = s.get("interventions") or []
    if not items:
        return "patches: none"
    return "patches: " + ", ".join(
        f"{i['spec']} ({'took effect' if i['took_effect'] else 'NEVER took effect'}, {i['count']} {i['counter']})"
        for i in items)


def section(summary: dict[str, Any], all_sites: bool = False) -> Section:
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


def _anchor(s: dict[str, Any]) -> str:
    return "run-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in str(s["run"]))


def _badge(sec: Section) -> str:
    status = str(sec.summary.get("status") or "unknown")
    return f'<span class="badge{"" if sec.ok else " bad"}">{escape(status.upper())}</span>'


def run_section(sec: Section) -> str:
    s = sec.summary
    parts = [f'<section class="run{"" if sec.ok else " bad"}" id="{escape(_anchor(s))}">',
             f"<h3>{escape(run_name(s))} {_badge(sec)}</h3>"]
    if not sec.ok:
        reason = s.get("error") or "no error message recorded"
        parts.append(f'<div class="banner">{escape(str(s.get("status") or "unknown").upper())}: '
                     f"{escape(str(reason))}</div>")
    if s.get("never_took_effect"):
        parts.append(f'<div class="warn">Requested patch never took effect: {escape(", ".join(s["never_took_effect"]))}'
                     " &mdash; this run proves nothing about it.</div>")
    parts.append('<ul class="header">' + "".join(f"<li>{escape(line)}</li>" for line in sec.lines) + "</ul>")
    parts += [table(t) for t in sec.tables]
    parts.append("</section>")
    return "\n".join(parts)


def figure(chart: Chart) -> str:
    return (f'<figure id="chart-{escape(chart.name)}"><img alt="{escape(chart.title)}" src="{data_uri(chart.png)}">'
            f"<figcaption>{escape(chart.caption)}</figcaption></figure>")


def comparison(r: dict[str, Any]) -> str:
    """Two runs or groups compared, as `rssprobe diff A B` says it: the verdict, what differs, the gated figures."""
    verdict = escape(" ".join(r["answer"]))
    return "\n".join([f'<h2>Comparison: B against A (rssprobe diff)</h2>\n<p class="verdict">{verdict}</p>',
                      *[table(t) for t in diffviews.lead_tables(r)]])


def render(sections: list[Section], charts: list[Chart], generated: str, title: str = "rssprobe report",
           compared: dict[str, Any] | None = None) -> str:
    """The whole page: run index, the comparison of two (`compared`), charts, then one section per run (header,
    phases, budget, sites, patches)."""
    index = "".join(f'<li><a href="#{escape(_anchor(sec.summary))}">{escape(run_name(sec.summary))}</a> '
                    f"{_badge(sec)} scenario {escape(str(sec.summary.get('scenario')))}</li>" for sec in sections)
    failed = sum(not sec.ok for sec in sections)
    alarm = (f'<div class="banner">{failed} of {len(sections)} runs did not finish ok; their figures cover only '
             "what was measured before they stopped.</div>") if failed else ""
    body = "\n".join([
        f"<h1>{escape(title)}</h1>",
        f'<p class="meta">generated {escape(generated)}; every figure is bytes per parameter above the run\'s '
        "own pre-model baseline (RSS after imports and op loading).</p>",
        alarm,
        f"<nav><ul>{index}</ul></nav>",
        comparison(compared) if compared else "",
        "<h2>Charts</h2>",
        *[figure(c) for c in charts],
        "<h2>Runs</h2>",
        *[run_section(sec) for sec in sections],
    ])
    return (f'<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{escape(title)}</title>\n'
            f"<style>{CSS}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n")
