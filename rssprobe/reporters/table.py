"""A plain table (title, columns, rows, note), and how figures read in one. Every output format renders
these, so the terminal, markdown, CSV and HTML outputs always show the same figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NA = "n/a"


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    note: str = ""

    def numeric(self, i: int) -> bool:
        """Whether column i holds numbers (or n/a) only: renderers right-align those."""
        return i > 0 and all(_is_number(row[i]) for row in self.rows)


def _is_number(cell: object) -> bool:
    text = str(cell).split(" ")[0].replace(",", "")
    if text == NA:
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


def bpp(value: float | None, signed: bool = False) -> str:
    if value is None:
        return NA
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def mib(value: float | None) -> str:
    return NA if value is None else f"{value / 2**20:.1f}"
