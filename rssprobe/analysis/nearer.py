"""Where to calibrate when a target lies far beyond its calibration, and roughly how long that takes (pure).

Three sizes, the largest the smaller of the target and what one run can hold in half of the calibrating
machine's memory (the calibration's own peak bytes per parameter at its largest size, baseline included: an
over-estimate at larger sizes, so the runs fit), the others a half and a quarter of it. The time is each run's
wall time fitted against its size over the calibration's runs (a line: start-up plus steps that grow with the
model), times the repeats; runs measured on a shared machine are noisy, so it is "about".
"""

from __future__ import annotations

from typing import Any

from . import stats
from .calibration import Calibration

SHARE = 0.5  # of the calibrating machine's memory one calibration run may take


def sizes(cal: Calibration, target_params: int, memory: int | None) -> list[int]:
    """Three calibration sizes nearer the target (each at least twice the calibration's largest, or the
    target's own when the machine can hold it)."""
    largest = max(cal.points, key=lambda p: p.params)
    per_param = max(largest.peak_at(), largest.init_peak) / largest.params
    cap = int(SHARE * memory / per_param) if memory else target_params
    top = min(target_params, cap)
    return [top // 4, top // 2, top]


def seconds(cal: Calibration, at: list[int], repeats: int) -> float | None:
    """About how long runs at these sizes take, from the calibration's own wall times (None: not recorded)."""
    timed = [(float(p.params), p.wall_s) for p in cal.points if p.wall_s is not None]
    if len({x for x, _ in timed}) < 2:
        return None
    fit = stats.linear_fit([x for x, _ in timed], [float(s) for _, s in timed])  # type: ignore[misc]
    return repeats * sum(max(fit.intercept + fit.slope * n, 0.0) for n in at)


def advice(cal: Calibration, target_params: int, memory: int | None, repeats: int) -> dict[str, Any]:
    at = sizes(cal, target_params, memory)
    return {"params": at, "seconds": seconds(cal, at, repeats), "repeats": repeats,
            "largest_calibrated": max(cal.params), "reaches": at[-1] >= target_params}
