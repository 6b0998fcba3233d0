"""Every directory root and file name rssprobe writes, in one place.

Imported by the worker (inside the training process) as well as by the orchestration
side, so it imports the standard library only. A run directory holds

  manifest.json          what ran and how it ended (written before the worker starts, updated at the end)
  worker.json            the exact instructions the worker got
  events.jsonl           everything rank 0 measured, one flushed line per event (rank r: events.rank<r>.jsonl)
  steps.parquet          the per-step table derived from the events at the end (rank r: steps.rank<r>.parquet)
  worker.log             the worker's stdout and stderr (rank r of a multi-rank run: worker.rank<r>.log)
  overlay/               patched copies of deepspeed/torch modules (--patch-file)
  memray-<phase>.bin     native captures per phase (--memray), and native.json, their top sites

A run group is group.json plus run-01, run-02, ... (each a run directory); a matrix is
matrix.json plus one run group per cell; a bisect is bisect.json (and definition.json)
plus one directory per configuration tried, with run groups round-1, round-2, ...
"""

from __future__ import annotations

import os
import re
from pathlib import Path

MANIFEST = "manifest.json"
GROUP = "group.json"
EVENTS = "events.jsonl"
STEPS = "steps.parquet"
WORKER_SPEC = "worker.json"
WORKER_LOG = "worker.log"
NATIVE = "native.json"
CHECKPOINTS = "checkpoints"  # an in-run checkpoint event saves here, inside the run directory, never elsewhere
OVERLAY = "overlay"
MEMRAY_PHASES = ("init", "first_step", "steady")
MATRIX_INDEX = "matrix.json"
BISECT_RESULT = "bisect.json"
BISECT_DEFINITION = "definition.json"
SCALE_INDEX = "scale.json"
ENV_MARKER = ".rssprobe-env.json"
EVENTS_GLOB = "events*.jsonl"
RANK_EVENTS_GLOB = "events.rank*.jsonl"

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def slug(text: str, limit: int | None = None) -> str:
    """A file-name-safe form of text (scenario names, versions, patch lists)."""
    return _UNSAFE.sub("_", text)[:limit]


def events_file(rank: int) -> str:
    """Rank 0 writes events.jsonl (the whole stream of a 1-rank run); rank r > 0 events.rank<r>.jsonl."""
    return EVENTS if rank == 0 else f"events.rank{rank}.jsonl"


def rank_of_events(name: str) -> int:
    """The rank an events file belongs to (the inverse of events_file)."""
    return 0 if name == EVENTS else int(name.split(".")[1].removeprefix("rank"))


def steps_file(rank: int) -> str:
    return STEPS if rank == 0 else f"steps.rank{rank}.parquet"


def rank_log(rank: int) -> str:
    return f"worker.rank{rank}.log"


def memray_file(phase: str) -> str:
    return f"memray-{phase}.bin"


def group_member(i: int) -> str:
    return f"run-{i:02d}"


def bisect_round(n: int) -> str:
    return f"round-{n}"


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


def scale_group(params: int) -> str:
    """A size sweep's run group of one model size, by the parameter count the model really has."""
    return f"params-{params}"


def ccache_dir() -> Path:
    """The compiler cache shared by every environment's op builds (compilecache.py); RSSPROBE_CCACHE_DIR
    shares one across cache roots (the suite's throw-away roots reuse the user's objects)."""
    return _root("RSSPROBE_CCACHE_DIR", str(cache_root() / "ccache"))


ENV_OPS = "torch_extensions"  # an environment's own compiled-ops directory, inside the environment


def envs_root() -> Path:
    return _root("RSSPROBE_ENVS", str(cache_root() / "envs"))


def reports_root() -> Path:
    """Where `rssprobe report` writes a page when no --out or --html is given."""
    return Path("reports")
