"""THE metric registry: every figure a run can have (Summary.metrics()), once, with what it is.

A figure is bytes per parameter above the run's own pre-model baseline unless its unit says otherwise.
Each entry names a figure or a glob of figures and says

* label    what a table calls it ("steady RSS"); short: a narrow column's heading ("steady")
* group    the table diff and gate show it in (phases, roles, pinned, parts, node, sites); "" = JSON and gates only
* gated    whether it decides a gate's verdict by default (the others inform)
* exact    the same across identical runs (a census, a count) or near it (RSS after a final malloc_trim),
           as opposed to noisy: raw RSS of identical runs differs by up to +-4 B/param from glibc's
           retention (README, "Noise"), which is why only exact figures gate by default
* headline shown in the phases table of diff and gate and in a group's table, in this order

Summary.metrics() emits through registered() and refuses a name no entry covers; compare's gated figures
and groups, a matrix's columns, bisect's advice, the ceilings' check and every table select from here.
A new figure is added here first (README: "The contract").
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
from collections.abc import Iterable
from dataclasses import dataclass

from ..config import scenario as scenario_mod
from ..config.scenario import Scenario
from ..config.sites import for_scenario
from ..contract.files import SAVE_KINDS
from ..contract.names import PART_KEYS, role_names
from ..errors import UserError

B_PER_PARAM = "B/param"


@dataclass(frozen=True)
class Metric:
    pattern: str
    label: str
    group: str = ""
    gated: bool = False
    exact: bool = False
    headline: bool = False
    unit: str = B_PER_PARAM
    short: str = ""


def _phase(name: str, label: str, short: str = "", headline: bool = True) -> Metric:
    return Metric(name, label, "phases" if headline else "", headline=headline, short=short or label)


# In order: a name takes the first entry whose pattern matches it; HEADLINE keeps this order.
_HEADLINE_PHASES = (
    _phase("init.rss", "RSS after deepspeed.initialize", "init"),
    _phase("init.peak", "peak RSS during deepspeed.initialize"),
    _phase("first_step.rss", "RSS after the first step", "first step"),
    _phase("first_step.peak", "peak RSS in the first step"),
    _phase("steady.rss", "steady RSS", "steady"),
    _phase("steady.peak", "peak RSS of the steady steps"),
    _phase("peak", "peak RSS", "peak"),
    _phase("steady.glibc_in_use", "glibc in use in the steady steps"),
    _phase("steady.glibc_free", "glibc free-retained in the steady steps"),
)
REGISTRY: tuple[Metric, ...] = (
    *_HEADLINE_PHASES,
    Metric("budget.live", "live buffers", "phases", gated=True, exact=True, headline=True, short="live"),
    Metric("budget.rss_above_baseline", "RSS at the end", "phases", headline=True),
    # RSS minus live tensors: runs before the memory-map partition have no other answer; in JSON for them, out of the
    # tables and the gates' lists, where "not attributed" (beyond every part) answers the same question
    Metric("budget.unexplained", "RSS not explained by live buffers (runs before the memory-map partition)"),
    Metric("budget.glibc_free_retained", "glibc free-retained at the end", "phases", headline=True),
    Metric("budget.not_attributed", "RSS beyond the memory-map parts", "phases", headline=True),
    Metric("budget.rss_after_trim_above_baseline", "RSS after a final trim", "phases", gated=True, exact=True,
           headline=True, short="after trim"),
    Metric("budget.malloc_trim_released", "released by malloc_trim(0) at the end"),
    # the other phase figures: in JSON, gate-able by name, not in the tables
    *(_phase(f"{p}.{k}", f"{p} {k}", headline=False) for p in ("init", "first_step", "steady", "end")
      for k in ("rss", "peak", "glibc_in_use", "glibc_free")
      if f"{p}.{k}" not in {m.pattern for m in _HEADLINE_PHASES}),
    # VmLck above the baseline: pages mlock holds (DeepSpeed's native pinned backend really locks, on the CPU
    # accelerator too), read per step where the run locks memory (worker); exact: whole pages of exact requests
    *(Metric(f"{p}.locked", f"page-locked (VmLck), {p.replace('_', ' ')}", "pinned", exact=True)
      for p in ("init", "first_step", "steady", "end")),
    Metric("role.*", "live buffers of a census role", "roles", gated=True, exact=True),
    Metric("zero3.*", "ZeRO-3 16-bit weights left gathered (a count)", "roles", gated=True, exact=True),
    # pinned host memory (analysis/pinned.py): DeepSpeed's pin requests and what torch's caching host allocator
    # holds for them. Counts, not RSS readings: exact across identical runs. Not gated by default (gate them by
    # name, --metric 'pinned.*'): on a CPU run the held and slack figures are a prediction for CUDA from
    # rssprobe's model of torch's rule, not a measurement of the run (a new torch or a corrected rule moves them
    # with no byte of memory changed), and the requested bytes are the very tensors role.* already gates
    *(Metric(f"pinned.{name}", label, "pinned", exact=True) for name, label in (
        ("requested", "pinned host memory requested (DeepSpeed's pin requests alive at the end)"),
        ("held_predicted", "pinned host memory held, predicted for CUDA (torch's caching host allocator rule)"),
        ("slack_predicted", "pinned host memory held beyond the requests, predicted for CUDA"),
        ("held", "pinned host memory held on CUDA, measured (the host allocator's held bytes)"),
        ("locked", "page-locked host memory at the end, measured (VmLck at the end census)"),
        ("slack", "pinned host memory held on CUDA beyond the live pinned tensors, measured"))),
    # the save phase (analysis/saves.py): per save kind (contract.SAVE_KINDS, and "final": the saves after the last
    # step), per rank, of the whole model's parameters; node.save.* sums the ranks (the "node.*" entry below)
    *(Metric(f"save.*.{name}", label, "saves", exact=exact) for name, label, exact in (
        ("peak", "a save's exact peak above the RSS right before it", False),
        ("peak_rss", "a save's exact peak above the pre-model baseline", False),
        ("retained", "RSS a save leaves behind", False),
        ("state_dict", "the consolidated 16-bit state dict a save builds on this rank (storage bytes)", True),
        ("collected", "RSS the garbage collector freed right after a scenario's save (held by reference cycles)",
         False))),
    Metric("node.save.*", "a save figure, every rank summed (peaks: an upper bound of the node's)", "saves"),
    Metric("part.*", "RSS of a memory-map part", "parts"),
    Metric("node.*", "every rank summed (of the whole model's parameters)", "node"),
    *(Metric(f"load.{name}", label) for name, label in (
        ("peak", "the exact peak of the model's load from its checkpoint, above the baseline"),
        ("rss", "RSS after the model's load from its checkpoint, above the baseline"),
        ("anon", "anonymous RSS after the model's load, above the baseline"),
        ("file", "file-backed RSS after the model's load (the checkpoint's mapped pages among it)"),
        ("shmem", "shared RSS after the model's load"),
        ("whole", "the whole-model tensors a rank holds after the load"),
        ("partition", "the ZeRO-3 partitions a rank holds after the load"))),
    Metric("site.*", "a code site's retained or peak bytes", "sites"),
    Metric("event.*", "RSS retained or peak per in-run event", unit="B/param per occurrence"),
    Metric("growth.*", "RSS slope over the steps", unit="B/param per step"),
)

HEADLINE: tuple[str, ...] = tuple(m.pattern for m in REGISTRY if m.headline)
GATED: tuple[str, ...] = tuple(m.pattern for m in REGISTRY if m.gated)
EXACT: tuple[str, ...] = tuple(m.pattern for m in REGISTRY if m.exact)
TABLE_GROUPS = ("phases", "roles", "pinned", "parts", "node", "saves", "sites")  # diff's and gate's tables, in order
PINNED: tuple[str, ...] = tuple(m.pattern for m in REGISTRY if m.group == "pinned")
# a campaign's table (matrix, plan): each cell's headline figures, and a patch's effect on the low-noise ones
MATRIX_FIGURES = ("init.rss", "first_step.rss", "steady.rss", "peak", "budget.live",
                  "budget.rss_after_trim_above_baseline")
PATCH_EFFECTS = ("steady.rss", "budget.rss_after_trim_above_baseline")
POINTS = ("init", "first_step", "steady", "end")
SITE_PHASES = ("init", "first_step", "steady")
BUDGET = ("live", "rss_above_baseline", "unexplained", "glibc_free_retained", "not_attributed",
          "malloc_trim_released", "rss_after_trim_above_baseline")


@functools.lru_cache(maxsize=4096)
def lookup(name: str) -> Metric | None:
    return next((m for m in REGISTRY if fnmatch.fnmatchcase(name, m.pattern)), None)


def metric(name: str) -> Metric:
    found = lookup(name)
    if found is None:
        raise KeyError(f"{name}: not a registered figure (rssprobe/analysis/metrics.py)")
    return found


def registered(figures: dict[str, float]) -> dict[str, float]:
    """The figures as emitted, once every name is known to the registry (a ValueError names one that is not)."""
    unknown = [name for name in figures if lookup(name) is None]
    if unknown:
        raise ValueError(f"unregistered figure(s) {', '.join(unknown[:3])}: add them to rssprobe/analysis/metrics.py")
    return figures


def group(name: str) -> str:
    return metric(name).group


# families whose rows differ only by the name after the dot (role.fp32_master): a row's words name it
NAMED_BY_SUFFIX = ("role.*", "zero3.*")


def label(name: str) -> str:
    """A figure's words: a part's own name (the contract's label), else its registry label."""
    part = next((lbl for lbl, key in PART_KEYS.items() if key == name), None)
    if part:
        return part
    found = metric(name)
    if found.pattern in NAMED_BY_SUFFIX and name != found.pattern:  # one row per role: each names its own
        return f"{found.label}: {name.split('.', 1)[1]}"
    return found.label


def columns(*names: str) -> dict[str, str]:
    """name -> short heading, for a table of chosen figures (a matrix's columns)."""
    return {name: metric(name).short or metric(name).label for name in names}


def is_gated(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def short_name(path: str) -> str:
    """A site's name in figures and tables: 'deepspeed.runtime...DeepSpeedZeroOptimizer.step' ->
    'DeepSpeedZeroOptimizer.step'."""
    return ".".join(path.split(".")[-2:])


def part_key(label: str) -> str | None:
    """A memory-map part's figure name (the contract declares it); None for a label it does not know."""
    return PART_KEYS.get(label)


def known(scenario: Scenario | None) -> list[str]:
    """Every figure name a run of this scenario can have, known before any run (to check a --metric); for None (a
    stored scenario that no longer validates) those of any scenario, without its own code sites and events."""
    stage = None if scenario is None else scenario.zero.stage
    names = [f"{p}.{f}" for p in POINTS for f in ("rss", "peak", "glibc_in_use", "glibc_free")] + ["peak"]
    names += [f"budget.{b}" for b in BUDGET]
    names += [f"role.{name}" for name in role_names(stage)] + ["role.other"]
    names += list(PART_KEYS.values())
    if stage in (3, None):
        names += ["zero3.gathered_after_backward", "zero3.gathered_after_step"]
    if scenario is None or scenario.world_size > 1:
        names += [f"node.{p}.{k}" for p in ("init", "first_step", "end") for k in ("rss", "pss")] + ["node.peak",
                                                                                                  "node.model_peak"]
    if scenario is None or scenario.model.kind == "script" or scenario.model.load == "checkpoint":
        names += [m.pattern for m in REGISTRY if m.pattern.startswith("load.")]  # a script's from_pretrained too
    if scenario is not None:
        names += [f"site.{short_name(path)}.{phase}.{kind}" for path, _required in for_scenario(scenario)
                  for phase in SITE_PHASES for kind in ("retained", "peak")]
    names += ["growth.per_step", "growth.anon_per_step"]
    names += _save_names(scenario)
    for name in scenario_mod.EVENTS:
        if scenario is not None and getattr(scenario, name, None) is not None:
            names += [f"event.{name}.retained", f"event.{name}.anon_retained", f"event.{name}.peak"]
    names += list(PINNED)
    registered(dict.fromkeys(names, 0.0))
    return names


def _save_names(scenario: Scenario | None) -> list[str]:
    """The save figures a run of this scenario can have: a script's any kind, a scenario's those of its [save]."""
    if scenario is None or scenario.model.kind == "script":
        kinds = [*SAVE_KINDS, "final"]
    elif scenario.save is not None:
        kinds = [{"checkpoint": "save_checkpoint"}.get(k, k) for k in scenario.save.at_end] + ["final"]
    else:
        return []
    names = [f"save.{k}.{f}" for k in kinds for f in ("peak", "peak_rss", "retained", "state_dict")]
    if scenario is not None and scenario.model.kind != "script":  # measured after a scenario's own saves only
        names += [f"save.{k}.collected" for k in kinds]
    if scenario is None or scenario.world_size > 1 or scenario.model.kind == "script":
        names += [f"node.save.{k}.{f}" for k in kinds for f in ("peak", "peak_rss", "state_dict")]
    return names


def check(flag: str, pattern: str, scenario: Scenario | None, measured: Iterable[str] = ()) -> None:
    """UserError (one line, the close names) unless `pattern` (a name or a glob) names a figure a run of the
    scenario can have (None: a stored scenario that no longer validates: any scenario's, without sites and events),
    or one of `measured` (the figures stored runs have). THE check of a figure's name: gate (--run, stored sides,
    --limits), diff, two sweeps and bisect all refuse a misspelt one the same way."""
    names = list(dict.fromkeys([*measured, *known(scenario)]))
    if any(fnmatch.fnmatchcase(n, pattern) for n in names):
        return
    close = difflib.get_close_matches(pattern, names, n=5, cutoff=0.5)
    hint = f"close: {', '.join(close)}" if close else "e.g. " + ", ".join(n for n in names[:1] + list(EXACT[:2]))
    raise UserError(f"{flag} {pattern}: no such figure ({hint}; see `rssprobe show --format json`, 'metrics')")
