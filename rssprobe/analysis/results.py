"""The results the reporters render and `--format json` prints, declared: a run's summary, a group of runs, a
size sweep, a comparison of two sides or two sweeps, a gate against ceilings, an estimate, a matrix's or a
plan's table and listing, a merge, a bisect in each of its modes. Each is the JSON
users script against, so its keys are declared once, here, with their types (TypedDicts: at run time plain
dicts, as the JSON is; tests/test_results.py holds real outputs to exactly these keys, so a key added, renamed
or dropped in a producer fails there before it reaches a user's script).

Nested rows and parts whose keys are fixed are declared too (analysis/resultparts.py); figures stay dicts keyed by
figure name (`metrics`, a cell's `figures`, ...): their names are data (analysis/metrics.py and the site and role
lists), not fields.
"""

from __future__ import annotations

from typing import Any, TypedDict, final

from .. import kinds
from .resultparts import (
    AcrossRow,
    Budget,
    Calibration,
    CensusTime,
    Change,
    DeepSpeedFormula,
    Difference,
    EstimatePhase,
    EstimateTarget,
    EstimateVersions,
    EventFigures,
    FitRow,
    GlibcMalloc,
    Growth,
    Intervention,
    Lead,
    LimitCheck,
    Load,
    Lock,
    MatrixCell,
    MatrixListCell,
    ModelInfo,
    Node,
    NodeEstimate,
    NodeRam,
    PhaseFigures,
    PinFix,
    Pinned,
    PlanCell,
    PlanListCell,
    Provision,
    RankEstimate,
    RankRow,
    SaveFigures,
    Script,
    Site,
    SizeRun,
    SweepFigureComparison,
    SweepGroup,
    TrainerOwn,
    Versions,
    Zero,
)


class RunSummary(TypedDict):
    """`rssprobe show RUN --format json`: one rank of one run (analysis/summary.py: Summary.as_dict)."""

    answer: list[str]  # the answer's sentences, first
    run: str
    path: str
    label: str | None
    status: str
    error: str | None
    exit_after_end: str | None
    scenario: str | None
    zero: Zero
    zero3_gathered: dict[str, Any] | None  # point -> its counts
    steps_done: int
    steps_requested: int
    script: Script | None
    params: int | None
    model: ModelInfo | None
    versions: Versions | None
    allocator: str | None
    malloc_env: dict[str, str] | None
    glibc_malloc: GlibcMalloc | None
    accelerator: str | None
    cuda: str | None
    baseline_rss_bytes: int | None
    phases: dict[str, PhaseFigures | None]  # phase -> its figures
    budget: Budget | None
    budgets: list[Budget]
    census_times: list[CensusTime]
    sites: list[Site]
    site_status: dict[str, str]  # site -> present, absent, ...
    sites_first_step_only: list[str]
    sites_steady: str
    interventions: list[Intervention]
    never_took_effect: list[str]
    metrics: dict[str, float]
    events: dict[str, EventFigures]  # event name -> its figures
    growth: Growth | None
    pinned: Pinned | None
    step_events: dict[str, Any]
    native: dict[str, Any] | None
    memray: bool
    world_size: int
    rank: int
    partition_params: int | None
    ranks: list[RankRow] | None
    node: Node | None
    load: Load | None
    saves: dict[str, SaveFigures] | None  # save kind (and "final") -> its figures on this rank (analysis/saves.py)
    mean_step_time_s: float | None


class GroupView(TypedDict):
    """`rssprobe show GROUP --format json`: N fresh runs of one configuration (group.json's fields), each run's
    summary and each figure across them (workflows/inspect.py)."""

    answer: list[str]
    group: str
    format: int
    id: str
    label: str
    scenario: str
    repeat: int
    started: str
    runs: list[RunSummary]
    across: list[AcrossRow]


class ScaleSweep(TypedDict):
    """`rssprobe show SWEEP --format json` and `rssprobe scale`: a size sweep's index and its fit of every figure
    over the sizes (analysis/sweep.py: Sweep.as_dict)."""

    answer: list[str]
    scale: str
    format: int
    kind: str
    created: str
    scenario: str
    scenario_name: str
    label: str
    sizes: list[float]
    params: list[int]
    repeat: int
    options: dict[str, Any]
    definition: dict[str, Any]
    command: list[str]
    groups: list[SweepGroup]
    sizes_run: list[SizeRun]
    problems: list[str]
    other_shards: list[Any]
    runs_in_fit: int
    fit: list[FitRow]


class SideDescription(TypedDict):
    """One side of a comparison: a run or a group, what it ran and how many of its runs finished."""

    name: str
    label: str | None
    scenario: str | None
    runs: int
    ok: int
    failed: list[str]
    params: int | None
    patches: dict[str, Any]  # intervention -> how often it fired, per run
    allocator: str | None
    malloc_env: dict[str, str] | None
    versions: Versions | None
    never_took_effect: list[str]


class FigureComparison(TypedDict):
    """One figure of A against B: means, spreads, the difference with its interval, the verdict and why."""

    metric: str
    gated: bool
    n_a: int
    n_b: int
    mean_a: float | None
    mean_b: float | None
    sd_a: float | None
    sd_b: float | None
    delta: float | None
    interval: float | None  # half-width of the 95% Welch t interval of delta (None below 2 repeats a side)
    p_increase: float | None
    p_decrease: float | None
    verdict: str
    reason: str


class Comparison(TypedDict):
    """`rssprobe diff A B --format json` and the gate's runs (analysis/compare.py: Result.as_dict)."""

    answer: list[str]
    a: SideDescription
    b: SideDescription
    threshold_bytes_per_param: float
    alpha: float
    verdict: str
    problems: list[str]
    gated: list[str]
    same_runs: bool  # A and B are the same runs (the same directories, or the same run ids and start times)
    lead: Lead  # the lead's figures assessed together (analysis/effects.py Family.as_dict)
    differences: list[Difference]
    comparisons: dict[str, list[FigureComparison]]


class Estimate(TypedDict):
    """`rssprobe estimate --format json` (workflows/estimate.py: run): per rank and per node, phase by phase,
    whether it fits, and where every term comes from (measured or predicted)."""

    format: int
    answer: list[str]
    target: EstimateTarget
    rank: RankEstimate
    node: NodeEstimate
    steps: int
    fits: dict[str, dict[str, float]]  # fitted term -> its slope, intercept, noise
    checks: list[str]  # where the calibration's own records disagree with the partition arithmetic
    fixes: list[PinFix]
    extrapolation: float
    far: bool
    phases: list[EstimatePhase]
    provision: Provision
    node_ram: NodeRam
    changes: list[Change]
    lock: Lock | None
    deepspeed_estimate_bytes: float | None
    deepspeed_estimate_rank_bytes: float | None
    deepspeed_estimator: str | None
    deepspeed_formula: DeepSpeedFormula
    deepspeed_formula_rows: list[DeepSpeedFormula]  # ZeRO-3: zero_init=0 and =1, the target's marked
    assumptions: list[str]  # the job as the trainer runs it (config/trainerjob.py)
    other_way: Estimate | None  # ZeRO-3: the estimate with zero.Init the other way
    trainer_own: TrainerOwn  # --seen-steady: the trainer's own host memory, in every phase
    versions: EstimateVersions
    measured_terms: dict[str, str]
    predicted_terms: dict[str, str]
    notes: list[str]
    calibration: Calibration
    # the load and the saves from the save/load calibration (analysis/savephase.py): which, its fits, the holders
    save_load: dict[str, Any] | None


class MatrixTable(TypedDict):
    """`rssprobe matrix` and `rssprobe show MATRIX --format json` (campaign/matrix.py: table): each cell's index
    entry (its axes, status, the statuses of its runs, its group, error and wall time as they stand) with the
    versions its runs had, its headline figures, each patch's effect against the baseline of the same versions
    and allocator (a FigureComparison per figure), and its runs ok ("2/3")."""

    answer: list[str]
    matrix: str
    definition: dict[str, Any]
    shard: str | None
    cells: list[MatrixCell]
    failed: list[str]  # "cell-id: why", the cells that did not finish


class PlanTable(TypedDict):
    """`rssprobe matrix --plan` and `rssprobe show PLANDIR --format json` (campaign/plan.py: table): as a
    matrix's, each cell also naming its axis, value, ranks and scenario."""

    answer: list[str]
    directory: str
    definition: dict[str, Any]
    shard: str | None
    cells: list[PlanCell]
    failed: list[str]


class MatrixListing(TypedDict):
    """`rssprobe matrix --dry-run --format json`: the cells it would run, which have finished, each one's shard."""

    matrix: str
    repeat: int
    shard: str | None
    cells: list[MatrixListCell]


class PlanListing(TypedDict):
    """`rssprobe matrix --plan --dry-run --format json`: as a matrix's, and the optional values not selected."""

    plan: str
    directory: str
    shard: str | None
    not_selected: list[str]
    cells: list[PlanListCell]


class SweepComparison(TypedDict):
    """`rssprobe diff SWEEP SWEEP --format json` and the gate's sweeps (analysis/sweep.py: Comparison.as_dict): each
    figure's slope and fixed cost of B against A, each with its interval and verdict."""

    answer: list[str]
    a: ScaleSweep
    b: ScaleSweep
    verdict: str
    problems: list[str]
    gated: list[str]
    slope_threshold_bytes_per_param: float
    fixed_threshold_bytes: float
    level: float
    comparisons: list[SweepFigureComparison]  # figure, gated, slope and fixed (each a delta, its interval, a verdict)


class GateLimits(TypedDict):
    """`rssprobe gate --limits FILE --format json` (workflows/gate.py): one side against ceilings, each figure's
    check (its runs, the ceiling, the verdict and why), the side it gated and the limits file."""

    answer: list[str]
    verdict: str
    problems: list[str]
    checks: list[LimitCheck]
    side: str
    limits: str


class Merged(TypedDict):
    """`rssprobe merge --format json` (campaign/merge.py): the campaign written, its kind, the input each group
    was taken from, and the groups no input holds."""

    out: str
    kind: str
    taken: dict[str, str]
    missing: list[str]


# A bisect's result (campaign/bisect/rounds.py: Runner.report), whatever its mode: the search's log and what it
# found. `comparison` (the two sides of the change, a Comparison) only when both sides have runs. The keys a result
# may lack are declared in a base of total=False, not with NotRequired: under `from __future__ import annotations`
# Python 3.11 reads a class body's NotRequired as required (the annotation is a string when the class is made).
class _Bisect(TypedDict):
    answer: list[str]
    mode: str
    status: str
    metric: str
    direction: str | None
    malloc_env: dict[str, str]
    warnings: list[str]
    lines: list[str]
    reference: str
    threshold: float
    alpha: float
    root: str


class _BisectCompared(TypedDict, total=False):
    comparison: Comparison


@final  # final: a key only one mode has tells the modes apart (`"commits" in data` narrows the union)
class BisectVersions(_Bisect, _BisectCompared):
    probes: list[dict[str, Any]]
    axis: str
    values: list[str]
    first_moved: str | None
    last_same: str
    candidates: list[str]


class _CulpritFound(TypedDict, total=False):
    """A components bisect's answer when a culprit was found."""

    components: list[str]
    minimal: list[str]
    tests: list[dict[str, Any]]


@final
class BisectComponents(_Bisect, _BisectCompared, _CulpritFound):
    probes: list[dict[str, Any]]


@final
class BisectCommits(_Bisect, _BisectCompared):
    good: str
    bad: str
    culprit: str | None
    candidates: list[str]
    verdicts: list[Any]
    commits: list[dict[str, Any]]


# a bisect's result, whichever its mode (the reporters' one entry for it)
Bisect = BisectVersions | BisectComponents | BisectCommits

# result kind -> its TypedDict (a class; typed Any: mypy has no type for "some TypedDict class"): the kinds and the
# class each names are rssprobe/kinds.py's
DECLARED: dict[str, Any] = {k.name: globals()[k.declared] for k in kinds.RESULTS}


def undeclared(kind: str, data: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(keys `data` has that its declaration lacks, required keys `data` lacks): both empty when they agree."""
    declared = DECLARED[kind]
    return sorted(set(data) - set(declared.__annotations__)), sorted(declared.__required_keys__ - set(data))
