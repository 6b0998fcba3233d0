"""How many optimizer steps a training script will run, where the script says it (rssprobe/data/step_totals.toml):
a local variable of a known function up the stack of deepspeed.initialize, or the DeepSpeed config's scheduler.
Only the progress bar's total comes from it; None when nothing says."""

from __future__ import annotations

import os
import tomllib
from importlib import resources
from typing import Any


def _declared() -> dict[str, list[dict[str, Any]]]:
    return tomllib.loads(resources.files("rssprobe.data").joinpath("step_totals.toml").read_text())


def _count(value: Any, offset: int = 0) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value + offset <= 0:
        return None
    return value + offset


def _matches(frame: Any, rule: dict[str, Any]) -> bool:
    code = frame.f_code
    if code.co_name != rule["function"]:
        return False
    if "module" in rule and frame.f_globals.get("__name__") != rule["module"]:
        return False
    return "file" not in rule or os.path.basename(code.co_filename) == rule["file"]


def find(engine: Any, frame: Any) -> int | None:
    """The script's step total from the frames above `frame`, else from the engine's DeepSpeed config."""
    declared = _declared()
    while frame is not None:
        for rule in declared.get("frame", []):
            if _matches(frame, rule):
                found = _count(frame.f_locals.get(rule["local"]), rule.get("offset", 0))
                if found is not None:
                    return found
        frame = frame.f_back
    config = getattr(getattr(engine, "_config", None), "_param_dict", None)
    for rule in declared.get("config", []):
        value: Any = config
        for part in rule["path"].split("."):
            value = value.get(part) if isinstance(value, dict) else None
        found = _count(value)
        if found is not None:
            return found
    return None
