"""Is a difference between two sets of repeats real? A threshold AND a rank/permutation test.

As asv does: a change is called only if it is large enough to matter (a practical
threshold in bytes per parameter) and the samples say the distributions differ. The test
is an exact one-sided permutation test on the difference of means, which is exact for the
small N of memory repeats and, unlike the Mann-Whitney U tables, handles ties (identical
census figures are common). With N = 3 against 3 its smallest possible p is 1/20 = 0.05,
so alpha defaults to 0.05; fewer repeats can never be significant and are "undecided".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from math import comb
from statistics import fmean, stdev
from typing import Any

import numpy as np
from scipy import stats

from ..verdicts import Verdict

ALPHA = 0.05
THRESHOLD = 0.25  # bytes per parameter


@dataclass(frozen=True)
class Comparison:
    metric: str
    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    sd_a: float | None
    sd_b: float | None
    delta: float
    p_increase: float | None  # one-sided p that B > A
    p_decrease: float | None
    verdict: Verdict
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def smallest_p(n_a: int, n_b: int) -> float:
    """The smallest one-sided p an exact permutation test can give for these sample sizes."""
    return 1 / comb(n_a + n_b, n_a)


def _p(a: list[float], b: list[float], alternative: str) -> float:
    if np.allclose(a + b, a[0]):
        return 1.0  # all identical: no evidence of any difference
    result = stats.permutation_test((np.asarray(b), np.asarray(a)), lambda x, y: np.mean(x) - np.mean(y),
                                    permutation_type="independent", alternative=alternative,
                                    n_resamples=9999, random_state=0)
    return float(result.pvalue)


def compare(metric: str, a: list[float], b: list[float], threshold: float = THRESHOLD,
            alpha: float = ALPHA) -> Comparison:
    """Compare B against A for a metric where higher is worse (memory)."""
    if not a or not b:
        raise ValueError(f"{metric}: no samples")
    mean_a, mean_b = fmean(a), fmean(b)
    delta = mean_b - mean_a
    sd_a = stdev(a) if len(a) > 1 else None
    sd_b = stdev(b) if len(b) > 1 else None
    decidable = smallest_p(len(a), len(b)) <= alpha
    p_up = _p(a, b, "greater") if decidable else None
    p_down = _p(a, b, "less") if decidable else None
    if abs(delta) < threshold:
        verdict, reason = "same", f"|change| {abs(delta):.2f} < threshold {threshold}"
    elif not decidable:
        verdict, reason = "undecided", (f"{len(a)} vs {len(b)} repeats cannot reach p <= {alpha} "
                                        f"(smallest p {smallest_p(len(a), len(b)):.3f}); run more repeats")
    elif delta > 0 and p_up is not None and p_up <= alpha:
        verdict, reason = "regression", f"+{delta:.2f} >= {threshold} and p = {p_up:.3f} <= {alpha}"
    elif delta < 0 and p_down is not None and p_down <= alpha:
        verdict, reason = "improvement", f"{delta:.2f} and p = {p_down:.3f} <= {alpha}"
    else:
        p = p_up if delta > 0 else p_down
        verdict, reason = "~", f"change {delta:+.2f} passes the threshold but is not significant (p = {p:.3f})"
    return Comparison(metric, len(a), len(b), mean_a, mean_b, sd_a, sd_b, delta, p_up, p_down, verdict, reason)


@dataclass(frozen=True)
class PairedRatio:
    """A ratio B/A from paired samples: the geometric mean of the pairs' ratios, with a t interval."""

    ratio: float
    low: float
    high: float
    pairs: int
    confidence: float

    @property
    def half_width(self) -> float:
        """The interval's larger half-width, relative to the ratio (0.004 = +-0.4%)."""
        return max(self.high / self.ratio - 1, 1 - self.low / self.ratio)


def paired_ratio(a: list[float], b: list[float], confidence: float = 0.95) -> PairedRatio:
    """b[i] / a[i] over pairs measured side by side: Student's t interval on the mean of the log ratios
    (pairs are independent, their log ratios near-normal; the log keeps on/off and off/on symmetric)."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError("paired_ratio: needs two or more pairs")
    logs = np.log(np.asarray(b, dtype=float) / np.asarray(a, dtype=float))
    mean, sem = float(logs.mean()), float(logs.std(ddof=1) / np.sqrt(len(logs)))
    t = float(stats.t.ppf(0.5 + confidence / 2, len(logs) - 1))
    return PairedRatio(float(np.exp(mean)), float(np.exp(mean - t * sem)), float(np.exp(mean + t * sem)),
                       len(logs), confidence)


@dataclass(frozen=True)
class Estimate:
    """A figure with its two-sided t interval; low/high are None when the samples cannot give one."""

    value: float
    low: float | None
    high: float | None
    n: int
    confidence: float

    def scaled(self, factor: float) -> Estimate:
        low = None if self.low is None else self.low * factor
        high = None if self.high is None else self.high * factor
        return Estimate(self.value * factor, low, high, self.n, self.confidence)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def mean_interval(values: list[float], confidence: float = 0.95) -> Estimate:
    """Mean with a Student t interval (no interval from one sample)."""
    mean = fmean(values)
    if len(values) < 2:
        return Estimate(mean, None, None, len(values), confidence)
    half = float(stats.t.ppf(0.5 + confidence / 2, len(values) - 1)) * stdev(values) / len(values) ** 0.5
    return Estimate(mean, mean - half, mean + half, len(values), confidence)


def slope_interval(x: list[float], y: list[float], confidence: float = 0.95) -> Estimate:
    """Least-squares slope of y on x with a t interval on n - 2 degrees of freedom (none below 3 points)."""
    if len(x) < 2:
        raise ValueError("a slope needs two points")
    fit = stats.linregress(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
    if len(x) < 3:
        return Estimate(float(fit.slope), None, None, len(x), confidence)
    half = float(stats.t.ppf(0.5 + confidence / 2, len(x) - 2)) * float(fit.stderr)
    return Estimate(float(fit.slope), float(fit.slope) - half, float(fit.slope) + half, len(x), confidence)


def interval(a: list[float], b: list[float], level: float = 0.95) -> float | None:
    """Half-width of a Welch t interval for mean(b) - mean(a); None with fewer than 2 repeats a side."""
    if len(a) < 2 or len(b) < 2:
        return None
    if np.var(a) == 0 and np.var(b) == 0:  # identical repeats (census figures): the difference is exact
        return 0.0
    ci = stats.ttest_ind(b, a, equal_var=False).confidence_interval(level)
    return float(ci.high - ci.low) / 2
