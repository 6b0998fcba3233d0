"""A ceilings file (`gate --limits`): [limits] figure = bytes per parameter, every value a finite number >= 0.

    [limits]
    "budget.live" = 21.0
    "budget.rss_after_trim_above_baseline" = 60.0

Each key names one figure of the metric registry (analysis/metrics.py; checked before anything runs), not a
glob: a ceiling on a pattern would pass having matched nothing. A value of true (TOML would let it read as
1.0), nan, an infinity or a negative number is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import from_validation
from ..store import outputs
from ..store.reader import read_toml

GLOB = set("*?[]")


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    # an empty table would pass having checked nothing
    limits: dict[str, Annotated[float, Field(ge=0)]] = Field(min_length=1)

    @field_validator("limits", mode="before")
    @classmethod
    def _numbers(cls, v: Any) -> Any:
        if isinstance(v, dict):
            for name, value in v.items():
                if isinstance(value, bool):
                    raise ValueError(f"{name} = {str(value).lower()} is not a number of bytes per parameter")
                if GLOB & set(name):
                    raise ValueError(f"{name!r} is a pattern; a ceiling names one figure")
        return v


def load_limits(path: Path) -> dict[str, float]:
    outputs.note(path)  # an input (store/outputs.py)
    raw = read_toml(path)
    try:
        return Limits.model_validate(raw).limits
    except ValidationError as e:
        raise from_validation(str(path), e.errors()) from None

