"""A plan's runs against the claims the plan declares (#7693), and a patch set's effects (PR #8132):
every number the verdict report (reporters/verdict.py) shows, computed from the runs.

Reads the plan file (config/plan.py: base, axes, claims) and the plan's run directory (`rssprobe matrix
--plan`, or the merge of its shards). Per claim: what each configuration's baseline runs measured (mean
and sd over the repeats) and the verdict (verdicts.claim); per configuration with the patch: how often
each part fired per run and its effect on each figure against the baseline of the same configuration
(difference, one-sided p, 95% Welch interval, verdict); per environment: how long loading DeepSpeed's
ops took in its first run; the plan's wall time and the machine. A configuration that did not run says so.

On several ranks the partitioned buffers and the code sites are taken per parameter of the rank's
partition (rank 0), so that they read on the same scale as one rank.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from .. import verdicts
from ..config.patchsets import BASELINE
from ..config.plan import Claim, LoadedPlan, PlanCell, load
from ..contract.names import partitioned_roles
from ..store import campaign, layout
from ..store.rundir import GroupDir
from . import metrics, stats
from .compare import Side
from .resultparts import TwoSides

PR_FIGURES = metrics.shown(metrics.CLAIMS)  # the registry's (Metric.shown)
PARTS = ("pr8132.float-scale", "pr8132.malloc-trim")
__all__ = ["BASELINE", "ClaimsReport", "Config", "claim_rows", "claim_samples", "collect", "configs", "value"]


@dataclass
class Config:
    """One configuration of the plan: its baseline and patched cells and their run groups."""

    axis: str
    value: str
    cells: dict[str, PlanCell]  # patch -> cell
    sides: dict[str, Side]  # patch -> its group, where it ran

    @property
    def label(self) -> str:
        return "base" if self.axis == "base" else f"{self.axis} = {self.value}"

    @property
    def first(self) -> PlanCell:
        return next(iter(self.cells.values()))


def configs(loaded: LoadedPlan, runs: Path) -> list[Config]:
    out: dict[tuple[str, str], Config] = {}
    for cell in loaded.cells:
        config = out.setdefault((cell.axis, cell.value), Config(cell.axis, cell.value, {}, {}))
        config.cells[cell.patch] = cell
        group = runs / cell.id
        if GroupDir.is_group(group) and GroupDir(group).readable():
            config.sides[cell.patch] = Side.load(str(group))
    return list(out.values())


def value(summary: dict[str, Any], metric: str) -> float | None:
    """A metric of one run; on several ranks partitioned roles and sites per parameter of the partition."""
    figures = summary["metrics"]
    ratio = 1.0
    if (summary.get("world_size") or 1) > 1 and summary.get("partition_params"):
        ratio = summary["params"] / summary["partition_params"]
    if ratio != 1.0 and metric == "budget.live":
        roles = [value(summary, m) for m in figures if m.startswith("role.")]
        return sum(r for r in roles if r is not None) if roles else None
    raw = figures.get(metric)
    if raw is None and metric.startswith("role.") and "budget.live" in figures:
        return 0.0  # the census ran and found no buffer of this role (e.g. h2d_staging before DeepSpeed 0.17.0)
    if raw is None:
        return None
    partitioned = metric.startswith("site.") or metric.removeprefix("role.") in partitioned_roles()
    return raw * ratio if partitioned else raw


def claim_samples(side: Side, claim: Claim) -> list[float]:
    out = []
    for summary in side.ok:
        total = 0.0
        for term in claim.metrics:
            v = value(summary, term.lstrip("-"))
            if v is None:
                break
            total += -v if term.startswith("-") else v
        else:
            out.append(total)
    return out


class ClaimVersions(TypedDict):
    torch: str | None
    deepspeed: str | None
    build: str | None  # "CPU build", or a CUDA build run on the CPU; None: not run


class ClaimRow(TypedDict):
    """One configuration's measurement of a claim and its verdict (claim_rows)."""

    configuration: str
    verdict: str
    mean: float | None
    sd: float | None
    n: int | None
    versions: ClaimVersions
    allocator: str
    ranks: int


class Compared(TwoSides):
    """stats.Comparison.as_dict(): one figure, B against A."""

    p_increase: float | None
    p_decrease: float | None
    verdict: str
    reason: str
    interval: float | None


class PrFigure(TypedDict):
    metric: str
    label: str
    comparison: Compared
    interval: float | None
    gated: bool
    p: float | None


class PrEffect(TypedDict):
    """The patch's effect in one configuration (patch_effects): how often each part fired, each figure's change."""

    configuration: str
    fires: dict[str, list[int]]  # part -> its count in each run
    figures: list[PrFigure]


class OpLoad(TypedDict):
    """A run that compiled DeepSpeed's ops: where, which, and the seconds until they loaded (op_loads)."""

    configuration: str
    environment: str
    run: str
    ops: list[str]
    seconds: float
    ccache: bool


def versions(config: Config) -> ClaimVersions:
    """The versions a configuration ran (its runs', else its cell's), and whether torch was a CPU build."""
    side = config.sides.get(BASELINE) or next(iter(config.sides.values()), None)
    cell = config.first
    if side is None:
        return {"torch": cell.torch, "deepspeed": cell.deepspeed, "build": None}
    v = side.describe()["versions"] or {}
    return {"torch": v.get("torch"), "deepspeed": v.get("deepspeed"),
            "build": "CPU build" if "+cpu" in str(v.get("torch")) else "CUDA build, run on the CPU"}


def claim_rows(claim: Claim, all_configs: list[Config]) -> list[ClaimRow]:
    """Per configuration: its measurement of the claim (baseline runs) and the verdict."""
    rows: list[ClaimRow] = []
    for config in all_configs:
        cell = config.first
        side = config.sides.get(BASELINE)
        if claim.cpu_unmeasurable:
            rows.append({"configuration": config.label, "verdict": verdicts.CPU_UNMEASURABLE, "mean": None, "sd": None,
                         "n": None, "versions": versions(config), "allocator": cell.allocator, "ranks": cell.ranks})
            continue
        samples = claim_samples(side, claim) if side else []
        mean, sd = stats.mean_sd(samples)
        rows.append({"configuration": config.label, "verdict": verdicts.claim(claim.claimed, mean, sd, stats.THRESHOLD),
                     "mean": mean, "sd": sd, "n": len(samples) or None, "versions": versions(config),
                     "allocator": cell.allocator, "ranks": cell.ranks})
    return rows


def patch_effects(all_configs: list[Config], patch: str) -> list[PrEffect]:
    """Per configuration where both sides ran: fire counts per part, and the effect on each figure."""
    out: list[PrEffect] = []
    for config in all_configs:
        a, b = config.sides.get(BASELINE), config.sides.get(patch)
        if a is None or b is None:
            continue
        counts: dict[str, list[int]] = {}
        for summary in b.ok:
            for i in summary["interventions"]:
                counts.setdefault(i["name"], []).append(i["count"])
        figures: list[PrFigure] = []
        for metric in PR_FIGURES:
            sa, sb = a.samples(metric), b.samples(metric)
            if not sa or not sb:
                continue
            c = stats.compare(metric, sa, sb)
            figures.append({"metric": metric, "label": metrics.label(metric), "comparison": c.as_dict(),  # a Compared
                            "interval": stats.interval(sa, sb), "gated": metrics.is_gated(metric, metrics.GATED),
                            "p": c.p_decrease if c.delta < 0 else c.p_increase})
        out.append({"configuration": config.label, "fires": {p: counts.get(p, []) for p in PARTS},
                    "figures": figures})
    return out


def op_loads(all_configs: list[Config], runs: Path) -> list[OpLoad]:
    """Per environment, the first run's time from process start to DeepSpeed's ops loaded, and later runs'."""
    rows: list[OpLoad] = []
    for config in all_configs:
        for patch, cell in config.cells.items():
            group = runs / cell.id
            if not GroupDir.is_group(group):
                continue
            for run in GroupDir(group).runs():
                events = run.events()
                times = {e.get("name"): e["t"] for e in events if e.get("event") == "phase"}
                compiled = [e["op"] for e in events if e.get("event") == "compiling"]
                if "process_start" in times and "ops_loaded" in times and compiled:
                    m = run.manifest()
                    python = Path(m.python or "")
                    where = python.parent.parent.name if layout.is_rssprobe_env(str(python)) else "the project's venv"
                    rows.append({"configuration": config.label, "environment": where, "run": f"{patch}/{run.id}",
                                 "ops": compiled, "seconds": times["ops_loaded"] - times["process_start"],
                                 "ccache": bool(m.compiler_cache)})
    return rows


def wall_time(runs: Path, all_configs: list[Config]) -> tuple[float, float]:
    """(wall time of the plan's cells, including environment builds; sum of the runs' own wall times), s."""
    index = campaign.read_index(runs, "plan")
    cells_s = sum(c.get("wall_s") or 0.0 for c in campaign.entries(index))
    runs_s = sum(s for config in all_configs for cell in config.cells.values()
                 if GroupDir.is_group(runs / cell.id) for r in GroupDir(runs / cell.id).runs()
                 if (s := r.wall_seconds()) is not None)
    return cells_s, runs_s


def machine(all_configs: list[Config]) -> str:
    side = next((s for c in all_configs for s in c.sides.values()), None)
    if side is None:
        return "no run"
    m = side.runs[0].manifest()
    h = m.host or {}
    v = side.describe()["versions"] or {}
    return (f"{h.get('machine')}, {h.get('cpu_model')}, {h.get('cpu_count')} cores, "
            f"{(h.get('mem_total_bytes') or 0) / 2**30:.0f} GiB, no GPU (DeepSpeed's {m.accelerator or 'cpu'} "
            f"accelerator), {h.get('libc')}, kernel {h.get('kernel')}, "
            f"Python {v.get('python') or platform.python_version()}"
            f"; rssprobe {h.get('rssprobe_revision')}")


@dataclass
class ClaimsReport:
    """Everything the verdict report shows."""

    plan_path: Path
    runs: Path
    loaded: LoadedPlan
    configs: list[Config]
    claims: list[tuple[Claim, list[ClaimRow]]] = field(default_factory=list)
    patch: str | None = None
    effects: list[PrEffect] = field(default_factory=list)
    op_loads: list[OpLoad] = field(default_factory=list)
    wall: tuple[float, float] = (0.0, 0.0)
    machine: str = ""

    @property
    def measurable(self) -> list[Claim]:
        """The claims the CPU accelerator can show (the others carry cpu_unmeasurable: why it cannot)."""
        return [c for c, _rows in self.claims if not c.cpu_unmeasurable]

    @property
    def ran(self) -> list[Config]:
        return [c for c in self.configs if c.sides]

    @property
    def params(self) -> int | None:
        return next((s.describe()["params"] for c in self.ran for s in c.sides.values()), None)

    @property
    def failed(self) -> list[str]:
        return [f"{c.label} [{patch}] {s['run']}: {s['status']} ({s.get('error')})" for c in self.configs
                for patch, side in c.sides.items() for s in side.failed]


def collect(plan_path: Path, runs: Path) -> ClaimsReport:
    """A plan's runs against its claims; UserError when `runs` is not the plan's run directory."""
    loaded = load(plan_path)
    campaign.read_index(runs, "plan")  # a plan's directory (or a merge of its shards), readable
    all_configs = configs(loaded, runs)
    patch = next((p for p in loaded.plan.plan.patches if p != BASELINE), None)
    return ClaimsReport(plan_path, runs, loaded, all_configs,
                        [(claim, claim_rows(claim, all_configs)) for claim in loaded.plan.claims], patch,
                        patch_effects(all_configs, patch) if patch else [], op_loads(all_configs, runs),
                        wall_time(runs, all_configs), machine(all_configs))
