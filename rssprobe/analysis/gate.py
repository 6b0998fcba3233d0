"""CI gate decisions: against a reference (via compare) or against absolute ceilings.

Exit codes, JUnit states and words of each verdict are in rssprobe.verdicts (`git bisect run`'s
reading: 0 pass or improvement, 1 regression, 125 undecided or "~").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib
from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, ValidationError

from .. import verdicts
from ..errors import UserError, from_validation
from ..rundata import read_text
from .compare import Side


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")
    limits: dict[str, FiniteFloat] = Field(min_length=1)  # an empty table would pass having checked nothing


def load_limits(path: Path) -> dict[str, float]:
    try:
        raw = tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path}: not valid TOML ({e})") from None
    try:
        return Limits.model_validate(raw).limits
    except ValidationError as e:
        raise from_validation(str(path), e.errors()) from None


@dataclass(frozen=True)
class LimitCheck:
    metric: str
    limit: float
    values: list[float]
    verdict: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def check_limits(side: Side, limits: dict[str, float]) -> tuple[str, list[LimitCheck], list[str]]:
    """A ceiling is broken only if every finished repeat is above it; mixed results are undecided."""
    problems = [f"{side.name}: {len(side.failed)} of {len(side.summaries)} runs did not finish"] if side.failed else []
    if side.never_took_effect():
        problems.append(f"{side.name}: requested patch never took effect: {', '.join(side.never_took_effect())}")
    checks = []
    for metric, limit in limits.items():
        values = side.samples(metric)
        if not values:
            checks.append(LimitCheck(metric, limit, [], "undecided", "not measured in these runs"))
        elif all(v > limit for v in values):
            checks.append(LimitCheck(metric, limit, values, "regression", f"every repeat above {limit}"))
        elif any(v > limit for v in values):
            checks.append(LimitCheck(metric, limit, values, "undecided", f"some repeats above {limit}"))
        else:
            checks.append(LimitCheck(metric, limit, values, "pass", f"every repeat at or below {limit}"))
    return verdicts.overall([c.verdict for c in checks], bool(problems) or not side.ok), checks, problems
