"""How far one RSS read can be off on the machine that made it: the instrument's resolution, below which no
interval of an estimate is drawn (stats.predict_sum's read_sd).

Linux (>= 6.2) holds a process's RSS in a per-CPU counter: each CPU batches up to max(32, 2 x online CPUs) pages
before folding them into the total a read (VmRSS, VmHWM, statm) sees, so one read is off by up to usable CPUs x
that batch, either way. Taken as uniform within the bound, its sd is the bound over sqrt(3). A run records its
machine's usable and online CPUs and page size (run/host.facts); a calibration, packed or not, carries the sd.
"""

from __future__ import annotations

import math
from typing import Any

PAGE = 4096  # the page of runs recorded before their host facts named it (x86-64's)


def rss_read_bound(usable_cpus: int, online_cpus: int, page_bytes: int = PAGE) -> int:
    """Bytes one RSS read on a machine of these CPUs and page can be off, either way (the tests' READ_ERROR)."""
    return usable_cpus * max(32, 2 * online_cpus) * page_bytes


def rss_read_sd(usable_cpus: int, online_cpus: int, page_bytes: int = PAGE) -> float:
    """The sd, in bytes, of one RSS read on a machine of these CPUs and page (uniform within the bound)."""
    return rss_read_bound(usable_cpus, online_cpus, page_bytes) / math.sqrt(3)


def of_host(host: dict[str, Any]) -> float:
    """The sd of one RSS read on the machine of a run's host facts; runs recorded before they said their usable
    CPUs and page size: all their CPUs and 4 KiB pages (the larger bound); 0 (not known) where no CPUs are named."""
    online = host.get("cpu_count")
    if not isinstance(online, int) or isinstance(online, bool) or online < 1:
        return 0.0
    usable, page = host.get("usable_cpus"), host.get("page_bytes")
    return rss_read_sd(usable if isinstance(usable, int) and 0 < usable <= online else online, online,
                       page if isinstance(page, int) and page > 0 else PAGE)


def packed(value: Any) -> float:
    """A packed calibration's read sd (absent: 0); ValueError for anything but a finite spread below 1 TiB."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 2**40:
        raise ValueError(f"read_sd {value!r} is not a spread in bytes")
    return float(value)
