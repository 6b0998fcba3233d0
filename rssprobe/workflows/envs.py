"""`rssprobe env`: isolated torch + DeepSpeed environments, built, listed and removed (run/envs does the work)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..log import say
from ..run import envs


def create(words: tuple[str, ...], pip: tuple[str, ...]) -> envs.Env:
    """Build (or reuse) the environment of a spec's words (torch==V deepspeed==V, deepspeed=PATH[@REV])."""
    spec = envs.EnvSpec.parse(words)
    envs.check_pinned_libraries(words)  # a library range (transformers>=4) refused as an unpinned torch is
    return envs.create(spec, pip, say)


def listed() -> tuple[Path, list[dict[str, Any]]]:
    """Where environments live, and each one's description (name, versions, spec, created)."""
    return envs.envs_root(), [e.info() for e in envs.list_envs()]


def remove(ref: str) -> Path:
    """Remove an environment by name or spec; the directory it was."""
    return envs.remove(ref).path
