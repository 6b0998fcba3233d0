"""The parts inside the declared results (analysis/results.py): the rows and sub-objects whose keys are fixed (a
site's row, a budget, the pinned-memory view, a matrix cell, an estimate's phase...), declared so that a reporter's
read of one is checked against its key by the type checker (tests/test_types.py) and tests/test_results.py holds
real outputs to them, nested as they are.

Each is `total=False`: the key names are what is declared (a key read here that no producer writes is an error
before it is a KeyError or a silent None); which keys a producer always writes stays the producer's (several are
left out when they do not apply: a CUDA-only figure, an estimate's unmeasured phase). Dicts keyed by data (figure,
role, part, phase, site, save kind, library names) stay dicts: their names are not fields.
"""

from __future__ import annotations

from typing import Any, TypedDict

# ---- a run's summary (analysis/summary.py) ------------------------------------------------------------------


class Zero(TypedDict, total=False):
    stage: int | None
    offload_optimizer: str | None
    offload_param: str | None


class Script(TypedDict, total=False):
    """A script run's script (analysis/modelinfo.py: script)."""

    path: str
    sha256: str | None
    args: list[str]
    stop_after: int | None
    command: list[str]
    stopped: str | None
    unfinished_step: str | None
    engines: int


class ModelInfo(TypedDict, total=False):
    kind: str
    architecture: str | None
    layers: int | None
    params_target: float | None
    params: int
    param_tensors: int
    tied: list[list[str]]
    trainable_params: int | None
    tied_params: int
    model_type: str | None
    seq_len: int | None
    imports: dict[str, str] | None  # library -> version


class GlibcMalloc(TypedDict, total=False):
    available: bool
    reason: str | None
    version: str | None


class Budget(TypedDict, total=False):
    """One census's live-buffer budget (analysis/budget.py); `roles`, `parts` and `device` keyed by name."""

    at: str
    roles: dict[str, float]
    roles_allocated: dict[str, float]
    roles_per_trainable_param: dict[str, float]
    live_bytes_per_param: float
    rss_above_baseline_bytes_per_param: float
    unexplained_bytes_per_param: float
    glibc_free_retained_bytes_per_param: float
    estimator_bytes_per_param: float
    parts: dict[str, Any]
    parts_rss_above_baseline_bytes: int
    not_attributed_bytes: int
    python_objects_added: int
    python_modules_added: int
    not_attributed_bytes_per_param: float
    memmap_notes: list[str]
    census_time_s: float
    partition_time_s: float
    partition_rss_bytes: int
    imported_since_baseline: dict[str, int] | None  # package -> modules, and "total"
    host_pinned_bytes_per_param: float
    host_pageable_bytes_per_param: float
    device: dict[str, Any] | None
    device_note: str
    malloc_trim_released_bytes_per_param: float
    rss_after_trim_above_baseline_bytes_per_param: float


class CensusTime(TypedDict, total=False):
    at: str
    census_time_s: float
    partition_time_s: float | None
    partition_rss_bytes: int | None


class Site(TypedDict, total=False):
    site: str
    name: str
    phase: str
    calls: float
    retained_bytes_per_param: float | None
    exclusive_bytes_per_param: float | None
    peak_bytes_per_param: float | None
    peak_above_entry_bytes_per_param: float | None
    glibc_in_use_bytes_per_param: float | None
    glibc_free_bytes_per_param: float | None
    glibc_mmapped_bytes_per_param: float | None


class Intervention(TypedDict, total=False):
    """A requested patch and how often it took effect (analysis/summary.py: interventions)."""

    name: str
    spec: str
    counter: str | None
    count: int
    took_effect: bool
    effects: dict[str, Any]  # counter name -> count, and the patch's own log


class PinnedRow(TypedDict, total=False):
    role: str
    site: str
    where: str
    entry: str
    requests: int
    requested: int
    held_predicted: int
    reused: int
    freed: int
    held_measured: int | None
    via: str
    requested_bytes_per_param: float | None
    held_predicted_bytes_per_param: float | None
    held_measured_bytes_per_param: float | None
    slack_predicted_bytes_per_param: float | None


class PinnedTotals(TypedDict, total=False):
    requests: int
    freed: int
    alive: int
    requested_live: int
    held_predicted: int
    allocator_held_predicted: int
    reserve_segment: int
    exact_size: int
    held_measured: int | None
    pinned_tensors_measured: int | None
    locked_measured: int | None
    requested_live_bytes_per_param: float | None
    held_predicted_bytes_per_param: float | None
    allocator_held_predicted_bytes_per_param: float | None
    reserve_segment_bytes_per_param: float | None
    exact_size_bytes_per_param: float | None
    held_measured_bytes_per_param: float | None
    pinned_tensors_measured_bytes_per_param: float | None
    locked_measured_bytes_per_param: float | None
    slack_predicted_bytes_per_param: float | None
    slack_measured_bytes_per_param: float | None


class PinFix(TypedDict, total=False):
    """A fix that would save pinned memory on CUDA (analysis/fixes.py; rssprobe/data/fixes.toml)."""

    name: str
    label: str
    short: str
    user: str
    rssprobe: str
    holds: str
    pinned_predicted: int
    host_predicted: int
    saving_predicted: int
    pinned_predicted_bytes_per_param: float | None
    host_predicted_bytes_per_param: float | None
    saving_predicted_bytes_per_param: float | None
    h2d: str
    h2d_source: str
    full_bandwidth: bool
    cost: str
    hazard: str | None
    since: str
    reference: bool
    recommended: bool
    not_available: str | None


class PinRule(TypedDict, total=False):
    round_threshold: int | None
    max_cached: int | None
    host_register: bool
    reserve_segment: int
    reuse_checks_size: bool


class PinMemory(TypedDict, total=False):
    scenario: bool | str | None
    effective: dict[str, Any] | None  # DeepSpeed config section -> its pin_memory


class Pinned(TypedDict, total=False):
    """Pinned host memory (analysis/pinned.py): requests by role and site, the rule, the totals, the fixes."""

    torch: str
    alloc_conf: str | None
    on_cuda: bool
    recorded: bool
    rule: PinRule
    pin_memory: PinMemory
    ds_pin_backend: str | None
    entries: list[str]
    rows: list[PinnedRow]
    totals: PinnedTotals
    undersized_reuse: list[dict[str, Any]]
    undersized_reuses: int
    via_register: bool
    via_native: int
    locked_minus_native_pages: int | None
    not_predicted: str
    problem: str | None
    fixes: list[PinFix]
    fix_in_use: str | None


class Interval(TypedDict, total=False):
    """A mean or slope with its 95% t interval (analysis/stats.py)."""

    value: float
    low: float | None
    high: float | None
    n: int
    confidence: float


class Growth(TypedDict, total=False):
    from_step: int
    to_step: int
    bytes_per_step: Interval
    bytes_per_param_per_step: Interval
    includes_events: bool
    anon_bytes_per_param_per_step: Interval | None


class Occurrence(TypedDict, total=False):
    step: int
    entry_rss: int
    rss: int
    peak: int


class EventFigures(TypedDict, total=False):
    """An in-run event's figures (analysis/inrun.py: events)."""

    action: str
    occurrences: int
    steps: list[int]
    retained_bytes: Interval
    retained_bytes_per_param: Interval | None
    anon_retained_bytes_per_param: Interval | None
    peak_above_entry_bytes: float
    peak_above_entry_bytes_per_param: float | None
    mean_time_s: float
    each: list[Occurrence]
    sites: list[Site]


class PhaseFigures(TypedDict, total=False):
    rss: float | None
    peak: float | None
    glibc_in_use: float | None
    glibc_free: float | None


class RankRow(TypedDict, total=False):
    """One rank of a multi-rank run (analysis/summary.py: per_rank); `metrics` keyed by figure name."""

    rank: int
    status: str | None
    error: str | None
    steps_done: int
    partition_params: int | None
    metrics: dict[str, float]
    metrics_per_partition_param: dict[str, float] | None


class NodePoint(TypedDict, total=False):
    rss_bytes: int
    pss_bytes: int | None
    rss_bytes_per_param: float | None
    pss_bytes_per_param: float | None


class Node(TypedDict, total=False):
    """A multi-rank run's node (analysis/summary.py: node); `points` keyed by point name."""

    ranks: int
    points: dict[str, NodePoint]
    rss_bytes: int | None
    pss_bytes: int | None
    peak_rss_bytes: int | None
    peak_bytes_per_param: float | None
    peak_samples: int | None
    peak_interval_s: float | None
    model_peak_rss_bytes: int | None
    model_peak_bytes_per_param: float | None
    model_peak_samples: int | None


class LoadFigures(TypedDict, total=False):
    peak: float | None
    rss: float | None
    anon: float | None
    file: float | None
    shmem: float | None
    whole: float | None
    partition: float | None


class Load(TypedDict, total=False):
    """The model's load from its checkpoint (analysis/summary.py: load)."""

    how: str
    time_s: float
    zero_init: bool
    holds: str
    checkpoint: dict[str, Any] | None  # files, format, bytes
    peak_bytes: int
    rss_bytes: int
    whole_bytes: int
    partition_bytes: int
    figures: LoadFigures


class SaveFigures(TypedDict, total=False):
    """A save kind's figures on one rank (analysis/saves.py)."""

    occurrences: int
    steps: list[int]
    time_s: float
    peak_bytes: float
    peak: float
    peak_rss: float | None
    retained: float
    state_dict_bytes: int | None
    state_dict: float | None
    collected: float | None  # RSS the garbage collector freed right after rssprobe's own saves, per parameter
    parts: list[dict[str, Any]]


# ---- a group, a sweep, a comparison ------------------------------------------------------------------------


class AcrossRow(TypedDict, total=False):
    """One figure across a group's runs (analysis/summary.py: across)."""

    figure: str
    mean: float | None
    sd: float | None
    min: float | None
    max: float | None
    n: int


class SweepGroup(TypedDict, total=False):
    params: int
    dir: str


class FitRow(TypedDict, total=False):
    """One figure's fit over a sweep's sizes (analysis/sweep.py)."""

    figure: str
    slope_bytes_per_param: float
    slope_interval_bytes_per_param: float | None
    fixed_bytes: float
    fixed_interval_bytes: float | None
    worst_residual_bytes: float
    runs: int
    sizes: int
    dof: int
    level: float


class TwoSides(TypedDict):
    """One figure, B against A: what every comparison of two sides' runs states (stats.Comparison, effects.Effect)."""

    metric: str
    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    sd_a: float | None
    sd_b: float | None
    delta: float


class LeadEffect(TwoSides, total=False):
    """One lead figure's effect, assessed with the others (analysis/effects.py)."""

    gated: bool
    low: float | None
    high: float | None
    exact: bool
    p: float | None
    p_adjusted: float | None
    claim: str
    repeat_needed: int | None
    resolves: float | None


class Lead(TypedDict, total=False):
    """The lead's figures assessed together (analysis/effects.py: Family.as_dict)."""

    effects: list[LeadEffect]
    m: int
    alpha: float
    level: float
    threshold: float
    smallest_p: float | None
    repeat_needed: int | None
    correction: str


class Difference(TypedDict, total=False):
    """What differs between the sides besides the patch (a version, the allocator, ...)."""

    what: str
    a: Any
    b: Any


class SweepPart(TypedDict, total=False):
    """A figure's slope or fixed part, B against A (analysis/sweep.py)."""

    figure: str
    part: str
    a: float
    b: float
    delta: float
    interval: float | None
    dof: int
    threshold: float
    verdict: str
    reason: str


class SweepFigureComparison(TypedDict, total=False):
    figure: str
    gated: bool
    slope: SweepPart
    fixed: SweepPart


class LimitCheck(TypedDict, total=False):
    """One figure of a side against its ceiling (workflows/gate.py)."""

    metric: str
    limit: float
    values: list[float]
    verdict: str
    reason: str


# ---- an estimate (workflows/estimate.py) ---------------------------------------------------------------------


class EstimateTarget(TypedDict, total=False):
    scenario: str
    model_from: str
    params: int
    layers: int | None
    tensors: int
    param_groups: int
    largest_tensor: int
    stage: int
    offload_param: bool
    precision: str
    steps: int
    ranks_per_node: int
    nodes: int
    world_size: int
    accelerator: str
    pin_memory: EstimatePinMemory
    pinned_via: str
    torch_alloc_conf: str | None


# `from` (where the phase's figure comes from: analysis/savephase.sources) is a keyword: the functional form
EstimatePhase = TypedDict("EstimatePhase", {
    "phase": str, "key": str, "measured": bool, "why": str, "bytes": float, "upper_bytes": float, "interval": bool,
    "verdict": str | None, "from": str | None}, total=False)


class Provision(TypedDict, total=False):
    bytes: float
    phase: str
    interval: bool
    line: str
    predicted: bool  # the highest phase's figure is a prediction for CUDA (a GPU target's final 16-bit save)


# `from` is a keyword: the functional form
NodeRam = TypedDict("NodeRam", {"bytes": float | None, "from": str | None}, total=False)


class TrainerOwn(TypedDict):
    """The trainer's own host memory on the node (--seen-steady): what the user saw in steady training, this
    estimate's steady figure of DeepSpeed's buffers, and the difference added to every phase (0: none)."""

    seen_steady_bytes: float | None
    estimated_steady_bytes: float
    bytes: float


class Change(TypedDict, total=False):
    change: str
    how: str
    saving_bytes: float
    peak_upper_bytes: float
    fits: bool | None
    flags: list[str]
    command: str


class Lock(TypedDict, total=False):
    pinned_rank_bytes: float
    limit_bytes: float
    fits: bool


class DeepSpeedFormula(TypedDict, total=False):
    formula: str
    bytes: float
    where: str
    zero_init: bool
    copies_bytes: int
    states_bytes: int
    deciding: str
    deepspeed_bytes: float | None
    matches_target: bool
    reconciled: str


class Calibration(TypedDict, total=False):
    path: str
    accelerator: str
    runs: int
    repeats: int
    steps: int
    ranks: int
    params: list[int]
    left_out: list[Any]
    allocator: str
    malloc_env: dict[str, str]
    read_sd_bytes: float  # the sd of one RSS read where it was measured: no interval is finer (0: not known)
    scenario: str
    provenance: dict[str, Any]
    proxy: dict[str, Any] | None


# ---- a matrix's and a plan's cells (campaign/matrix.py, campaign/plan.py) -----------------------------------


class _Cell(TypedDict, total=False):
    id: str
    torch: str | None
    deepspeed: str | None
    allocator: str
    patch: str


class _CellRun(TypedDict, total=False):
    status: str
    group: str
    error: str | None
    env: str | None
    python: str
    statuses: list[str]
    wall_s: float | None
    versions: dict[str, str | None]  # library -> version
    figures: dict[str, float | None]  # figure name -> mean
    effects: dict[str, Any]  # figure name -> a FigureComparison
    runs_ok: str


class _Listed(TypedDict, total=False):
    finished: bool
    shard: int | str | None


class _Libraries(TypedDict, total=False):
    transformers: str | None
    accelerate: str | None


class _PlanAxis(TypedDict, total=False):
    axis: str
    value: str
    ranks: int
    repeat: int
    optional: bool
    scenario: str | None
    sets: list[str]


class MatrixCell(_Cell, _Libraries, _CellRun, total=False):
    pass


class PlanCell(_Cell, _PlanAxis, _CellRun, total=False):
    pass


class MatrixListCell(_Cell, _Libraries, _Listed, total=False):
    pass


class PlanListCell(_Cell, _PlanAxis, _Listed, total=False):
    pass


class Versions(TypedDict, total=False):
    """What a run's worker ran (worker/__main__.py's hello): the library versions, each a matrix axis too."""

    python: str
    torch: str
    deepspeed: str
    glibc: str | None
    transformers: str | None
    accelerate: str | None


class SizeRun(TypedDict, total=False):
    """One size of a sweep as it ran (analysis/sweep.py): its group, its runs and how many finished."""

    params: int
    group: str
    runs: int
    ok: int



class _EstimateFigures(TypedDict, total=False):
    """An estimate's figures for one rank or the node (workflows/estimate.py): each ROW of estimateviews as
    `<key>_bytes` with its interval (`_low`, `_high`) and floor; `wide` names those whose interval is wider than
    the figure, `roles` the live buffers by role."""

    wide: list[str]
    steady_rss_bytes: float
    steady_rss_bytes_low: float | None
    steady_rss_bytes_high: float | None
    steady_rss_bytes_floor: float | None
    peak_rss_bytes: float
    peak_rss_bytes_low: float | None
    peak_rss_bytes_high: float | None
    peak_rss_bytes_floor: float | None
    initialize_peak_bytes: float
    initialize_peak_bytes_low: float | None
    initialize_peak_bytes_high: float | None
    initialize_peak_bytes_floor: float | None
    initialize_model_copy_bytes: float
    initialize_model_copy_bytes_low: float | None
    initialize_model_copy_bytes_high: float | None
    initialize_model_copy_bytes_floor: float | None
    initialize_state_bytes: float
    initialize_state_bytes_low: float | None
    initialize_state_bytes_high: float | None
    initialize_state_bytes_floor: float | None
    step_peak_bytes: float
    step_peak_bytes_low: float | None
    step_peak_bytes_high: float | None
    step_peak_bytes_floor: float | None
    checkpoint_save_bytes: float
    checkpoint_save_bytes_low: float | None
    checkpoint_save_bytes_high: float | None
    checkpoint_save_bytes_floor: float | None
    model_save_bytes: float
    model_save_bytes_low: float | None
    model_save_bytes_high: float | None
    model_save_bytes_floor: float | None
    model_save_state_dict_bytes: float
    model_save_state_dict_bytes_low: float | None
    model_save_state_dict_bytes_high: float | None
    model_save_state_dict_bytes_floor: float | None
    checkpoint_load_bytes: float
    checkpoint_load_bytes_low: float | None
    checkpoint_load_bytes_high: float | None
    checkpoint_load_bytes_floor: float | None
    pinned_slack_bytes: float
    pinned_slack_bytes_low: float | None
    pinned_slack_bytes_high: float | None
    pinned_slack_bytes_floor: float | None
    fixed_bytes: float
    fixed_bytes_low: float | None
    fixed_bytes_high: float | None
    fixed_bytes_floor: float | None
    roles: dict[str, float]
    live_bytes: float


class RankEstimate(_EstimateFigures, total=False):
    baseline_bytes: float
    partition_params: int
    pinned_requested_bytes: float
    pinned_held_bytes: float
    pin_requests: int
    initialize_peak_is: str
    per_param_residual_bytes_per_param: float


class NodeEstimate(_EstimateFigures, total=False):
    ranks: int


class EstimateVersions(TypedDict, total=False):
    """The versions an estimate is for, and the calibration's."""

    estimate_for: Versions
    calibration: Versions


class EstimatePinMemory(TypedDict, total=False):
    offload_optimizer: bool | None
    offload_param: bool | None
