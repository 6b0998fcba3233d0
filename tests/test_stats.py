"""The decision rule on synthetic samples with known shift and known noise."""

from __future__ import annotations

import random

from rssprobe.analysis.stats import compare, smallest_p


def noisy(rng: random.Random, mean: float, sd: float, n: int) -> list[float]:
    return [rng.gauss(mean, sd) for _ in range(n)]


def test_a_real_shift_well_above_noise_is_a_regression_or_improvement() -> None:
    rng = random.Random(1)
    for _ in range(50):
        a, b = noisy(rng, 20, 0.05, 5), noisy(rng, 22, 0.05, 5)
        assert compare("m", a, b).verdict == "regression"
        assert compare("m", b, a).verdict == "improvement"


def test_identical_distributions_are_never_called_a_regression_when_noise_is_below_threshold() -> None:
    rng = random.Random(2)
    quiet = [compare("m", noisy(rng, 20, 0.05, 3), noisy(rng, 20, 0.05, 3)).verdict for _ in range(300)]
    assert set(quiet) == {"same"}


def test_false_regressions_under_large_noise_stay_within_alpha() -> None:
    """Noise far above the threshold (raw glibc RSS): a false call can only come from chance
    perfect separation, whose rate is bounded by alpha. This is why the gate decides on the
    low-noise figures by default."""
    rng = random.Random(3)
    trials = 600
    calls = sum(compare("m", noisy(rng, 20, 1.0, 3), noisy(rng, 20, 1.0, 3)).verdict == "regression"
                for _ in range(trials))
    assert calls / trials <= 0.05 + 3 * (0.05 * 0.95 / trials) ** 0.5


def test_a_shift_buried_in_noise_is_not_significant() -> None:
    a, b = [20.0, 24.0, 17.0], [23.0, 18.5, 21.5]  # mean +0.67, overlapping samples
    c = compare("m", a, b)
    assert c.verdict == "~" and c.p_increase is not None and c.p_increase > 0.05


def test_changes_below_the_threshold_are_the_same() -> None:
    c = compare("m", [20.0, 20.0, 20.0], [20.2, 20.2, 20.2], threshold=0.25)
    assert c.verdict == "same"


def test_too_few_repeats_are_undecided_not_regressions() -> None:
    assert smallest_p(2, 2) > 0.05 and smallest_p(3, 3) == 0.05
    assert compare("m", [20.0, 20.0], [25.0, 25.0]).verdict == "undecided"
    assert compare("m", [20.0], [25.0]).verdict == "undecided"
    assert compare("m", [20.0, 20.0, 20.0], [25.0, 25.0, 25.0]).verdict == "regression"


def test_exact_test_with_ties_and_perfect_separation() -> None:
    c = compare("m", [20.0, 20.0, 20.0], [22.0, 22.0, 22.0])
    assert abs(c.p_increase - 0.05) < 1e-9  # 1 of the 20 equally likely splits
    assert c.p_decrease == 1.0


def test_a_paired_ratio_finds_a_known_cost_with_an_interval_that_covers_it() -> None:
    """Pairs with a known 1% cost under 3% step-to-step noise shared by both members of a pair (the
    machine's load of that moment) and 0.5% of each's own: the interval must cover 1.01 in about 95% of
    trials (a 95% t interval; 200 trials give 190 +- 3 sd of 3.1, so at least 180), and pairing must
    make it narrow (the shared noise cancels): +-0.5% or better from 100 pairs."""
    from rssprobe.analysis.stats import paired_ratio

    rng = random.Random(5)
    covered = 0
    for _ in range(200):
        load = [rng.lognormvariate(0, 0.03) for _ in range(100)]
        off = [0.2 * x * rng.lognormvariate(0, 0.005) for x in load]
        on = [0.2 * 1.01 * x * rng.lognormvariate(0, 0.005) for x in load]
        r = paired_ratio(off, on)
        covered += r.low <= 1.01 <= r.high
        assert r.half_width < 0.005
    assert covered >= 180


def test_a_prediction_interval_worked_by_hand() -> None:
    """(0, 0), (1, 1), (2, 3): slope 1.5, intercept -1/6, residuals 1/6, -1/3, 1/6 (SSR 1/6, 1 dof); at x0 = 3 a
    new point is 13/3 +- t(1) sqrt(1/6 (1 + 1/3 + (3 - 1)^2 / 2)) = 12.706 x 0.7454; the intercept is -1/6 +-
    t(1) x its standard error sqrt(1/6 (1/3 + 1/2)); a line through its points exactly predicts with no width."""
    from rssprobe.analysis.stats import intercept, linear_fit, predict

    fit = linear_fit([0, 1, 2], [0, 1, 3])
    got = predict(fit, 3)
    assert abs(got.value - 13 / 3) < 1e-12
    assert abs((got.high - got.value) - 12.7062047 * (1 / 6 * (1 + 1 / 3 + 2)) ** 0.5) < 1e-5
    fixed = intercept(fit)
    assert abs(fixed.value + 1 / 6) < 1e-12
    assert abs((fixed.high - fixed.value) - 12.7062047 * (1 / 6 * 5 / 6) ** 0.5) < 1e-5
    exact = predict(linear_fit([1, 2, 3], [2, 4, 6]), 10)
    assert exact.value == exact.low == exact.high == 20
    assert predict(linear_fit([1, 2], [2, 5]), 3).low is None  # two points: no degrees of freedom, no interval


def test_no_prediction_is_finer_than_one_rss_read() -> None:
    """Three points exactly on y = 1e8 + 8x (1 degree of freedom, s = 0, the way 3 load peaks of a fixed-threshold
    calibration came out within 5 KB of a line while a rerun's peak moved 470 KB): without the read's spread the
    interval has no width; with it the observation at x0 scatters by read_sd, so the half-width is
    t(1) x read_sd x k x sqrt(1 + 1/n + (1/x0 - mean u)^2 / Suu), worked here by hand. A fit whose own scatter at
    x0 exceeds read_sd keeps its own interval to the byte."""
    import math

    from rssprobe.analysis.readnoise import rss_read_sd
    from rssprobe.analysis.stats import fixed_part, predict_sum, proportional_fit

    sd = rss_read_sd(2, 2)  # 2 CPUs: a read is off by up to 2 x 32 pages of 4 KiB
    assert abs(sd - 2 * 32 * 4096 / math.sqrt(3)) < 1e-9
    assert rss_read_sd(2, 64, 4096) == 2 * 128 * 4096 / math.sqrt(3)  # the batch grows with the online CPUs
    x = [1e6, 2e6, 4e6]
    fit = proportional_fit(x, [1e8 + 8 * n for n in x])
    bare = predict_sum(fit, 3e6, 2)
    assert bare.low == bare.high == bare.value == 2 * (1e8 + 8 * 3e6)
    got = predict_sum(fit, 3e6, 2, read_sd=sd)
    u = [1 / n for n in x]
    mean_u = sum(u) / 3
    lever = 1 / 3 + (1 / 3e6 - mean_u) ** 2 / sum((ui - mean_u) ** 2 for ui in u)
    assert got.value == bare.value
    assert got.high is not None and got.low is not None
    assert abs((got.high - got.value) - 12.7062047 * sd * 2 * math.sqrt(1 + lever)) < 1e-3 * sd
    noisy_fit = proportional_fit(x * 2, [1e8 + 8 * n + (-1) ** i * 0.5 * n for i, n in enumerate(x * 2)])
    assert predict_sum(noisy_fit, 3e6, read_sd=sd) == predict_sum(noisy_fit, 3e6)  # 0.5 B/param x 3e6 >> sd
    # the line's fixed part standing for a process's figure (a target with nothing offloaded): the same floor
    fixed = fixed_part(fit, read_sd=sd)
    bare_fixed = fixed_part(fit)
    assert bare_fixed.high is not None and bare_fixed.high - bare_fixed.value < 1e-3  # a byte's float rounding
    assert abs(fixed.value - 1e8) < 1e-3
    assert fixed.high is not None and abs((fixed.high - fixed.value) - 12.7062047 * sd) < 1e-3 * sd
