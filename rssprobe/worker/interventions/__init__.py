"""The implementations of the interventions rssprobe.contract declares, by name (each module's APPLY)."""

from __future__ import annotations

from collections.abc import Callable

from ...contract.interventions import INTERVENTIONS
from . import nativepin, pinregister, pr8132, testing
from .base import Context, Refused

Apply = Callable[[Context, dict[str, str]], None]
REGISTRY: dict[str, Apply] = {**pr8132.APPLY, **pinregister.APPLY, **nativepin.APPLY, **testing.APPLY}
_unimplemented = set(INTERVENTIONS) ^ set(REGISTRY)
assert not _unimplemented, f"declared and implemented interventions differ: {sorted(_unimplemented)}"

__all__ = ["REGISTRY", "Context", "Refused"]
