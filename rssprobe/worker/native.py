"""Optional native view (--memray): one memray capture per phase, with native stacks.

Separate captures per phase (init, first step, steady) let the analysis say which
allocations a phase left behind (leaked within the capture) and which were alive at its
peak (high watermark), without memray having to know about phases.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..contract.files import memray_file


class NativeCapture:
    def __init__(self, run_dir: Path, enabled: bool) -> None:
        self.run_dir, self.enabled = run_dir, enabled

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        import memray

        tracker: Any = memray.Tracker(self.run_dir / memray_file(name), native_traces=True)
        with tracker:
            yield
