"""GitHub-flavoured markdown, ready to paste into a PR review."""

from __future__ import annotations

from .table import Table


def table(t: Table) -> str:
    out = [f"**{t.title}**", "", "| " + " | ".join(t.columns) + " |",
           "|" + "|".join(["---"] + ["---:"] * (len(t.columns) - 1)) + "|"]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in t.rows]
    if t.note:
        out += ["", f"_{t.note}_"]
    return "\n".join(out)


def render(lines: list[str], tables: list[Table]) -> str:
    head = "\n".join(f"> {line}" if i else f"### {line}" for i, line in enumerate(lines))
    return head + "\n\n" + "\n\n".join(table(t) for t in tables) + "\n"
