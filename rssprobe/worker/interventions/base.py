"""The context an intervention runs in, and the one way we edit DeepSpeed source.

Interventions are declared in rssprobe.contract (name, options, the counter that says it took effect) and
applied here, inside the worker, after the model exists and before the engine is built; every one counts
how often it actually took effect: a patch that never ran proves nothing, so those counts travel with the run.
"""

from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass, field
from typing import Any


class Refused(Exception):
    """The installed code does not have the shape an intervention was written against."""


@dataclass
class Context:
    """What interventions may read (parameter count, current step) and where they count."""

    params: int = 0
    step: int = 0  # 0 while deepspeed.initialize runs, then 1, 2, ...
    run_dir: str = ""  # where an intervention may write files (nothing outside the run's room)
    effects: dict[str, dict[str, Any]] = field(default_factory=dict)

    def effect(self, name: str) -> dict[str, Any]:
        return self.effects.setdefault(name, {})

    def count(self, name: str, key: str, n: int = 1) -> None:
        e = self.effect(name)
        e[key] = e.get(key, 0) + n


def rewrite_method(owner: Any, attr: str, edits: list[tuple[str, list[str]]], label: str,
                   extra_globals: dict[str, Any]) -> None:
    """Insert lines before anchor lines of a method's source and recompile it in place.

    Each anchor must occur exactly once (stripped line match), else Refused: a method of
    another shape is not guessed at.
    """
    fn = inspect.getattr_static(owner, attr)
    qualname = f"{getattr(owner, '__name__', owner)}.{attr}"
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
        raise Refused(f"{label}: cannot read the source of {qualname} ({e})") from None
    lines = source.splitlines()
    for anchor, insert in edits:
        hits = [i for i, line in enumerate(lines) if line.strip() == anchor]
        if len(hits) != 1:
            raise Refused(f"{label}: {qualname} in the installed version has a different shape "
                          f"(expected the line {anchor!r} once, found it {len(hits)} times); refusing to guess")
        indent = lines[hits[0]][: len(lines[hits[0]]) - len(lines[hits[0]].lstrip())]
        lines[hits[0]:hits[0]] = [indent + x for x in insert]
    namespace = dict(fn.__globals__)
    namespace.update(extra_globals)
    exec(compile("\n".join(lines) + "\n", f"<rssprobe {label}: {qualname}>", "exec"), namespace)
    setattr(owner, attr, namespace[fn.__name__])
