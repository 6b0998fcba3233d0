"""The measurement noise every tolerance on an RSS difference is derived from.

Linux (>= 6.2) keeps a process's RSS in a per-CPU counter: each CPU batches up to
`percpu_counter_batch` = max(32, 2 x online CPUs) pages before folding them into the total that
/proc/self/statm (and VmRSS, VmHWM) report, so one read can be off by up to
(CPUs the process may run on) x batch pages, either way. Here: 2 x 32 x 4 KiB = 256 KiB, which is
0.0624 B/param of the tiny scenario's 4.2 M params.

A figure built from n reads (a site's retained bytes: 2 per call; its exclusive bytes: 2 per call
of its own and of every directly nested site's call; the difference of two runs: both runs' reads)
is then off by at most n x READ_ERROR. Tests assert within that bound: never tighter than the noise.
"""

from __future__ import annotations

import os

from rssprobe.analysis.readnoise import rss_read_bound

PAGE = os.sysconf("SC_PAGE_SIZE")
ONLINE_CPUS = os.cpu_count() or 1
USABLE_CPUS = len(os.sched_getaffinity(0))
READ_ERROR = rss_read_bound(USABLE_CPUS, ONLINE_CPUS, PAGE)  # bytes one RSS read can be off (the formula above)


def bound(reads: float, params: int) -> float:
    """B/param that a figure made of `reads` RSS reads can be off by."""
    return reads * READ_ERROR / params
