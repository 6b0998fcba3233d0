"""GitHub-flavoured markdown, ready to paste into a PR review or an issue.

What GitHub renders is what a reviewer reads (tests/test_markdown.py renders it with cmark-gfm, GitHub's own
renderer): every text from a figure name, a label or a file is escaped, so `role.*` or `*_predicted` is never
emphasis and `~` never strikethrough; a legend is a sentence, not a blockquote that turns into a list; the answer
comes first as a paragraph; the key tables are short, and the full tables fold under <details>.
"""

from __future__ import annotations

import html
import re

from .table import Table

# CommonMark lets a backslash escape any ASCII punctuation; these are the ones that can start emphasis, code,
# links, raw HTML, a table cell, an entity or GFM's strikethrough anywhere in a line
_INLINE = re.compile(r"([\\`*_\[\]<>|~&])")
# and these only where a paragraph's line begins: a heading, a quote, a list item, a thematic break
_MARKER = re.compile(r"^(\s*)([#>+=*-])(?=\s|$)")
_NUMBERED = re.compile(r"^(\s*\d+)([.)])(?=\s|$)")


def escape(text: object) -> str:
    """Plain text as markdown that renders as exactly that text inline (in a table cell, within a line)."""
    return _INLINE.sub(r"\\\1", str(text)).replace("\n", " ")


def line(text: object) -> str:
    """Plain text as a paragraph's line: escaped inline, and not read as a heading, quote or list item."""
    out = escape(text)
    out = _MARKER.sub(lambda m: m.group(1) + "\\" + m.group(2), out)
    return _NUMBERED.sub(lambda m: m.group(1) + "\\" + m.group(2), out)


def table(t: Table) -> str:
    numeric = [bool(t.rows) and t.numeric(i) for i in range(len(t.columns))]
    out = [f"**{escape(t.title)}**", "", "| " + " | ".join(escape(c) for c in t.columns) + " |",
           "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    out += ["| " + " | ".join(escape(c) for c in row) + " |" for row in t.rows]
    if t.note:  # plain, not italics: the test of "no emphasis anywhere" stays strict
        out += ["", line(t.note)]
    return "\n".join(out)


def folded(summary: str, tables: list[Table], lines: list[str] | None = None) -> str:
    """Tables (after context lines) under a <details> fold (GitHub renders markdown inside it after a blank
    line); the summary is plain text."""
    body = "\n\n".join([*(["  \n".join(line(text) for text in lines)] if lines else []), *(table(t) for t in tables)])
    return f"<details>\n<summary>{html.escape(summary)}</summary>\n\n{body}\n\n</details>"


def render(lines: list[str], tables: list[Table], answer: list[str] | tuple[str, ...] = (),
           details: list[Table] | tuple[Table, ...] = (), details_summary: str = "") -> str:
    """The answer as the first paragraph (its first sentence bold), the context lines as one paragraph with line
    breaks, the key tables, then the rest folded."""
    blocks = []
    if answer:
        first, *rest = answer
        blocks.append(" ".join([f"**{line(first)}**", *(escape(s) for s in rest)]))
    if lines:
        blocks.append("  \n".join(line(text) for text in lines))
    blocks += [table(t) for t in tables]
    if details:
        blocks.append(folded(details_summary or "All figures", list(details)))
    return "\n\n".join(blocks) + "\n"
