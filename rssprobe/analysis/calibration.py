"""A calibration: the finished runs of a size sweep (a scale directory, rssprobe scale) as the points an estimate
extrapolates, every figure in absolute bytes of rank 0's process (RSS as `ps` shows it, baseline included).

Per run: the model's exact shape (from its manifest), the ZeRO configuration DeepSpeed took (its `pins` event's
pin_memory, else the scenario's, else DeepSpeed's default), the pre-model baseline, RSS with the model built and not
yet partitioned (`after_model`), the exact peak of deepspeed.initialize, every step's RSS and exact peak (so that a
target of S steps is estimated from the calibration's first S steps: its steady RSS is the mean of steps 2..S, its
step peak the highest of steps 1..S), a checkpoint save's peak where the scenario saves, the exact peak of its
checkpoint load where the scenario loads one (model.load = "checkpoint"), the census's role bytes after initialize
and at the end, the `partition` event, the pin requests and the run's wall time. A run that did not end ok, or lacks
one of these, is named and kept out (a damaged file too: one line, never a traceback).

A calibration also travels packed (pack/unpack): the same points as one JSON object with its provenance (the
machine, GPU, torch, DeepSpeed, date), which is how the recorded H200 sweep ships as package data
(rssprobe/data/calibrations/, made by tools/evidence/pack_calibration.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from statistics import fmean
from typing import Any

from ..config import modelshape
from ..config.modelshape import Shape
from ..contract.interventions import PIN_REGISTER, parse
from ..contract.manifest import Manifest
from ..contract.status import Status
from ..contract.workerscenario import DEFAULT_ZERO_STAGE
from ..errors import UserError
from ..store import reader
from . import partition, pinned, readnoise
from .pinrule import Rule
from .summary import ELEMENT_BYTES, Summary
from .sweep import ScaleDir, Sweep

PACKED = "rssprobe-calibration"  # the `kind` of a packed calibration
PACKED_FORMAT = 1
PACKAGED = ("rssprobe.data", "calibrations")  # where packed calibrations ship (name.json)


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
    rss_steps: tuple[float, ...]  # RSS after each step, in order
    peak_steps: tuple[int, ...]  # each step's exact peak (VmHWM), in order
    roles: dict[str, dict[str, int]]  # census point (after_init, end) -> role -> resident bytes
    partition: int | None
    pin_ops: list[tuple[Any, ...]] | None  # the recorded pin requests (None: a run without the recorder)
    rule: Rule  # the caching host allocator of the run's torch and alloc conf
    via: str  # how its pinned buffers were pinned: "torch" (the caching host allocator) or "register"
    checkpoint_peak: int | None = None  # the highest exact peak of its save_checkpoint events (None: no save)
    wall_s: float | None = None  # its manifest's start to end
    load_peak: int | None = None  # the exact peak of its checkpoint load (None: the model was built, not loaded)

    def steady_at(self, steps: int | None = None) -> float:
        """The steady RSS of a run of `steps` steps (None: all of this one's): the mean of steps 2..steps."""
        got = self.rss_steps[: steps or len(self.rss_steps)]
        return fmean(got[1:] or got)

    def peak_at(self, steps: int | None = None) -> int:
        """The highest step peak of steps 1..steps."""
        return max(self.peak_steps[: steps or len(self.peak_steps)])

    @property
    def steady(self) -> float:
        return self.steady_at()

    @property
    def step_peak(self) -> int:
        return self.peak_at()

    @property
    def steps(self) -> int:
        return len(self.rss_steps)


@dataclass
class Calibration:
    """The points of one scale directory (or packed calibration) and what they were measured with."""

    path: Path
    points: list[Point]
    accelerator: str
    versions: dict[str, Any]
    scenario: dict[str, Any]
    allocator: str
    malloc_env: dict[str, str]
    left_out: list[str] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)  # machine, gpu, date, source (packed ones say)
    # the save/load calibration (analysis/savephase.Phases) that estimates the load and the saves this one did not
    # measure (a GPU sweep neither loads nor saves); None: only this one's own
    phases: Any = None
    # the sd of one RSS read on the machine that measured it (analysis/readnoise): no interval is finer; 0: unknown
    read_sd: float = 0.0

    @property
    def params(self) -> list[int]:
        return [p.params for p in self.points]

    @property
    def repeats(self) -> int:
        """Runs per size (the most of any size)."""
        sizes = [p.params for p in self.points]
        return max(sizes.count(n) for n in set(sizes))

    @property
    def steps(self) -> int:
        """Steps every run of it made (the fewest of any run)."""
        return min(p.steps for p in self.points)

    @property
    def ranks(self) -> int:
        return max(p.zero.world for p in self.points)

    @property
    def glibc_dynamic(self) -> bool:
        """glibc with its own (dynamic) mmap threshold: the allocator whose retention makes identical runs differ."""
        return self.allocator == "glibc" and "MALLOC_MMAP_THRESHOLD_" not in self.malloc_env

    def describe(self) -> str:
        sizes = ", ".join(f"{n / 1e6:.2f} M" for n in sorted(set(self.params)))
        v, where = self.versions, self.provenance.get("machine") or str(self.path)
        gpu = f", {self.provenance['gpu']}" if self.provenance.get("gpu") else ""
        date = f", {self.provenance['date']}" if self.provenance.get("date") else ""
        stage = (self.scenario.get('zero') or {}).get('stage', DEFAULT_ZERO_STAGE)
        return (f"{where} ({self.accelerator}{gpu}, torch {v.get('torch')}, DeepSpeed {v.get('deepspeed')}{date}, "
                f"{self.scenario.get('name')} ZeRO-{stage}, "
                f"{len(self.points)} runs at {sizes}: {self.repeats} a size, {self.steps} steps, "
                f"{self.ranks} rank(s))")


def point(s: Summary, defaults: dict[str, Any]) -> Point | str:
    """A run's point (its rank 0's figures), or why it cannot be one."""
    m = s.manifest
    if s.status != Status.OK:
        return f"{s.status} ({s.error})"
    scen = m.scenario or {}
    model = (s.by_kind.get("model") or [{}])[0]
    after_model, init = s.phase_events.get("after_model"), (s.by_kind.get("init") or [None])[0]
    if not s.params or s.baseline is None or after_model is None or init is None or not s.steps:
        return "no model, baseline, initialize or step figures"
    world = int(m.world_size or 1)
    accelerator = m.accelerator or "cpu"
    events = s.by_kind.get("pins", [])
    config = next((e["config"] for e in events if isinstance(e.get("config"), dict)), {})
    zero = partition.zero_of(scen.get("zero") or {}, ELEMENT_BYTES.get(scen.get("precision", "bf16"), 2), world,
                             accelerator, defaults, config.get("pin_memory_effective"))
    declared = scen.get("model") or {}
    try:
        shape = modelshape.recorded(declared, model.get("layers") or declared.get("layers"), f"{s.run.path}",
                                    model.get("shape_groups"), model.get("largest_layer"))
    except UserError as e:
        return str(e)
    if shape.params != s.params:
        return f"its recorded shape has {shape.params:,} parameters, its model event {s.params:,}"
    ops = pinned.request_ops([r for e in events for r in e["requests"]], [f for e in events for f in e["freed"]]) \
        if events else None
    saves = [e["peak"] for e in s.by_kind.get("inrun", []) if e.get("name") == "checkpoint"]
    load = (s.by_kind.get("load") or [None])[0]
    return Point(run=str(s.run.path), params=s.params, shape=shape, zero=zero, baseline=s.baseline["rss"],
                 after_model=after_model["rss"], init_peak=init["peak"],
                 rss_steps=tuple(float(e["rss"]) for e in s.steps), peak_steps=tuple(int(e["peak"]) for e in s.steps),
                 roles={at: {k: v["resident"] for k, v in c["roles"].items()} for at, c in s.census.items()},
                 partition=s.partition_params, pin_ops=ops,
                 rule=Rule.of((m.versions or {}).get("torch"), pinned.alloc_conf(config, m)),
                 via="register" if any(parse(spec)[0] == PIN_REGISTER for spec in m.patches or []) else "torch",
                 checkpoint_peak=max(saves) if saves else None, wall_s=s.run.wall_seconds(),
                 load_peak=None if load is None else int(load["peak"]))


def recorded(ref: str | Path) -> tuple[str, dict[str, Any]]:
    """(accelerator, versions) a calibration was made with, read before anything else is asked; UserError when it
    is neither a scale directory with a run nor a packed calibration."""
    if is_packed(ref):
        data = _packed_json(Path(ref))
        return str(data.get("accelerator")), dict(data.get("versions") or {})
    if not ScaleDir.is_scale(ref):
        raise UserError(f"{ref}: not a scale directory (no scale.json) nor a packed calibration (.json): a "
                        "calibration is a `rssprobe scale` sweep")
    runs = Sweep.load(ref).runs()
    if not runs:
        raise UserError(f"{ref}: a scale directory with no runs")
    manifest = runs[0].manifest()
    return str(manifest.accelerator or "cpu"), dict(manifest.versions or {})


def load(ref: str | Path, defaults: dict[str, Any]) -> Calibration:
    """The calibration of a scale directory (its ok runs) or of a packed file; UserError when it is neither or has
    fewer than 2 sizes."""
    if is_packed(ref):
        return unpack(_packed_json(Path(ref)), Path(ref))
    if not ScaleDir.is_scale(ref):
        raise UserError(f"{ref}: not a scale directory (no scale.json) nor a packed calibration (.json): a "
                        "calibration is a `rssprobe scale` sweep")
    sweep = Sweep.load(ref)
    points: list[Point] = []
    left_out: list[str] = []
    manifests: list[Manifest] = []
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
    _enough(ref, points, left_out)
    kinds = {(m.accelerator or "cpu") for m in manifests}
    if len(kinds) > 1:
        raise UserError(f"{ref}: its runs were made on different accelerators ({', '.join(sorted(kinds))})")
    first = manifests[0]
    host = first.host or {}
    provenance = {"machine": f"measured on {host.get('machine', '?')}, {host.get('cpu_count', '?')} CPUs, "
                             f"{(host.get('mem_total_bytes') or 0) / 2**30:,.0f} GiB",
                  "date": str(first.started or "")[:10], "source": str(ref)}
    return Calibration(Path(ref), points, kinds.pop(), dict(first.versions or {}), dict(first.scenario or {}),
                       str(first.allocator or "glibc"), dict(first.malloc_env or {}), left_out, provenance,
                       read_sd=readnoise.of_host(host))


def _enough(ref: str | Path, points: list[Point], left_out: list[str]) -> None:
    if len({p.params for p in points}) < 2:
        raise UserError(f"{ref}: a calibration needs finished runs at 2 sizes or more "
                        f"({len(points)} usable{'; ' + left_out[0] if left_out else ''})")


# ---- the packed form ------------------------------------------------------------------------------------------

def is_packed(ref: str | Path) -> bool:
    """A packed calibration is a .json file (a scale directory is a directory)."""
    return Path(ref).suffix == ".json" and not Path(ref).is_dir()


def packaged(name: str) -> Path:
    """The path of a calibration shipped with rssprobe (rssprobe/data/calibrations/NAME.json)."""
    return Path(str(resources.files(PACKAGED[0]).joinpath(PACKAGED[1], f"{name}.json")))


def pack(cal: Calibration, provenance: dict[str, Any]) -> dict[str, Any]:
    """The calibration as one JSON object: its points (every figure an estimate reads, nothing else) and where
    they come from."""
    def one(p: Point) -> dict[str, Any]:
        return {"run": p.run, "params": p.params,
                "shape": {"groups": [list(g) for g in p.shape.groups], "largest_layer": p.shape.largest_layer,
                          "layers": p.shape.layers},
                "zero": asdict(p.zero), "baseline": p.baseline, "after_model": p.after_model,
                "init_peak": p.init_peak, "rss_steps": [int(x) for x in p.rss_steps], "peak_steps": list(p.peak_steps),
                "roles": p.roles, "partition": p.partition,
                "pin_ops": None if p.pin_ops is None else [list(op) for op in p.pin_ops],
                "rule": asdict(p.rule), "via": p.via, "checkpoint_peak": p.checkpoint_peak, "wall_s": p.wall_s,
                "load_peak": p.load_peak}
    return {"kind": PACKED, "format": PACKED_FORMAT, "provenance": provenance, "accelerator": cal.accelerator,
            "versions": cal.versions, "scenario": cal.scenario, "allocator": cal.allocator,
            "malloc_env": cal.malloc_env, "read_sd": cal.read_sd, "points": [one(p) for p in cal.points]}


def _packed_json(path: Path) -> dict[str, Any]:
    data = reader.read_json_object(path, "packed calibration")
    if data.get("kind") != PACKED:
        raise UserError(f"{path}: not a packed calibration (kind {data.get('kind')!r}, expected {PACKED!r})")
    if not isinstance(data.get("format"), int) or data["format"] > PACKED_FORMAT:
        raise UserError(f"{path}: packed calibration format {data.get('format')!r}; this rssprobe reads "
                        f"{PACKED_FORMAT}")
    return data


def unpack(data: dict[str, Any], path: Path) -> Calibration:
    """A packed calibration's points; UserError (one line) for any field that is missing or of the wrong kind."""
    try:
        points = [_unpack_point(p) for p in data["points"]]
        cal = Calibration(path, points, str(data["accelerator"]), dict(data["versions"]), dict(data["scenario"]),
                          str(data["allocator"]), {str(k): str(v) for k, v in dict(data["malloc_env"]).items()},
                          [], dict(data.get("provenance") or {}), read_sd=readnoise.packed(data.get("read_sd", 0.0)))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise UserError(f"{path}: damaged packed calibration ({type(e).__name__}: {e})") from None
    _enough(path, points, [])
    return cal


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{value!r} is not a count of bytes")
    return value


def _unpack_point(p: dict[str, Any]) -> Point:
    shape = Shape(tuple(tuple(_int(n) for n in g) for g in p["shape"]["groups"]), _int(p["shape"]["largest_layer"]),
                  _int(p["shape"]["layers"]))
    if shape.params != _int(p["params"]) or not p["rss_steps"] or len(p["rss_steps"]) != len(p["peak_steps"]):
        raise ValueError(f"run {p.get('run')!r}: its shape, parameters and steps disagree")
    return Point(run=str(p["run"]), params=shape.params, shape=shape, zero=partition.Zero(**p["zero"]),
                 baseline=_int(p["baseline"]), after_model=_int(p["after_model"]), init_peak=_int(p["init_peak"]),
                 rss_steps=tuple(float(_int(round(x))) for x in p["rss_steps"]),
                 peak_steps=tuple(_int(x) for x in p["peak_steps"]),
                 roles={str(at): {str(k): _int(v) for k, v in r.items()} for at, r in p["roles"].items()},
                 partition=None if p["partition"] is None else _int(p["partition"]),
                 pin_ops=None if p["pin_ops"] is None else [tuple(op) for op in p["pin_ops"]],
                 rule=Rule(**p["rule"]), via=str(p["via"]),
                 checkpoint_peak=None if p.get("checkpoint_peak") is None else _int(p["checkpoint_peak"]),
                 wall_s=None if p.get("wall_s") is None else float(p["wall_s"]),
                 load_peak=None if p.get("load_peak") is None else _int(p["load_peak"]))


def dumps(data: dict[str, Any]) -> str:
    """A packed calibration as committed: sorted keys, one line per point (small diffs, no float noise)."""
    return json.dumps(data, sort_keys=True, indent=1) + "\n"
