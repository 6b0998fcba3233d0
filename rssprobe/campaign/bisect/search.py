"""Search logic for bisect, free of I/O: each decision comes from a callable the caller supplies.

The answers are rssprobe.verdicts' bisect answers.

search(): the first item of an ordered list whose figure moved against item 0, by binary
search. A probe answers "same", "moved", "undecided" (ask again: the caller adds repeats)
or "skip" (cannot be tested, like `git bisect skip`). An item still undecided after the
retries is skipped; when only skipped items separate the last "same" from the first
"moved", the result names all of them instead of guessing.

ddmin(): the smallest subset of components that still shows the change (Zeller's delta
debugging), each distinct subset tested once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from ...verdicts import Answer

__all__ = ["Answer", "DdminResult", "Probe", "SearchResult", "ddmin", "search"]
T = TypeVar("T")


@dataclass(frozen=True)
class Probe:
    index: int
    attempt: int  # 1 for the first question about this index, 2.. for retries
    answer: Answer


@dataclass
class SearchResult:
    """status: found (first_moved is the culprit), unchanged (no item moved), or ambiguous."""

    status: Literal["found", "unchanged", "ambiguous"]
    last_same: int
    first_moved: int | None  # for ambiguous: the first item known to have moved (None: maybe none did)
    candidates: list[int]  # ambiguous: every item the change may have come with
    probes: list[Probe] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)


def search(n: int, probe: Callable[[int], Answer], retries: int = 3) -> SearchResult:
    """Binary search over items 1..n-1 against item 0, asking probe(index) at most 1 + retries times each.

    The answer space is "first moved item in 1..n-1, or none" (n possibilities), so a search
    with decisive probes asks ceil(log2(n)) questions; every retry and skip adds to that.
    """
    if n < 2:
        raise ValueError("bisect needs at least two items (a reference and one more)")
    lo, hi = 0, n  # item lo is known the same; hi is the first known to have moved (n: none known)
    probes: list[Probe] = []
    skipped: set[int] = set()
    while True:
        untested = [i for i in range(lo + 1, hi) if i not in skipped]
        if not untested:
            break
        mid = (lo + hi) // 2
        index = min(untested, key=lambda i: (abs(i - mid), i))  # nearest to the middle, as git does
        answer = decide(index, probe, retries, probes)
        if answer == "moved":
            hi = index
        elif answer == "same":
            lo = index
        else:
            skipped.add(index)
    between = sorted(i for i in skipped if lo < i < hi)
    if not between:
        status = "unchanged" if hi == n else "found"
        return SearchResult(status, lo, None if hi == n else hi, [] if hi == n else [hi], probes, sorted(skipped))
    candidates = between + ([hi] if hi < n else [])
    return SearchResult("ambiguous", lo, None if hi == n else hi, candidates, probes, sorted(skipped))


def decide(index: int, probe: Callable[[int], Answer], retries: int, log: list[Probe]) -> Answer:
    for attempt in range(1, retries + 2):
        answer = probe(index)
        log.append(Probe(index, attempt, answer))
        if answer != "undecided":
            return answer
    return "skip"


@dataclass
class DdminResult:
    minimal: list
    tests: list[tuple[list, bool]]  # every distinct subset tested, in order, with its outcome


def ddmin(items: Sequence[T], test: Callable[[list[T]], bool]) -> DdminResult:
    """A 1-minimal subset of items for which test() is still True; test(items) must be True.

    test(subset) True means "this subset alone shows the change". Outcomes are cached, so
    no subset is tested twice; an untestable subset should answer False (it is then simply
    not used for reducing, as in Zeller's ddmin with unresolved outcomes).
    """
    cache: dict[tuple[int, ...], bool] = {}
    tests: list[tuple[list, bool]] = []
    order = list(items)

    def run(subset: list[int]) -> bool:
        key = tuple(subset)
        if key not in cache:
            cache[key] = test([order[i] for i in subset])
            tests.append(([order[i] for i in subset], cache[key]))
        return cache[key]

    current = list(range(len(order)))
    if not run(current):
        raise ValueError("ddmin: the full set does not show the change")
    granularity = 2
    while len(current) >= 2:
        chunks = _split(current, granularity)
        reduced = False
        for chunk in chunks:
            if run(chunk):
                current, granularity, reduced = chunk, 2, True
                break
        if not reduced and granularity > 2:
            for chunk in chunks:
                complement = [i for i in current if i not in chunk]
                if run(complement):
                    current, granularity, reduced = complement, max(granularity - 1, 2), True
                    break
        if not reduced:
            if granularity >= len(current):
                break
            granularity = min(len(current), 2 * granularity)
    return DdminResult([order[i] for i in current], tests)


def _split(items: list[int], n: int) -> list[list[int]]:
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for k in range(n):
        end = start + size + (1 if k < extra else 0)
        out.append(items[start:end])
        start = end
    return [c for c in out if c]
