"""The reporter protocol: a view (kinds.py names one per result kind) returns a View; output.render turns any View
into any format. A view decides what is said (the answer, the context lines, the key tables, the detail tables);
a format only decides how, so no format knows which kind of result it renders."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .table import Table


@dataclass(frozen=True)
class View:
    """What a result shows, in the order every format keeps: the answer sentences, the context lines, the key
    tables, then the detail tables (terminal: behind --all; markdown: folded; CSV: all)."""

    data: object  # the result itself: what JSON prints
    lines: Sequence[str] = ()
    tables: Sequence[Table] = ()
    alarm: bool = False  # the answer and header in red (terminal): a failed run, a regression, a patch with no effect
    answer: Sequence[str] = ()
    details: Sequence[Table] = ()
    details_summary: str = ""  # what the detail tables are, named where they are left out or folded
    closing: str = ""  # one line after it in every format but JSON (the estimate's provision line)
    aside: str = ""  # terminal only, on stderr after it (a failed run's last worker output)
