"""The per-gate tables of reports/gate-check.md from a `make gate-check` directory (one subdirectory per gate,
holding its baseline and candidate run groups): each gate recomputed with `rssprobe gate --reference A
--candidate B --format json`, its verdict and the gated RSS-after-trim figure's delta, sds and one-sided p.

    python reports/gate-check/tables.py DIR [DIR ...]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

FIGURE = "budget.rss_after_trim_above_baseline"


def gate(directory: Path) -> tuple[Any, ...] | None:
    """(name, verdict, delta, sd a, sd b, p, live delta) of one gate directory, or None when it is not one."""
    groups = sorted(p for p in directory.iterdir() if p.is_dir())
    if len(groups) != 2:
        return None
    a, b = groups
    if "baseline" not in a.name or ("inject" in directory.name and "inject" not in b.name):
        a, b = b, a
    proc = subprocess.run([sys.executable, "-m", "rssprobe", "gate", "--reference", str(a), "--candidate", str(b),
                           "--format", "json"], capture_output=True, text=True, check=False)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        return None
    rows = {c["metric"]: c for group in data["comparisons"].values() for c in group}
    c, live = rows[FIGURE], rows["budget.live"]
    return directory.name, data["verdict"], c["delta"], c["sd_a"], c["sd_b"], c["p_increase"], live["delta"]


def report(root: Path) -> list[str]:
    rows = [r for g in sorted(root.iterdir()) if g.is_dir() and (r := gate(g))]
    aa = [r for r in rows if r[0].endswith("aa")]
    inj = [r for r in rows if r[0].endswith("inject")]
    lines = [f"\n### {root}\n",
             f"A/A: {sum(r[1] == 'regression' for r in aa)} of {len(aa)} regressions (verdicts: "
             f"{sorted({r[1] for r in aa})}); injected: {sum(r[1] == 'regression' for r in inj)} of {len(inj)} "
             "detected.",
             f"RSS after trim, delta B/param: A/A {min(r[2] for r in aa):+.3f} .. {max(r[2] for r in aa):+.3f} "
             f"(sd of the deltas {statistics.stdev([r[2] for r in aa]):.3f}); injected "
             f"{min(r[2] for r in inj):+.3f} .. {max(r[2] for r in inj):+.3f} (mean "
             f"{statistics.fmean([r[2] for r in inj]):+.3f}); largest sd within a side "
             f"{max(max(r[3], r[4]) for r in rows):.3f}; budget.live delta {max(abs(r[6]) for r in rows):.3f} "
             "everywhere.\n",
             "| gate | verdict | RSS after trim delta (B/param) | sd a / b | one-sided p |",
             "|---|---|---:|---:|---:|"]
    lines += [f"| {r[0]} | {r[1]} | {r[2]:+.3f} | {r[3]:.3f} / {r[4]:.3f} | {r[5]:.3f} |" for r in rows]
    return lines


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print("\n".join(report(Path(arg))))
