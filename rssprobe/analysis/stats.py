"""THE statistics of rssprobe: t quantiles, means and spreads, intervals, least-squares fits, and whether a
difference between two sets of repeats is real (a threshold AND a permutation test).

Every interval, every mean/sd and every slope any figure or table shows comes from here (analysis/fit.py
fits a figure per size on top of linear_fit). A verdict is a word of rssprobe.verdicts.

Whether a difference is real, as asv does: a change is called only if it is large enough to matter (a practical
threshold in bytes per parameter) and the samples say the distributions differ. The test
is an exact one-sided permutation test on the difference of means, which is exact for the
small N of memory repeats and, unlike the Mann-Whitney U tables, handles ties (identical
census figures are common). With N = 3 against 3 its smallest possible p is 1/20 = 0.05,
so alpha defaults to 0.05; fewer repeats can never be significant and are "undecided".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from math import comb
from statistics import fmean, stdev
from typing import Any

import numpy as np

from .. import verdicts
from ..verdicts import Verdict

ALPHA = 0.05
THRESHOLD = 0.25  # bytes per parameter
LEVEL = 0.95  # every interval's confidence


def _scipy() -> Any:
    """scipy.stats, imported on first use (~0.5 s): only the tests between repeats need it, not every command
    that shows a run (fits and intervals use numpy and scipy.special)."""
    from scipy import stats

    return stats


def t_quantile(dof: float, level: float = LEVEL) -> float | None:
    """Student's t quantile for a two-sided `level` interval; None without degrees of freedom."""
    from scipy.special import stdtrit  # the inverse of Student's t CDF (what scipy.stats.t.ppf calls)

    return float(stdtrit(dof, 0.5 + level / 2)) if dof > 0 else None


def mean_sd(values: list[float]) -> tuple[float | None, float | None]:
    """(mean, sample sd) of repeats; None for what cannot be computed (no values; one value has no sd)."""
    return (fmean(values) if values else None), (stdev(values) if len(values) > 1 else None)


@dataclass(frozen=True)
class LinearFit:
    """y = intercept + slope x by least squares, with standard errors and what pooling two fits needs."""

    slope: float
    intercept: float
    se_slope: float
    se_intercept: float
    n: int
    dof: int
    ssr: float  # sum of squared residuals
    x_mean: float
    sxx: float
    worst_residual: float  # the largest |observed - fitted|, with its sign


def linear_fit(x: list[float], y: list[float]) -> LinearFit:
    """Least squares of y on x from the covariance matrix (numpy.cov, as scipy.stats.linregress computes it,
    without importing scipy.stats: ~0.5 s of every `show`); a line through its points fits exactly (residuals
    and standard errors 0, which numpy.polyfit's SVD does not give), and so does a constant y."""
    xs, ys = np.asarray(x, dtype="float64"), np.asarray(y, dtype="float64")
    cov = np.cov(xs, ys, bias=True)
    if not cov[0, 0] > 0:
        raise ValueError("a line needs two distinct x values")
    slope = float(cov[0, 1] / cov[0, 0])
    icept = float(ys.mean() - slope * xs.mean())
    residuals = ys - (icept + slope * xs)
    ssr = float(np.sum(residuals**2))
    n, sxx = len(xs), float(np.sum((xs - xs.mean()) ** 2))
    # the standard errors from the residuals (not scipy.stats.linregress's: its sqrt((1 - r^2) ...) turns nan when
    # rounding makes r^2 of nearly collinear points, three steps say, exceed 1)
    s2 = ssr / (n - 2) if n > 2 else 0.0
    se_slope, se_intercept = math.sqrt(s2 / sxx), math.sqrt(s2 * (1 / n + float(xs.mean()) ** 2 / sxx))
    return LinearFit(slope, icept, se_slope, se_intercept, n, n - 2, ssr, float(xs.mean()),
                     sxx, float(residuals[np.argmax(np.abs(residuals))]))


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
    interval: float | None = None  # half-width of the 95% Welch t interval of delta (None below 2 repeats a side)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def smallest_p(n_a: int, n_b: int) -> float:
    """The smallest one-sided p an exact permutation test can give for these sample sizes."""
    return 1 / comb(n_a + n_b, n_a)


def least_repeats(alpha: float) -> int:
    """The fewest repeats a side (n vs n) whose exact permutation test can reach p <= alpha."""
    n = 1
    while smallest_p(n, n) > alpha:
        n += 1
    return n


def _mean_difference(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def _p(a: list[float], b: list[float], alternative: str) -> float:
    if np.allclose(a + b, a[0]):
        return 1.0  # all identical: no evidence of any difference
    # the statistic takes the whole batch of permutations at once (vectorized): the same p, bit for bit, as
    # calling it once per permutation (up to 9,999 calls of numpy a test), at a fifth of the CPU or less
    result = _scipy().permutation_test((np.asarray(b), np.asarray(a)), _mean_difference, vectorized=True,
                                    permutation_type="independent", alternative=alternative,
                                    n_resamples=9999, random_state=0)
    return float(result.pvalue)


def compare(metric: str, a: list[float], b: list[float], threshold: float = THRESHOLD,
            alpha: float = ALPHA) -> Comparison:
    """Compare B against A for a metric where higher is worse (memory)."""
    if not a or not b:
        raise ValueError(f"{metric}: no samples")
    (mean_a, sd_a), (mean_b, sd_b) = mean_sd(a), mean_sd(b)
    assert mean_a is not None and mean_b is not None
    delta = mean_b - mean_a
    decidable = smallest_p(len(a), len(b)) <= alpha
    p_up = _p(a, b, "greater") if decidable else None
    p_down = _p(a, b, "less") if decidable else None
    verdict: Verdict
    if abs(delta) < threshold:
        verdict, reason = verdicts.SAME, f"|change| {abs(delta):.2f} < threshold {threshold}"
    elif not decidable:
        verdict, reason = verdicts.UNDECIDED, (f"{len(a)} vs {len(b)} repeats cannot reach p <= {alpha} "
                                               f"(smallest p {smallest_p(len(a), len(b)):.3f}); run more repeats")
    elif delta > 0 and p_up is not None and p_up <= alpha:
        verdict, reason = verdicts.REGRESSION, f"+{delta:.2f} >= {threshold} and p = {p_up:.3f} <= {alpha}"
    elif delta < 0 and p_down is not None and p_down <= alpha:
        verdict, reason = verdicts.IMPROVEMENT, f"{delta:.2f} and p = {p_down:.3f} <= {alpha}"
    else:
        p = p_up if delta > 0 else p_down
        verdict, reason = verdicts.NOT_SIGNIFICANT, (f"change {delta:+.2f} passes the threshold but is not "
                                                     f"significant (p = {p:.3f})")
    return Comparison(metric, len(a), len(b), mean_a, mean_b, sd_a, sd_b, delta, p_up, p_down, verdict, reason,
                      interval(a, b))


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


def paired_ratio(a: list[float], b: list[float], confidence: float = LEVEL) -> PairedRatio:
    """b[i] / a[i] over pairs measured side by side: Student's t interval on the mean of the log ratios
    (pairs are independent, their log ratios near-normal; the log keeps on/off and off/on symmetric)."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError("paired_ratio: needs two or more pairs")
    logs = np.log(np.asarray(b, dtype=float) / np.asarray(a, dtype=float))
    mean, sem = float(logs.mean()), float(logs.std(ddof=1) / np.sqrt(len(logs)))
    t = t_quantile(len(logs) - 1, confidence)
    assert t is not None
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


def mean_interval(values: list[float], confidence: float = LEVEL) -> Estimate:
    """Mean with a Student t interval (no interval from one sample)."""
    mean, sd = mean_sd(values)
    assert mean is not None, "a mean needs a value"
    t = t_quantile(len(values) - 1, confidence)
    if t is None or sd is None:
        return Estimate(mean, None, None, len(values), confidence)
    half = t * sd / len(values) ** 0.5
    return Estimate(mean, mean - half, mean + half, len(values), confidence)


def slope_interval(x: list[float], y: list[float], confidence: float = LEVEL) -> Estimate:
    """Least-squares slope of y on x with a t interval on n - 2 degrees of freedom (none below 3 points)."""
    if len(x) < 2:
        raise ValueError("a slope needs two points")
    fit = linear_fit(x, y)
    t = t_quantile(fit.dof, confidence)
    if t is None:
        return Estimate(fit.slope, None, None, len(x), confidence)
    half = t * fit.se_slope
    return Estimate(fit.slope, fit.slope - half, fit.slope + half, len(x), confidence)


def predict(fit: LinearFit, x0: float, level: float = LEVEL) -> Estimate:
    """A new observation at x0 from a least-squares fit, with its t prediction interval (the fit's uncertainty
    and the scatter of one new point about the line: s^2 (1 + 1/n + (x0 - mean x)^2 / Sxx), n - 2 degrees of
    freedom); no interval without degrees of freedom; a fit through its points exactly gives a zero-width one."""
    value = fit.intercept + fit.slope * x0
    t = t_quantile(fit.dof, level)
    if t is None:
        return Estimate(value, None, None, fit.n, level)
    s2 = fit.ssr / fit.dof
    half = t * (s2 * (1 + 1 / fit.n + ((x0 - fit.x_mean) ** 2 / fit.sxx if fit.sxx else 0.0))) ** 0.5
    return Estimate(value, value - half, value + half, fit.n, level)


@dataclass(frozen=True)
class ProportionalFit:
    """y = intercept + slope x by least squares weighted 1/x^2: the scatter of a new y about the line grows in
    proportion to x (glibc's retention between identical runs is bytes per parameter: 23 MiB spread at 16.8 M
    params, 178 MiB at 101 M, reports/estimate.md). Equivalently v = y/x fitted on u = 1/x by ordinary least
    squares: v = slope + intercept u, its residuals s (bytes per x) pooled over every size and repeat."""

    slope: float
    intercept: float
    s: float  # residual standard deviation of y/x
    n: int
    dof: int
    u_mean: float
    suu: float
    worst_residual: float  # the largest |observed - fitted| y, with its sign

    def mean(self, x0: float) -> float:
        return self.intercept + self.slope * x0


def proportional_fit(x: list[float], y: list[float]) -> ProportionalFit:
    """The weighted least-squares line (weights 1/x^2); needs two distinct x > 0."""
    xs, ys = np.asarray(x, dtype="float64"), np.asarray(y, dtype="float64")
    if not (xs > 0).all():
        raise ValueError("a proportional fit needs x > 0")
    u, v = 1 / xs, ys / xs
    fit = linear_fit(list(u), list(v))  # v = fit.intercept + fit.slope u: slope of y is fit.intercept
    s = math.sqrt(fit.ssr / fit.dof) if fit.dof > 0 else 0.0
    residuals = ys - (fit.slope + fit.intercept * xs)
    return ProportionalFit(slope=fit.intercept, intercept=fit.slope, s=s, n=fit.n, dof=fit.dof, u_mean=fit.x_mean,
                           suu=fit.sxx, worst_residual=float(residuals[np.argmax(np.abs(residuals))]))


def predict_sum(fit: ProportionalFit, x0: float, k: int = 1, level: float = LEVEL, read_sd: float = 0.0
                ) -> Estimate:
    """The sum of k new observations at x0 (k ranks of one node), with its t prediction interval: the line's
    uncertainty counts k times over (the same line for every rank), and so does each observation's own scatter:
    the ranks of one run are identical processes that may retain alike (held out, 2 ranks under glibc's own mmap
    threshold, 3 runs: rank 0's and rank 1's steady RSS fell together in one configuration, the node's spread 9.2%
    against rank 0's 8.2%, where independent ranks would give ~5.8%; in another they did not), so their scatter is
    summed, the widest a positive correlation makes it: var = x0^2 s^2 k^2 (1/n + (1/x0 - mean u)^2 / Suu + 1),
    n - 2 degrees of freedom; no interval without degrees of freedom. A scatter estimated from few residuals can
    come out below what the reads that made the points resolve (1 degree of freedom: three points on a line to
    5 KB where one read is off by up to 256 KiB): the observation's scatter at x0 is never taken below `read_sd`
    (bytes, analysis/readnoise of the calibrating machine), so no interval is finer than the instrument."""
    value = k * fit.mean(x0)
    t = t_quantile(fit.dof, level)
    if t is None:
        return Estimate(value, None, None, fit.n, level)
    lever = 1 / fit.n + ((1 / x0 - fit.u_mean) ** 2 / fit.suu if fit.suu else 0.0)
    half = t * max(x0 * fit.s, read_sd) * k * math.sqrt(lever + 1)
    return Estimate(value, value - half, value + half, fit.n, level)


def fixed_part(fit: ProportionalFit, level: float = LEVEL, read_sd: float = 0.0) -> Estimate:
    """A proportional fit's intercept (y as x -> 0: the fixed part) with its t confidence interval: the slope of
    v = y/x on u = 1/x, standard error s / sqrt(Suu), never below `read_sd` (bytes: where the intercept stands for
    a process's figure, read as predict_sum's are); none without degrees of freedom or a spread of sizes."""
    t = t_quantile(fit.dof, level)
    if t is None or not fit.suu:
        return Estimate(fit.intercept, None, None, fit.n, level)
    half = t * max(fit.s / fit.suu ** 0.5, read_sd)
    return Estimate(fit.intercept, fit.intercept - half, fit.intercept + half, fit.n, level)


def intercept(fit: LinearFit, level: float = LEVEL) -> Estimate:
    """The fit's intercept (its fixed part) with its t confidence interval; none without degrees of freedom."""
    t = t_quantile(fit.dof, level)
    if t is None:
        return Estimate(fit.intercept, None, None, fit.n, level)
    half = t * fit.se_intercept
    return Estimate(fit.intercept, fit.intercept - half, fit.intercept + half, fit.n, level)


def interval(a: list[float], b: list[float], level: float = LEVEL) -> float | None:
    """Half-width of a Welch t interval for mean(b) - mean(a) (Welch-Satterthwaite degrees of freedom); None with
    fewer than 2 repeats a side; 0 when both sides' repeats are identical (census figures: the difference is
    exact). Computed here rather than by scipy.stats.ttest_ind, which warns of precision loss on such data."""
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = float(np.var(a, ddof=1)) / len(a), float(np.var(b, ddof=1)) / len(b)
    if va + vb == 0:
        return 0.0
    dof = (va + vb) ** 2 / ((va**2 / (len(a) - 1) if va else 0.0) + (vb**2 / (len(b) - 1) if vb else 0.0))
    t = t_quantile(dof, level)
    assert t is not None
    return t * (va + vb) ** 0.5
