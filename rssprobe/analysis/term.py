"""A figure with its 95% interval and its exact floor, and the sum of k ranks of a fitted line as one (pure
arithmetic shared by the estimate's terms, analysis/estimate.py, and its load and saves, analysis/savephase.py)."""

from __future__ import annotations

from dataclasses import dataclass

from . import stats


@dataclass(frozen=True)
class Term:
    """A figure in bytes with its 95% interval (None where none can be given) and its exact floor."""

    value: float
    low: float | None
    high: float | None
    floor: float = 0.0

    @classmethod
    def exact(cls, value: float) -> Term:
        return cls(value, value, value, value)

    def __add__(self, other: Term) -> Term:
        low = None if self.low is None or other.low is None else self.low + other.low
        high = None if self.high is None or other.high is None else self.high + other.high
        return Term(self.value + other.value, low, high, self.floor + other.floor)

    @property
    def upper(self) -> float:
        """The upper 95% bound, or the figure itself where there is no interval."""
        return self.value if self.high is None else self.high

    def fields(self, name: str) -> dict[str, float | None]:
        return {f"{name}_bytes": self.value, f"{name}_bytes_low": self.low, f"{name}_bytes_high": self.high,
                f"{name}_bytes_floor": self.floor}


def larger(*terms: Term) -> Term:
    """The largest of several figures, each bound the largest of the bounds (max is monotone)."""
    lows, highs = [t.low for t in terms], [t.high for t in terms]
    return Term(max(t.value for t in terms), None if None in lows else max(lows),  # type: ignore[type-var]
                None if None in highs else max(highs), max(t.floor for t in terms))  # type: ignore[type-var]


def fitted(fit: stats.ProportionalFit, x0: float, k: int, floor: float, read_sd: float = 0.0) -> Term:
    """k ranks' sum of a fitted term at x0, its interval (no finer than one read of `read_sd` bytes a rank), never
    below `floor` (nor the figure below it)."""
    e = stats.predict_sum(fit, x0, k, read_sd=read_sd)
    value = max(e.value, floor)
    if e.low is None or e.high is None:
        return Term(value, None, None, floor)
    return Term(value, max(e.low, floor), max(e.high, value), floor)
