"""Where rssprobe keeps things: the roots, and the names of groups and campaign directories.

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

from .. import kinds
from ..errors import UserError

GROUP = "group.json"
# the campaigns' index files: each kind's entry in rssprobe/kinds.py owns its name
MATRIX_INDEX = kinds.MATRIX.index  # a matrix's, and a plan's
PLAN_FILE = str(kinds.PLAN.marker)  # a plan's directory: the plan it ran
SCALE_INDEX = kinds.SCALE.index
BISECT_DEFINITION = kinds.BISECT.index
BISECT_RESULT = "bisect.json"
ENV_MARKER = ".rssprobe-env.json"
ENV_OPS = "torch_extensions"  # an environment's own compiled-ops directory, inside the environment

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
NAME_PART = 80  # the most characters of a name (scenario, label, ...) in a directory name rssprobe makes


def slug(text: str, limit: int | None = None) -> str:
    """A file-name-safe form of text (scenario names, versions, patch lists)."""
    return _UNSAFE.sub("_", text)[:limit]


MAX_REPEAT = 10_000  # the most runs a group may say it holds (group.json is read from disk, and drives a loop)
_MEMBER = re.compile(r"run-\d{2,}")


def group_member(i: int) -> str:
    return f"run-{i:02d}"


def is_group_member(name: str) -> bool:
    """A name group_member() gives (run-01, run-02, ...)."""
    return _MEMBER.fullmatch(name) is not None


def bisect_round(n: int) -> str:
    return f"round-{n}"


def scale_group(params: int) -> str:
    """A size sweep's run group of one model size, by the parameter count the model really has."""
    return f"params-{params}"


def _root(variable: str, default: str, named: str | None = None) -> Path:
    """A root directory from its variable (else the default); UserError, one line naming the variable, when it
    or a directory above it is something other than a directory (a regular file, say)."""
    given = os.environ.get(variable)
    path = Path(given or default)
    blocker = next((p for p in [path, *path.parents] if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        source = f"{variable}={given}" if given else named or f"{variable} (unset: {path})"
        raise UserError(f"{source}: {blocker} is not a directory; point it at a directory")
    return path


def cache_root() -> Path:
    """Compiled ops and environments (RSSPROBE_CACHE, else $XDG_CACHE_HOME/rssprobe)."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    default = os.path.join(xdg or os.path.expanduser("~/.cache"), "rssprobe")
    return _root("RSSPROBE_CACHE", default, f"XDG_CACHE_HOME={xdg}" if xdg else None)


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


def checkpoints_root() -> Path:
    """The checkpoints model.load = "checkpoint" scenarios load (RSSPROBE_CHECKPOINTS, else the cache root's
    checkpoints/): written once per shape (run/checkpoints.py)."""
    return _root("RSSPROBE_CHECKPOINTS", str(cache_root() / "checkpoints"))


def reports_root() -> Path:
    """Where `rssprobe report` writes a page when no --out or --html is given."""
    return Path("reports")
