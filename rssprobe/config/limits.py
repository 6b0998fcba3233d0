"""A ceilings file (`gate --limits`): [limits] figure = bytes per parameter, every value finite.

    [limits]
    "budget.live" = 21.0
    "budget.rss_after_trim_above_baseline" = 60.0

The figures are names of the metric registry (analysis/metrics.py), checked before anything runs.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, ValidationError

from ..errors import from_validation
from ..store.reader import read_toml


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")
    limits: dict[str, FiniteFloat] = Field(min_length=1)  # an empty table would pass having checked nothing


def load_limits(path: Path) -> dict[str, float]:
    raw = read_toml(path)
    try:
        return Limits.model_validate(raw).limits
    except ValidationError as e:
        raise from_validation(str(path), e.errors()) from None
