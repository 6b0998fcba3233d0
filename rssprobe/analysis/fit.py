"""Fixed cost apart from per-parameter cost: every figure fitted as bytes = fixed + slope x params.

A size sweep gives, for each figure of `Summary.metrics()` (bytes per parameter above the
run's own baseline), one point (params, bytes) per finished run. Least squares over all of
them (stats.linear_fit) gives the slope in bytes per parameter and the fixed part in bytes,
each with a t-based 95% interval; with n points there are n - 2 degrees of freedom, and
with none left (two runs) there is no interval at all, which is said, not guessed.

Two sweeps are compared the standard way for two regression lines: the difference of the
slopes and of the intercepts, with the residual variance pooled over both fits (the model
with an indicator variable for the sweep and its interaction with size, whose estimates are
the two separate fits'), so 2 x 3 sizes leave 2 degrees of freedom instead of 1 per side.
A difference counts only if its interval excludes 0 AND it passes a threshold: the slope
the existing 0.25 B/param (`stats.THRESHOLD`), the fixed part FIXED_THRESHOLD.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .. import verdicts
from . import stats

LEVEL = stats.LEVEL
MIB = 2**20
# A fixed change smaller than this is not called. 8 MiB: twice the 4 MiB resolution the
# known-answer test demonstrates on trimmed RSS, well above the kernel's per-CPU RSS
# counter batching (<= 256 KB on 2 CPUs, 16 MiB only on 128-CPU hosts whose sweeps have
# more sizes), and below what one step of raw RSS swings (8-32 MiB: README, "Noise"), so a
# fixed cost a user could notice in one step is not waved through.
FIXED_THRESHOLD = 8 * MIB


@dataclass(frozen=True)
class Fit:
    """bytes = fixed + slope x params for one figure; intervals are 95% half-widths (None: dof = 0)."""

    figure: str
    n: int  # points (finished runs that have the figure)
    sizes: int  # distinct parameter counts among them
    slope_bytes_per_param: float
    fixed_bytes: float
    slope_interval: float | None
    fixed_interval: float | None
    dof: int
    worst_residual_bytes: float  # the largest |observed - fitted|, with its sign
    ssr: float  # sum of squared residuals (bytes^2), for pooling two fits
    x_mean: float
    sxx: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def fit(figure: str, params: list[float], values: list[float]) -> Fit | None:
    """Least squares of values (bytes) on params; None with fewer than 2 distinct sizes."""
    if len(params) != len(values):
        raise ValueError(f"{figure}: {len(params)} sizes but {len(values)} values")
    sizes = len(np.unique(np.asarray(params, dtype="float64")))
    if sizes < 2:
        return None
    f = stats.linear_fit(params, values)
    t = stats.t_quantile(f.dof, LEVEL)
    return Fit(figure, f.n, sizes, f.slope, f.intercept, None if t is None else t * f.se_slope,
               None if t is None else t * f.se_intercept, f.dof, f.worst_residual, f.ssr, f.x_mean, f.sxx)


def fit_all(points: list[tuple[int, dict[str, float]]]) -> list[Fit]:
    """Every figure measured in at least 2 distinct sizes; points = (params, Summary.metrics()) per run.

    Metrics are bytes per parameter; the fit is in bytes, so each is multiplied back by its run's params.
    """
    names = sorted({m for _p, metrics in points for m in metrics})
    out = []
    for name in names:
        xs = [p for p, metrics in points if name in metrics]
        ys = [metrics[name] * p for p, metrics in points if name in metrics]
        got = fit(name, xs, ys)
        if got is not None:
            out.append(got)
    return out


@dataclass(frozen=True)
class Delta:
    """B's fit minus A's for one part (slope or fixed) of one figure, with its pooled 95% interval."""

    figure: str
    part: str  # "slope" (bytes per param) or "fixed" (bytes)
    a: float
    b: float
    delta: float
    interval: float | None
    dof: int
    threshold: float
    verdict: stats.Verdict
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _verdict(delta: float, interval: float | None, threshold: float, unit: str, scale: float) -> tuple[str, str]:
    shown = f"{delta / scale:+.2f}"
    if abs(delta) < threshold:
        return verdicts.SAME, f"|change| {abs(delta) / scale:.2f} < threshold {threshold / scale:g} {unit}"
    if interval is None:
        return verdicts.UNDECIDED, "no degrees of freedom left for an interval; run more sizes or repeats"
    if abs(delta) > interval:
        word = verdicts.REGRESSION if delta > 0 else verdicts.IMPROVEMENT
        return word, f"{shown} ± {interval / scale:.2f} {unit} excludes 0 and passes {threshold / scale:g}"
    return verdicts.NOT_SIGNIFICANT, f"{shown} ± {interval / scale:.2f} {unit} includes 0 (not significant)"


def compare(a: Fit, b: Fit, slope_threshold: float = stats.THRESHOLD,
            fixed_threshold: float = FIXED_THRESHOLD) -> tuple[Delta, Delta]:
    """(slope, fixed) differences B - A with the residual variance pooled over both fits."""
    dof = a.dof + b.dof
    s2 = (a.ssr + b.ssr) / dof if dof > 0 else math.nan
    t = stats.t_quantile(dof, LEVEL)
    se_slope = math.sqrt(s2 * (1 / a.sxx + 1 / b.sxx)) if t else math.nan
    se_fixed = math.sqrt(s2 * (1 / a.n + a.x_mean**2 / a.sxx + 1 / b.n + b.x_mean**2 / b.sxx)) if t else math.nan
    out = []
    for part, va, vb, se, threshold, unit, scale in (
            ("slope", a.slope_bytes_per_param, b.slope_bytes_per_param, se_slope, slope_threshold, "B/param", 1.0),
            ("fixed", a.fixed_bytes, b.fixed_bytes, se_fixed, fixed_threshold, "MiB", MIB)):
        interval = None if t is None else t * se
        verdict, reason = _verdict(vb - va, interval, threshold, unit, scale)
        out.append(Delta(a.figure, part, va, vb, vb - va, interval, dof, threshold, verdict, reason))  # type: ignore[arg-type]
    return out[0], out[1]
