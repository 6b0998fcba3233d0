"""A calibration: the finished runs of a size sweep (a scale directory, rssprobe scale) as the points an estimate
extrapolates, every figure in absolute bytes of rank 0's process (RSS as `ps` shows it, baseline included).

Per run: the model's exact shape (from its manifest), the ZeRO configuration DeepSpeed took (its `pins`
event's pin_memory, else the scenario's, else DeepSpeed's default), the pre-model baseline, RSS with the
model built and not yet partitioned (`after_model`), the exact peak of deepspeed.initialize, the steady RSS
(mean of steps 2..N) and the highest step peak, the census's role bytes after initialize and at the end,
the `partition` event and the pin requests. A run that did not end ok, or lacks one of these, is named and
kept out (a damaged file too: one line, never a traceback).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

from ..config import modelshape
from ..config.modelshape import Shape
from ..contract import PIN_REGISTER, parse
from ..errors import UserError
from . import partition, pinned
from .pinrule import Rule
from .summary import ELEMENT_BYTES, Summary
from .sweep import ScaleDir, Sweep


@dataclass(frozen=True)
class Point:
    """One calibration run's figures (bytes, rank 0) and what it was."""

    run: str
    params: int
    shape: Shape
    zero: partition.Zero
    baseline: int
    after_model: int
    init_peak: int
    steady: float
    step_peak: int
    roles: dict[str, dict[str, int]]  # census point (after_init, end) -> role -> resident bytes
    partition: int | None
    pin_ops: list[tuple[Any, ...]] | None  # the recorded pin requests (None: a run without the recorder)
    rule: Rule  # the caching host allocator of the run's torch and alloc conf
    via: str  # how its pinned buffers were pinned: "torch" (the caching host allocator) or "register"


@dataclass
class Calibration:
    """The points of one scale directory and what they were measured with."""

    path: Path
    points: list[Point]
    accelerator: str
    versions: dict[str, Any]
    scenario: dict[str, Any]
    allocator: str
    malloc_env: dict[str, str]
    left_out: list[str] = field(default_factory=list)

    @property
    def params(self) -> list[int]:
        return [p.params for p in self.points]

    def describe(self) -> str:
        sizes = ", ".join(f"{n / 1e6:.2f} M" for n in sorted(set(self.params)))
        v = self.versions
        return (f"{self.path} ({self.accelerator}, torch {v.get('torch')}, DeepSpeed {v.get('deepspeed')}, "
                f"{self.scenario.get('name')} ZeRO-{(self.scenario.get('zero') or {}).get('stage', 2)}, "
                f"{len(self.points)} runs at {sizes})")


def point(s: Summary, defaults: dict[str, Any]) -> Point | str:
    """A run's point (its rank 0's figures), or why it cannot be one."""
    m = s.manifest
    if s.status != "ok":
        return f"{s.status} ({s.error})"
    scen = m.get("scenario") or {}
    model = (s.by_kind.get("model") or [{}])[0]
    after_model, init = s.phase_events.get("after_model"), (s.by_kind.get("init") or [None])[0]
    if not s.params or s.baseline is None or after_model is None or init is None or not s.steps:
        return "no model, baseline, initialize or step figures"
    world = int(m.get("world_size") or 1)
    accelerator = m.get("accelerator") or "cpu"
    events = s.by_kind.get("pins", [])
    config = next((e["config"] for e in events if isinstance(e.get("config"), dict)), {})
    zero = partition.zero_of(scen.get("zero") or {}, ELEMENT_BYTES.get(scen.get("precision", "bf16"), 2), world,
                             accelerator, defaults, config.get("pin_memory_effective"))
    declared = scen.get("model") or {}
    shape = modelshape.recorded(declared, model.get("layers") or declared.get("layers"), f"{s.run.path}")
    if shape.params != s.params:
        return f"its recorded shape has {shape.params:,} parameters, its model event {s.params:,}"
    steady = [e["rss"] for e in s.steps[1:]] or [s.steps[0]["rss"]]
    ops = pinned.request_ops([r for e in events for r in e["requests"]], [f for e in events for f in e["freed"]]) \
        if events else None
    return Point(run=str(s.run.path), params=s.params, shape=shape, zero=zero, baseline=s.baseline["rss"],
                 after_model=after_model["rss"], init_peak=init["peak"], steady=fmean(steady),
                 step_peak=max(e["peak"] for e in s.steps),
                 roles={at: {k: v["resident"] for k, v in c["roles"].items()} for at, c in s.census.items()},
                 partition=s.partition_params, pin_ops=ops,
                 rule=Rule.of((m.get("versions") or {}).get("torch"), pinned.alloc_conf(config, m)),
                 via="register" if any(parse(spec)[0] == PIN_REGISTER for spec in m.get("patches") or []) else "torch")


def recorded(ref: str | Path) -> tuple[str, dict[str, Any]]:
    """(accelerator, versions) a scale directory's first run was made with, read before anything else is asked;
    UserError when it is not a scale directory or holds no run."""
    if not ScaleDir.is_scale(ref):
        raise UserError(f"{ref}: not a scale directory (no scale.json): a calibration is a `rssprobe scale` sweep")
    runs = Sweep.load(ref).runs()
    if not runs:
        raise UserError(f"{ref}: a scale directory with no runs")
    manifest = runs[0].manifest()
    return str(manifest.get("accelerator") or "cpu"), dict(manifest.get("versions") or {})


def load(ref: str | Path, defaults: dict[str, Any]) -> Calibration:
    """The calibration of a scale directory (its ok runs); UserError when it is not one or has < 2 sizes."""
    if not ScaleDir.is_scale(ref):
        raise UserError(f"{ref}: not a scale directory (no scale.json): a calibration is a `rssprobe scale` sweep")
    sweep = Sweep.load(ref)
    points: list[Point] = []
    left_out: list[str] = []
    manifests: list[dict[str, Any]] = []
    for run in sweep.runs():
        try:
            s = Summary(run)
            got = point(s, defaults)
        except UserError as e:
            got = f"unreadable ({e})"
        if isinstance(got, str):
            left_out.append(f"{run.path}: {got}")
        else:
            points.append(got)
            manifests.append(s.manifest)
    if len({p.params for p in points}) < 2:
        raise UserError(f"{ref}: a calibration needs finished runs at 2 sizes or more "
                        f"({len(points)} usable{'; ' + left_out[0] if left_out else ''})")
    kinds = {(m.get("accelerator") or "cpu") for m in manifests}
    if len(kinds) > 1:
        raise UserError(f"{ref}: its runs were made on different accelerators ({', '.join(sorted(kinds))})")
    first = manifests[0]
    return Calibration(Path(ref), points, kinds.pop(), dict(first.get("versions") or {}),
                       dict(first.get("scenario") or {}), str(first.get("allocator") or "glibc"),
                       dict(first.get("malloc_env") or {}), left_out)
