"""Rich tables for the terminal."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from .table import Table


def render(lines: list[str], tables: list[Table], console: Console | None = None, alarm: bool = False) -> None:
    """alarm: show the header in red (a failed run, a patch that never took effect)."""
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=160)  # piped or captured: do not squeeze tables to 80 columns
    for line in lines:
        red = alarm and (line is lines[0] or line.startswith("WARNING"))
        console.print(line, style="bold red" if red else None, markup=False, highlight=False)
    for t in tables:
        rt = RichTable(title=escape(t.title), title_justify="left", caption=escape(t.note) if t.note else None,
                       caption_justify="left")
        for i, col in enumerate(t.columns):
            rt.add_column(escape(col), justify="right" if t.numeric(i) else "left")
        for row in t.rows:
            rt.add_row(*[escape(str(c)) for c in row])
        console.print(rt)
