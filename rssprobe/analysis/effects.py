"""THE computation behind a comparison's lead: for each figure the lead, the key table and the change chart show,
its change B - A with a simultaneous interval, its corrected p and the claim the lead may make of it.

Why not the gate's test alone: a reader of `diff` asks "does B change host RAM, where, by how much?" over several
figures at once. Each tested at p <= 0.05 uncorrected, a false claim somewhere is likely in any 3-vs-3 demo (the
issue 43 campaign, reports/pr-verdict-stability.md, saw informative claims flip between identical demos). So the
figures of the lead are one family, controlled by Bonferroni: each is tested at alpha/m (m = the figures of the
family whose runs vary; a census figure identical in every run is exact and tests nothing). Bonferroni, not Holm,
because its intervals are simultaneous: the interval the chart draws and the table prints is the one the claim
reads (Holm has no matching intervals).

A figure is claimed changed ("lower"/"higher") only when both
  - the exact one-sided permutation test (stats.compare's) in the change's direction, times m, is <= alpha, and
  - its Welch t interval at confidence 1 - alpha/m lies wholly beyond the threshold (the effect-size condition);
claimed "unchanged" when that interval lies wholly within +-threshold (equivalence, as two one-sided tests);
"unconfirmed" when the interval lies beyond the threshold but the corrected exact test cannot confirm it; and
otherwise "within noise": the runs cannot tell. An exact test's p cannot fall below 1 / C(n_a + n_b, n_a) (0.05 at
3 vs 3), so at 3 vs 3 no change survives the correction over two figures or more: the lead says so, and how many
repeats would, with the smallest change those repeats would resolve at the noise measured here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .. import verdicts
from . import metrics, stats

# the lead's figures, in the order the lead, the key table and the chart name them: where host RAM is held, from the
# buffers DeepSpeed allocates to what glibc keeps. RSS after deepspeed.initialize is not among them: a change to the
# training step cannot move it, and its noise (up to +-3 B/param between identical runs in the issue 43 campaign)
# would make the family larger and the lead's "unchanged" flip between demos; it stays in the full tables
FAMILY = metrics.shown(metrics.FAMILY)  # the registry says which figures lead (Metric.shown)
MOST_REPEATS = 30  # "--repeat N would": beyond this the answer is "more than 30 repeats a side"


@dataclass(frozen=True)
class Effect:
    """One figure of the family: B - A, its simultaneous interval, the corrected p and the claim."""

    metric: str
    gated: bool
    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    sd_a: float | None
    sd_b: float | None
    delta: float
    low: float | None  # the interval at `level` (None below 2 runs a side)
    high: float | None
    exact: bool  # every run of each side measured the same: the difference is exact
    p: float | None  # one-sided exact permutation p in the change's direction (None: exact, or too few runs)
    p_adjusted: float | None  # min(1, m p)
    claim: verdicts.Effect
    repeat_needed: int | None  # runs a side that would resolve this figure's change (None: resolved, or exact)
    resolves: float | None  # the smallest |change| those runs would claim, at the noise measured here

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Family:
    """The lead's figures and the correction they share."""

    effects: list[Effect]
    m: int  # figures tested (those that vary)
    alpha: float
    level: float  # each interval's confidence, 1 - alpha/m
    threshold: float
    smallest_p: float  # the smallest one-sided p an exact test can give at these runs
    repeat_needed: int | None  # runs a side whose smallest p survives the correction (None: these do)

    def as_dict(self) -> dict[str, Any]:
        return {"effects": [e.as_dict() for e in self.effects], "m": self.m, "alpha": self.alpha, "level": self.level,
                "threshold": self.threshold, "smallest_p": self.smallest_p, "repeat_needed": self.repeat_needed,
                "correction": "Bonferroni"}


def _exact(a: list[float], b: list[float]) -> bool:
    return bool(np.ptp(a) == 0 and np.ptp(b) == 0)


def half_width(sd_a: float, sd_b: float, n_a: int, n_b: int, level: float) -> float:
    """The Welch t interval's half-width for the difference of means with these sds and runs."""
    va, vb = sd_a**2 / n_a, sd_b**2 / n_b
    if va + vb == 0:
        return 0.0
    dof = (va + vb) ** 2 / ((va**2 / (n_a - 1) if va else 0.0) + (vb**2 / (n_b - 1) if vb else 0.0))
    t = stats.t_quantile(dof, level)
    assert t is not None
    return float(t * (va + vb) ** 0.5)


def repeats_for_correction(m: int, alpha: float) -> int:
    """The fewest runs a side (n vs n) whose exact test's smallest p, times m, is <= alpha."""
    return stats.least_repeats(alpha / max(m, 1))


def _resolution(sd_a: float, sd_b: float, n: int, level: float, threshold: float) -> float:
    return threshold + half_width(sd_a, sd_b, n, n, level)


def _needed(delta: float, sd_a: float, sd_b: float, level: float, threshold: float, start: int) -> int | None:
    """Runs a side at which this change, were it real, would be resolved at the noise measured (its interval
    beyond the threshold, or within it for a change smaller than the threshold); None past MOST_REPEATS."""
    for n in range(max(start, 2), MOST_REPEATS + 1):
        h = half_width(sd_a, sd_b, n, n, level)
        if abs(delta) - h >= threshold or abs(delta) + h <= threshold:
            return n
    return None


def assess(samples: dict[str, tuple[list[float], list[float]]], gated: set[str], threshold: float = stats.THRESHOLD,
           alpha: float = stats.ALPHA) -> Family:
    """Each figure of FAMILY measured in both sides (samples: metric -> (A's runs, B's runs)) assessed together."""
    present = [m for m in FAMILY if m in samples and samples[m][0] and samples[m][1]]
    varying = [m for m in present if not _exact(*samples[m])]
    m = max(len(varying), 1)
    level = 1 - alpha / m
    n_a = min((len(samples[x][0]) for x in present), default=0)
    n_b = min((len(samples[x][1]) for x in present), default=0)
    floor = stats.smallest_p(n_a, n_b) if n_a and n_b else 1.0
    need_runs = repeats_for_correction(len(varying), alpha)
    effects = []
    for metric in present:
        a, b = samples[metric]
        (mean_a, sd_a), (mean_b, sd_b) = stats.mean_sd(a), stats.mean_sd(b)
        assert mean_a is not None and mean_b is not None
        delta = mean_b - mean_a
        exact = _exact(a, b)
        low = high = None
        p = p_adj = None
        if exact:
            low = high = delta
        elif sd_a is not None and sd_b is not None:
            h = half_width(sd_a, sd_b, len(a), len(b), level)
            low, high = delta - h, delta + h
        if not exact:
            c = stats.compare(metric, a, b, threshold, alpha)
            p = c.p_increase if delta >= 0 else c.p_decrease
            if p is None:  # too few runs for the exact test to be computed: its floor is the honest p
                p = stats.smallest_p(len(a), len(b))
            p_adj = min(1.0, m * p)
        claim: verdicts.Effect
        if exact:
            claim = verdicts.UNCHANGED if abs(delta) < threshold else (
                verdicts.HIGHER if delta > 0 else verdicts.LOWER)
        elif low is None or high is None:
            claim = verdicts.WITHIN_NOISE
        elif high <= threshold and low >= -threshold:
            claim = verdicts.UNCHANGED
        elif low >= threshold or high <= -threshold:
            claim = (verdicts.HIGHER if delta > 0 else verdicts.LOWER) if p_adj is not None and p_adj <= alpha \
                else verdicts.UNCONFIRMED
        else:
            claim = verdicts.WITHIN_NOISE
        needed = resolves = None
        if claim == verdicts.UNCONFIRMED:
            needed = need_runs
        elif claim == verdicts.WITHIN_NOISE and sd_a is not None and sd_b is not None:
            runs = _needed(delta, sd_a, sd_b, level, threshold, max(len(a), len(b), need_runs))
            needed = runs if runs is not None else MOST_REPEATS + 1
            resolves = _resolution(sd_a, sd_b, min(needed, MOST_REPEATS), level, threshold)
        effects.append(Effect(metric, metric in gated, len(a), len(b), mean_a, mean_b, sd_a, sd_b, delta, low, high,
                              exact, p, p_adj, claim, needed, resolves))
    return Family(effects, len(varying), alpha, level, threshold, floor,
                  None if n_a >= need_runs and n_b >= need_runs else need_runs)
