"""Rich tables for the terminal: the answer first, then the context lines, the key tables, and how to see the rest."""

from __future__ import annotations

import os

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from .table import Table


def make_console() -> Console:
    out = Console()
    if not out.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        out = Console(width=160)  # piped or captured: do not squeeze tables to 80 columns (unless COLUMNS says)
    return out


def render(lines: list[str], tables: list[Table], console: Console | None = None, alarm: bool = False,
           answer: list[str] | tuple[str, ...] = (), hint: str = "") -> None:
    """alarm: show the answer and the header in red (a failed run, a patch that never took effect, a regression).
    hint: one line after the tables saying what was left out and how to see it (--all)."""
    out = console or make_console()
    for sentence in answer:
        out.print(sentence, style="bold red" if alarm else "bold", markup=False, highlight=False)
    if answer:
        out.print()
    for line in lines:
        red = alarm and ((line is lines[0] and not answer) or line.startswith("WARNING"))
        out.print(line, style="bold red" if red else None, markup=False, highlight=False)
    for t in tables:
        rt = RichTable(title=escape(t.title), title_justify="left", caption=escape(t.note) if t.note else None,
                       caption_justify="left")
        for i, col in enumerate(t.columns):
            # fold, never "…": two names that share a prefix must not print alike in a narrow terminal
            rt.add_column(escape(col), justify="right" if t.numeric(i) else "left", overflow="fold",
                          no_wrap=t.numeric(i))  # a number never wraps apart
        for row in t.rows:
            rt.add_row(*[escape(str(c)) for c in row])
        out.print(rt)
    if hint:
        out.print(hint, style="dim", markup=False, highlight=False)

