"""A run plan: a base configuration and axes varied one at a time from it, read from TOML.

Where `rssprobe matrix` runs a cartesian product, a plan runs the base and then, for each
axis, every value of that axis with everything else as in the base (a full product is not
needed to ask "does the allocator matter?"). Each cell is run once per patch set, so each
patch's effect is measured on every configuration. Axes marked optional (the multi-GB CUDA
torch builds, say) run only when asked (`--optional`). The plan also carries the claims the
verdict report judges (analysis/claims.py): data, not code.

    [plan]       scenario, repeat, patches, sets
    [base]       torch, deepspeed, allocator, ranks
    [[axes]]     name (torch | deepspeed | allocator | ranks), values, optional_values, repeat, why
    [[claims]]   what, claimed (B/param), metrics (summed; "-name" subtracts), cpu_unmeasurable
    [[configs]]  name, scenario, sets, ranks, allocator, repeat, why: whole configurations, each a cell of its
                 own (not a variation of the base): a validation campaign's held-out targets

An allocator value is NAME[+KEY=VALUE...]: glibc, jemalloc, tcmalloc, and glibc knobs such as
glibc+MALLOC_ARENA_MAX=2.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import UserError, from_validation
from ..store import layout, outputs
from ..store.reader import read_toml
from .allocators import parse_allocator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # nan passes every range check: refused


class Settings(_Strict):
    scenario: str
    repeat: int = Field(3, ge=1)
    patches: list[str] = Field(default_factory=lambda: ["baseline", "pr8132"], min_length=1)
    sets: list[str] = Field(default_factory=list, description="--set overrides for every run")


class Base(_Strict):
    torch: str | None = None  # None: the worker Python's own
    deepspeed: str | None = None
    allocator: str = "glibc"
    ranks: int = Field(1, ge=1)

    @field_validator("allocator")
    @classmethod
    def _allocator(cls, v: str) -> str:
        parse_allocator(v)
        return v


class Axis(_Strict):
    name: Literal["torch", "deepspeed", "allocator", "ranks"]
    values: list[str | int] = Field(default_factory=list)
    optional_values: list[str | int] = Field(default_factory=list, description="run only with --optional")
    repeat: int | None = Field(None, ge=1, description="runs per cell on this axis (default: the plan's)")
    why: str = ""

    @model_validator(mode="after")
    def _values(self) -> Axis:
        every = [*self.values, *self.optional_values]
        if not every:
            raise ValueError(f"axis {self.name}: give values or optional_values")
        for v in every:
            if self.name == "ranks" and (not isinstance(v, int) or v < 1):
                raise ValueError(f"ranks value {v!r} is not a count of ranks >= 1")
            if self.name != "ranks" and not isinstance(v, str):
                raise ValueError(f"{self.name} value {v!r} is not a string")
            if self.name == "allocator":
                parse_allocator(str(v))
        if len(set(map(str, every))) != len(every):
            raise ValueError(f"axis {self.name} repeats a value")
        return self


class Claim(_Strict):
    what: str
    claimed: float
    metrics: list[str] = Field(default_factory=list)
    cpu_unmeasurable: str | None = Field(None, description="why the CPU accelerator cannot show it")
    note: str = ""

    @model_validator(mode="after")
    def _measurable(self) -> Claim:
        if not self.metrics and not self.cpu_unmeasurable:
            raise ValueError(f"claim {self.what!r}: give metrics, or cpu_unmeasurable with the reason")
        return self


class Config(_Strict):
    """A whole configuration run as a cell of its own: its scenario (default: the plan's), --set values, ranks,
    allocator (NAME[+KNOB=V...]) and repeats (default: the plan's), with the base's versions."""

    name: str = Field(min_length=1)
    scenario: str | None = None
    sets: list[str] = Field(default_factory=list)
    ranks: int = Field(1, ge=1)
    allocator: str = "glibc"
    repeat: int | None = Field(None, ge=1)
    why: str = ""

    @field_validator("allocator")
    @classmethod
    def _allocator(cls, v: str) -> str:
        parse_allocator(v)
        return v


class Plan(_Strict):
    plan: Settings
    base: Base = Field(default_factory=Base)
    axes: list[Axis] = Field(default_factory=list)
    claims: list[Claim] = Field(default_factory=list)
    configs: list[Config] = Field(default_factory=list)

    @model_validator(mode="after")
    def _distinct_axes(self) -> Plan:
        names = [a.name for a in self.axes]
        if len(set(names)) != len(names):
            raise ValueError("an axis is declared twice; give each axis once with all its values")
        configs = [c.name for c in self.configs]
        if len(set(configs)) != len(configs):
            raise ValueError("a config name is used twice; give each configuration its own name")
        return self


@dataclass(frozen=True)
class PlanCell:
    """One configuration x patch set; `axis` is "base" or the axis whose value differs from the base."""

    axis: str
    value: str
    torch: str | None
    deepspeed: str | None
    allocator: str  # NAME[+KNOB=V...]
    ranks: int
    patch: str
    repeat: int
    optional: bool = False
    scenario: str | None = None  # a [[configs]] cell's own scenario (None: the plan's)
    sets: tuple[str, ...] = ()  # a [[configs]] cell's own --set values (after the plan's)

    @property
    def id(self) -> str:
        return layout.slug(f"{self.axis}-{self.value}-{self.patch}")

    @property
    def config(self) -> tuple[str | None, str | None, str, int, str | None, tuple[str, ...]]:
        """Cells a patch effect compares: the same configuration."""
        return self.torch, self.deepspeed, self.allocator, self.ranks, self.scenario, self.sets

    @property
    def allocator_name(self) -> str:
        return parse_allocator(self.allocator)[0]

    @property
    def malloc_env(self) -> dict[str, str]:
        return parse_allocator(self.allocator)[1]


@dataclass
class LoadedPlan:
    path: Path
    plan: Plan
    cells: list[PlanCell] = field(default_factory=list)

    def selected(self, optional: frozenset[str] = frozenset()) -> list[PlanCell]:
        """The cells to run: every non-optional one, and the optional ones asked for ("all", or "AXIS=VALUE")."""
        offered = {f"{c.axis}={c.value}" for c in self.cells if c.optional}
        unknown = sorted(optional - offered - {"all"})
        if unknown:
            raise UserError(f"{self.path}: --optional {', '.join(unknown)}: not an optional value of this plan "
                            f"(it has: {', '.join(sorted(offered)) or 'none'})")
        return [c for c in self.cells if not c.optional or "all" in optional or f"{c.axis}={c.value}" in optional]

    def definition(self) -> dict[str, Any]:
        """What makes two plan files the same plan for resuming (claims and notes may change)."""
        p = self.plan
        return {"plan": p.plan.model_dump(), "base": p.base.model_dump(),
                "axes": [a.model_dump(exclude={"why"}) for a in p.axes],
                **({"configs": [c.model_dump(exclude={"why"}) for c in p.configs]} if p.configs else {})}



def expand(plan: Plan) -> list[PlanCell]:
    """The base's cells, then each axis value's (values equal to the base's are the base: not repeated)."""
    base = plan.base
    out: list[PlanCell] = []
    configs: list[tuple[str, str, dict[str, Any], int, bool]] = [("base", "base", {}, plan.plan.repeat, False)]
    for axis in plan.axes:
        for value, optional in [*((v, False) for v in axis.values), *((v, True) for v in axis.optional_values)]:
            if str(value) == str(getattr(base, axis.name)):
                continue
            configs.append((axis.name, str(value), {axis.name: value}, axis.repeat or plan.plan.repeat, optional))
    for axis_name, value, change, repeat, optional in configs:
        fields = {**base.model_dump(), **change}
        for patch in plan.plan.patches:
            out.append(PlanCell(axis_name, value, fields["torch"], fields["deepspeed"], fields["allocator"],
                                int(fields["ranks"]), patch, repeat, optional))
    for config in plan.configs:
        for patch in plan.plan.patches:
            out.append(PlanCell("config", config.name, base.torch, base.deepspeed, config.allocator, config.ranks,
                                patch, config.repeat or plan.plan.repeat, False, config.scenario,
                                tuple(config.sets)))
    return out


def load(path: Path) -> LoadedPlan:
    """Read and validate a plan file; anything wrong is one line naming the file, the key and the reason."""
    label = str(path)
    outputs.note(path)  # an input: nothing this command writes may land over it (store/outputs.py)
    raw = read_toml(path)  # missing, a directory, not UTF-8, not TOML: one line naming the file
    try:
        plan = Plan.model_validate(raw)
    except ValidationError as e:
        raise from_validation(label, e.errors()) from None
    if (plan.base.torch is not None and plan.base.deepspeed is None) or \
            (plan.base.deepspeed is not None and plan.base.torch is None):
        raise UserError(f"{label}: base: give both torch and deepspeed, or neither (the worker Python's own)")
    return LoadedPlan(path, plan, expand(plan))
