"""CSV: every table in one long file, the table title in the first column."""

from __future__ import annotations

import csv
import io

from .table import Table


def render(tables: list[Table]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    width = max(len(t.columns) for t in tables)
    writer.writerow(["table", *[f"c{i}" for i in range(width)]])
    for t in tables:
        writer.writerow([t.title, *t.columns])
        for row in t.rows:
            writer.writerow([t.title, *row])
    return buf.getvalue()
