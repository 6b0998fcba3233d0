"""The verdicts, and what each one means to every consumer, in one table.

A verdict is what analysis.stats.compare says about one figure (B against A, higher is
worse), and what a gate says about a whole comparison. Every consumer reads TABLE: the
gate's exit code (`git bisect run`'s reading: 0 good, 1 bad, 125 skip), the JUnit state,
the answer a bisect probe gives, and the words the reports print. So "~" means one thing
everywhere: the change passes the threshold but the repeats cannot confirm it, which is
"cannot decide yet" (exit 125, JUnit skipped, bisect asks again with more repeats).

Bisect is directional, as `git bisect` is: its answer is given for a sought increase; for a
sought decrease regression and improvement swap (answer()). A significant move the other
way is reported, not taken for the change being sought.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Verdict = Literal["regression", "improvement", "same", "~", "undecided", "pass"]
# the words, for code that produces a verdict (stats, fits, ceilings, bisect): nowhere else is one spelled
REGRESSION: Verdict = "regression"
IMPROVEMENT: Verdict = "improvement"
SAME: Verdict = "same"
NOT_SIGNIFICANT: Verdict = "~"  # past the threshold, but the repeats cannot confirm it
UNDECIDED: Verdict = "undecided"
PASS: Verdict = "pass"
MOVED = (REGRESSION, IMPROVEMENT)  # a significant change either way
Answer = Literal["same", "moved", "undecided", "skip"]
Direction = Literal["up", "down"]
JUnit = Literal["passed", "failure", "skipped"]


@dataclass(frozen=True)
class Meaning:
    exit_code: int  # gate, and so `git bisect run` for commit bisect
    junit: JUnit
    bisect: Answer  # when the sought change is an increase
    mark: str  # a table cell
    words: str  # the verdict sentence of a report
    css: str  # the report page's answer banner: its class (its colour)
    kicker: str  # and the word above the answer


TABLE: dict[str, Meaning] = {
    REGRESSION: Meaning(1, "failure", "moved", "REGRESSION", "B needs more host memory than A", "regression",
                        "Regression"),
    IMPROVEMENT: Meaning(0, "passed", "same", "improvement", "B needs less host memory than A", "improvement",
                         "Improvement"),
    SAME: Meaning(0, "passed", "same", "", "no figure differs", "pass", "No gated change"),
    NOT_SIGNIFICANT: Meaning(125, "skipped", "undecided", "~ (not significant)",
                             "a change past the threshold that the repeats cannot confirm: run more repeats",
                             "not-significant", "Not significant: undecided"),
    UNDECIDED: Meaning(125, "skipped", "undecided", "undecided", "the data cannot decide", "undecided", "Undecided"),
    # the gate's word for a whole comparison, or a ceiling, where nothing that decides differs
    PASS: Meaning(0, "passed", "same", "pass", "no figure differs", "pass", "No gated change"),
}
VERDICTS: tuple[str, ...] = tuple(TABLE)
# A figure that does not decide is shown with its direction only (raw RSS moves with glibc noise).
INFORMATIVE = {REGRESSION: "higher (informative)", IMPROVEMENT: "lower (informative)"}
# the same where the table marks the gated figures itself (diff's key table: "(gated)" beside the name)
DIRECTION = {REGRESSION: "higher", IMPROVEMENT: "lower"}


def meaning(verdict: str) -> Meaning:
    return TABLE[verdict]


def exit_code(verdict: str) -> int:
    return TABLE[verdict].exit_code


def answer(verdict: str, direction: Direction = "up") -> Answer:
    """The bisect answer of a verdict when the sought change goes `direction`."""
    if direction == "down":
        verdict = {REGRESSION: IMPROVEMENT, IMPROVEMENT: REGRESSION}.get(verdict, verdict)
    return TABLE[verdict].bisect


def mark(verdict: str, decides: bool = True) -> str:
    return TABLE[verdict].mark if decides else INFORMATIVE.get(verdict, TABLE[verdict].mark)


def overall(verdicts: list[str], problems: bool = False) -> str:
    """A gate's verdict over the figures that decide: regression > undecided (or ~) > improvement > pass."""
    if not verdicts:
        return UNDECIDED
    if REGRESSION in verdicts:
        return REGRESSION
    if problems or any(exit_code(v) == 125 for v in verdicts):
        return UNDECIDED
    if IMPROVEMENT in verdicts:
        return IMPROVEMENT
    return PASS


# ---- what a comparison's lead may say of one figure (analysis/effects.py decides, with a correction) -------
Effect = Literal["lower", "higher", "unchanged", "unconfirmed", "within noise"]
LOWER: Effect = "lower"  # the whole simultaneous interval below -threshold, and the corrected exact test agrees
HIGHER: Effect = "higher"
UNCHANGED: Effect = "unchanged"  # the whole interval within +-threshold (or an exact figure inside it)
UNCONFIRMED: Effect = "unconfirmed"  # the interval lies beyond the threshold, but the corrected exact test cannot
# confirm it (at 3 vs 3 it never can: its p floor, 0.05, times the figures)
WITHIN_NOISE: Effect = "within noise"  # neither: the runs cannot tell
CLAIMED = (LOWER, HIGHER)


# ---- a published claim (bytes per parameter) against what was measured ------------------------

Claim = Literal["reproduced", "not reproduced", "cannot be measured on the CPU accelerator", "not run"]
REPRODUCED: Claim = "reproduced"
NOT_REPRODUCED: Claim = "not reproduced"
CPU_UNMEASURABLE: Claim = "cannot be measured on the CPU accelerator"
NOT_RUN: Claim = "not run"


def claim_tolerance(sd: float | None, threshold: float) -> float:
    """How far a measurement may sit from the claimed figure and still reproduce it: the practical
    threshold of every comparison (B/param), or two standard deviations of the repeats if wider."""
    return max(threshold, 2 * sd) if sd is not None else threshold


def claim(claimed: float, measured: float | None, sd: float | None, threshold: float) -> Claim:
    """reproduced when the mean lies within the tolerance of the claimed figure, else not reproduced."""
    if measured is None:
        return NOT_RUN
    return REPRODUCED if abs(measured - claimed) <= claim_tolerance(sd, threshold) else NOT_REPRODUCED
