"""JSON: the summary dict itself, the machine-readable form of everything shown."""

from __future__ import annotations

import json
from typing import Any


def render(data: Any) -> str:
    return json.dumps(data, indent=2, default=str) + "\n"
