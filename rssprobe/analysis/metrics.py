"""The names of the figures (Summary.metrics()), known before any run, to check a --metric up front.

A bisect, gate or scale that names a figure no run will measure should fail in a second
with the close names, not after minutes of training.
"""

from __future__ import annotations

import difflib
import fnmatch

from ..errors import UserError
from ..scenario import Scenario
from ..sites_config import for_scenario, short_name
from ..worker import memmap
from ..worker.census import role_names
from . import inrun, pinned
from .summary import part_key

POINTS = ("init", "first_step", "steady", "end")
POINT_FIGURES = ("rss", "peak", "glibc_in_use", "glibc_free")
BUDGET = ("live", "rss_above_baseline", "unexplained", "glibc_free_retained", "not_attributed",
          "malloc_trim_released", "rss_after_trim_above_baseline")
SITE_PHASES = ("init", "first_step", "steady")
# figures that exact (census) or near exact (RSS after a final malloc_trim) across identical runs
EXACT = ("budget.live", "budget.rss_after_trim_above_baseline", "role.*", "zero3.*", "pinned.*")


def known(scenario: Scenario) -> list[str]:
    """Every figure name a run of this scenario can have."""
    names = [f"{p}.{f}" for p in POINTS for f in POINT_FIGURES] + ["peak"] + [f"budget.{b}" for b in BUDGET]
    names += [f"role.{name}" for name in role_names(scenario.zero.stage)] + ["role.other"]
    names += [part_key(part) for part in memmap.PARTS]
    if scenario.zero.stage == 3:
        names += ["zero3.gathered_after_backward", "zero3.gathered_after_step"]
    if scenario.world_size > 1:
        names += [f"node.{p}.{k}" for p in ("init", "first_step", "end") for k in ("rss", "pss")] + ["node.peak"]
    names += [f"site.{short_name(path)}.{phase}.{kind}" for path, _required in for_scenario(scenario)
              for phase in SITE_PHASES for kind in ("retained", "peak")]
    return names + list(pinned.NAMES) + inrun.known(scenario)


def check(flag: str, pattern: str, scenario: Scenario) -> None:
    """UserError (one line, the close names) unless `pattern` (a name or a glob) names a known figure."""
    names = known(scenario)
    if any(fnmatch.fnmatchcase(n, pattern) for n in names):
        return
    close = difflib.get_close_matches(pattern, names, n=5, cutoff=0.5)
    hint = f"close: {', '.join(close)}" if close else "e.g. " + ", ".join(n for n in names[:1] + list(EXACT[:2]))
    raise UserError(f"{flag} {pattern}: no such figure ({hint}; see `rssprobe show --format json`, 'metrics')")


def is_exact(metric: str) -> bool:
    return any(fnmatch.fnmatchcase(metric, p) for p in EXACT)
