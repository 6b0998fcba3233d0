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
* shown    the other views that choose figures, each with the figure's place in it: which figures lead the answer
           and the key table (LEAD, FAMILY), which are charted (FIT_CHART, VERDICT_CHART), a campaign's columns
           (MATRIX, EFFECT), the verdict page's (CLAIMS, VERDICT_MOVED), the table of ranks (PER_RANK); shown(view)
           lists them
* words    what the answer and the key table call it, as a reviewer says it (else its label)

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
    shown: tuple[tuple[str, int], ...] = ()  # (view, place in it)
    words: str = ""


# The views that choose figures (Metric.shown): what leads and what is charted is the registry's to say
LEAD = "lead"  # the answer names these first (analysis/answers.py)
FAMILY = "lead family"  # the lead's figures assessed together: the key table, the change chart (analysis/effects.py)
FIT_CHART = "fit chart"  # a report's charts of size sweeps (reporters/plots.py)
VERDICT_CHART = "verdict chart"  # the verdict page's chart of the PR's effect (reporters/verdict.py)
CLAIMS = "claims"  # the verdict page's figures of each configuration (analysis/claims.py)
VERDICT_MOVED = "verdict moved"  # the verdict page says in which configurations these moved (reporters/verdict.py)
MATRIX = "matrix"  # a campaign's table: each cell's figures (campaign/matrix.py, reporters/show.py)
EFFECT = "patch effect"  # and a patch's effect on these, the low-noise ones
PER_RANK = "per rank"  # a multi-rank run's table of ranks, before its roles (reporters/views.py)
SWEEP_LEAD = "sweep lead"  # a size sweep's answer leads with the first of these it fitted (analysis/answers.py)
# the low-noise figure: RSS after a final malloc_trim(0) above the baseline, gated by default
TRIMMED = "budget.rss_after_trim_above_baseline"


def _phase(name: str, label: str, short: str = "", headline: bool = True, shown: tuple[tuple[str, int], ...] = (),
           words: str = "") -> Metric:
    return Metric(name, label, "phases" if headline else "", headline=headline, short=short or label, shown=shown,
                  words=words)


# In order: a name takes the first entry whose pattern matches it; HEADLINE keeps this order.
_HEADLINE_PHASES = (
    _phase("init.rss", "RSS after deepspeed.initialize", "init", shown=((MATRIX, 1), (PER_RANK, 1)),
           words="RSS after deepspeed.initialize"),
    _phase("init.peak", "peak RSS during deepspeed.initialize"),
    _phase("first_step.rss", "RSS after the first step", "first step", shown=((FAMILY, 3), (MATRIX, 2)),
           words="RSS after the first step"),
    _phase("first_step.peak", "peak RSS in the first step"),
    _phase("steady.rss", "steady RSS", "steady", words="steady RSS",
           shown=((FAMILY, 4), (FIT_CHART, 1), (VERDICT_CHART, 1), (CLAIMS, 1), (MATRIX, 3), (EFFECT, 1),
                  (PER_RANK, 2), (SWEEP_LEAD, 2), (VERDICT_MOVED, 2))),
    _phase("steady.peak", "peak RSS of the steady steps"),
    _phase("peak", "peak RSS", "peak", words="the peak",
           shown=((FAMILY, 5), (FIT_CHART, 2), (CLAIMS, 2), (MATRIX, 4), (PER_RANK, 3))),
    _phase("steady.glibc_in_use", "glibc in use in the steady steps"),
    _phase("steady.glibc_free", "glibc free-retained in the steady steps"),
)
REGISTRY: tuple[Metric, ...] = (
    *_HEADLINE_PHASES,
    Metric("budget.live", "live buffers", "phases", gated=True, exact=True, headline=True, short="live",
           shown=((LEAD, 2), (FAMILY, 1), (FIT_CHART, 4), (CLAIMS, 5), (MATRIX, 5), (PER_RANK, 4)),
           words="DeepSpeed's live buffers"),
    Metric("budget.rss_above_baseline", "RSS at the end", "phases", headline=True,
           shown=((CLAIMS, 3), (SWEEP_LEAD, 3))),
    # RSS minus live tensors: runs before the memory-map partition have no other answer; in JSON for them, out of the
    # tables and the gates' lists, where "not attributed" (beyond every part) answers the same question
    Metric("budget.unexplained", "RSS not explained by live buffers (runs before the memory-map partition)",
           shown=((FIT_CHART, 5),)),
    Metric("budget.glibc_free_retained", "glibc free-retained at the end", "phases", headline=True),
    Metric("budget.not_attributed", "RSS beyond the memory-map parts", "phases", headline=True),
    Metric(TRIMMED, "RSS after a final trim", "phases", gated=True, exact=True, headline=True, short="after trim",
           shown=((LEAD, 1), (FAMILY, 2), (FIT_CHART, 3), (VERDICT_CHART, 2), (CLAIMS, 4), (MATRIX, 6), (EFFECT, 2),
                  (SWEEP_LEAD, 1)), words="RSS after a final trim"),
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
    # glibc's free chunks that stay resident: the verdict page shows it beside the PR's figures
    Metric("part.glibc_free_resident", "RSS of a memory-map part", "parts", shown=((CLAIMS, 6), (VERDICT_MOVED, 1))),
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


def shown(view: str) -> tuple[str, ...]:
    """The figures `view` shows (Metric.shown), in its order."""
    return tuple(name for _place, name in sorted((place, m.pattern) for m in REGISTRY for v, place in m.shown
                                                 if v == view))


# a campaign's table (matrix, plan): each cell's headline figures, and a patch's effect on the low-noise ones
MATRIX_FIGURES = shown(MATRIX)
PATCH_EFFECTS = shown(EFFECT)
# the roles the table of ranks shows after shown(PER_RANK) (ZeRO-3's own, where a rank has them): role names are the
# contract's (contract/names.py), not registry entries
RANK_ROLES = ("fp32_master", "fp32_grad", "adam_exp_avg", "adam_exp_avg_sq", "bit16_params")
STAGE3_RANK_ROLES = ("bit16_partitions", "grad_partitions", "gathered_params")
# the answer's and the key table's words for a figure (lead_words), as a reviewer says them
WORDS = {m.pattern: m.words for m in REGISTRY if m.words}
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
