"""How a command's runs are made beyond their scenario, as one typed bundle: what is applied to DeepSpeed and torch,
under which malloc and glibc knobs, in which interpreter, how many fresh processes of each configuration.

Built once from the command line (commands/common_args.run_options) and carried whole by every request that runs
something (`run`, `scale`, `estimate`'s calibration, `gate --run`, `matrix`, `bisect`); each request keeps only its
own extras beside it. A campaign whose axes are patches or allocators (`matrix`) keeps those as axes, not here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class RunOptions:
    patches: tuple[str, ...] = ()  # interventions and sets, applied together (`rssprobe patches`)
    patch_files: tuple[Path, ...] = ()  # unified diffs against the installed packages, applied to an overlay
    allocator: str = "glibc"  # config/allocators.py's names
    malloc_env: dict[str, str] = field(default_factory=dict)  # glibc MALLOC_* knobs, validated
    repeat: int | None = 1  # fresh processes a configuration; None: the command chooses (estimate: by the glibc)
    env_ref: str | None = None  # an isolated environment's name or spec
    python: str | None = None  # the worker's interpreter

    @property
    def runs(self) -> int:
        """Fresh processes a configuration gets: the repeat, or one where the command chose none."""
        return self.repeat or 1

