"""The registry of interventions (declared in each module's INTERVENTIONS list) and patch sets."""

from __future__ import annotations

from . import pinregister, pr8132, testing
from .base import Context, Intervention, Refused

REGISTRY: dict[str, Intervention] = {i.name: i for i in [*pr8132.INTERVENTIONS, *pinregister.INTERVENTIONS,
                                                          *testing.INTERVENTIONS]}

# Named sets: a name that expands to several components.
SETS: dict[str, list[str]] = {"pr8132": [pr8132.FLOAT_SCALE, pr8132.MALLOC_TRIM]}

__all__ = ["REGISTRY", "SETS", "Context", "Intervention", "Refused", "expand"]


def expand(names: list[str]) -> list[str]:
    """Patch-set names to component names, order kept, duplicates dropped; KeyError if unknown."""
    out: list[str] = []
    for name in names:
        base = name.split(":", 1)[0]
        for component in SETS.get(base, [name]):
            if component.split(":", 1)[0] not in REGISTRY:
                raise KeyError(component)
            if component not in out:
                out.append(component)
    return out


def parse(spec: str) -> tuple[str, dict[str, str]]:
    """'name:key=value,key=value' -> (name, options)."""
    name, _, rest = spec.partition(":")
    options: dict[str, str] = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"option {item!r} of {name!r} is not key=value")
        options[key.strip()] = value.strip()
    return name, options
