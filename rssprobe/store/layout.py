"""Where rssprobe keeps things: the roots, and the names of groups and campaign directories (stdlib only).

A run directory's own files are named by the contract (rssprobe.contract: manifest.json, events.jsonl, ...).
Above runs:

  group.json + run-01, run-02, ...       a run group (N fresh runs of one configuration)
  matrix.json + one group per cell        a matrix or a plan (a plan also keeps plan.json)
  scale.json + params-<N>/ per size       a size sweep
  definition.json + <config>/round-<n>/   a bisect (bisect.json: its result)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

GROUP = "group.json"
MATRIX_INDEX = "matrix.json"  # a matrix's, and a plan's
PLAN_FILE = "plan.json"  # a plan's directory: the plan it ran
SCALE_INDEX = "scale.json"
BISECT_DEFINITION = "definition.json"
BISECT_RESULT = "bisect.json"
ENV_MARKER = ".rssprobe-env.json"
ENV_OPS = "torch_extensions"  # an environment's own compiled-ops directory, inside the environment

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def slug(text: str, limit: int | None = None) -> str:
    """A file-name-safe form of text (scenario names, versions, patch lists)."""
    return _UNSAFE.sub("_", text)[:limit]


def group_member(i: int) -> str:
    return f"run-{i:02d}"


def bisect_round(n: int) -> str:
    return f"round-{n}"


def scale_group(params: int) -> str:
    """A size sweep's run group of one model size, by the parameter count the model really has."""
    return f"params-{params}"


def _root(variable: str, default: str) -> Path:
    return Path(os.environ.get(variable) or default)


def cache_root() -> Path:
    """Compiled ops and environments (RSSPROBE_CACHE, else $XDG_CACHE_HOME/rssprobe)."""
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return _root("RSSPROBE_CACHE", os.path.join(xdg, "rssprobe"))


def runs_root() -> Path:
    return _root("RSSPROBE_RUNS", "reports/runs")


def matrix_root() -> Path:
    return _root("RSSPROBE_MATRIX", "reports/matrix")


def bisect_root() -> Path:
    return _root("RSSPROBE_BISECT", "reports/bisect")


def scale_root() -> Path:
    return _root("RSSPROBE_SCALE", "reports/scale")


def ccache_dir() -> Path:
    """The compiler cache shared by every environment's op builds (run/compilecache.py); RSSPROBE_CCACHE_DIR
    shares one across cache roots (the suite's throw-away roots reuse the user's objects)."""
    return _root("RSSPROBE_CCACHE_DIR", str(cache_root() / "ccache"))


def envs_root() -> Path:
    return _root("RSSPROBE_ENVS", str(cache_root() / "envs"))


def is_rssprobe_env(python: str) -> bool:
    """Whether `python` is the interpreter of an environment rssprobe made (under the envs root)."""
    return Path(python).absolute().parent.parent.parent == envs_root().absolute()


def estimate_root() -> Path:
    """`rssprobe estimate`'s calibrations (RSSPROBE_ESTIMATE, else the cache root's estimate/)."""
    return _root("RSSPROBE_ESTIMATE", str(cache_root() / "estimate"))


def reports_root() -> Path:
    """Where `rssprobe report` writes a page when no --out or --html is given."""
    return Path("reports")
