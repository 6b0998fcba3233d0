"""Host RAM of one rank and of a node for a run nobody has made yet, from a calibration (pure arithmetic).

Every rank's RSS (as `ps` shows it: the process's resident bytes, its pre-model baseline included) is split
into what the model's shapes decide exactly and what the calibration measured:

* the live ZeRO buffers by census role: each rank's partition of the target's exact tensors, the way DeepSpeed
  computes it (analysis/partition.py), in host memory (on CUDA the bit16 model, one temp gradient buffer, the
  reduce bucket and gathered parameters are on the device);
* on CUDA, the pinned-block slack: torch's caching host allocator rule (analysis/pinrule.py) replayed over
  DeepSpeed's pin requests at their exact sizes, under the target's torch and alloc conf, or pinned at their
  own size with pin.register. On the CPU accelerator pinning is a no-op: no slack;
* four fitted terms, each least squares against the model's parameter count over the calibration's runs
  (stats.linear_fit; the prediction for a new run with its t interval, stats.predict):
  - steady: steady RSS minus the live buffers (and, on CUDA, the predicted slack) of each calibration run:
    its intercept is the baseline plus the fixed cost per process, its slope what else grows per parameter
    (glibc's retention of freed transients, allocator bookkeeping);
  - step peak: the highest step peak minus the same;
  - initialize: deepspeed.initialize's exact peak minus the buffers it leaves (its transients: flattening,
    the fp32 gradient buffer of ZeRO-3's initialize_optimizer_states, imports);
  - model copy: RSS with the model built whole, before initialize partitions it (the `after_model` phase): the
    full model every rank holds at once unless it is built under zero.Init (DeepSpeed #1814, #5290; rssprobe
    never builds under zero.Init), so the node's initialize peak grows with ranks per node.
  Each is fitted against what it grows with (GROWS_WITH): the steady and step-peak residuals and the model copy
  against the whole model's parameter count (every rank builds the whole model and computes every parameter's
  gradient: the recorded 1, 2 and 8 rank runs of the default scenario, reports/cuda-pinned, have the same
  steady residual per rank, 8.57 B/param, and the same step transient, 4.0-4.1 B/param of the whole model);
  initialize's against the rank's partition (its transients are partition-sized buffers: on CUDA each pinned
  one is made pageable first and copied into its pinned block; ZeRO-3's initialize_optimizer_states makes an
  fp32 buffer of its largest sub-group's partition). A one-rank calibration cannot tell the two apart (there
  the partition is the model); the 2-rank rows of reports/estimate.md check the choice.

steady = live + slack + steady fit; step peak = live + slack + step-peak fit; initialize peak = the larger of
(model copy, buffers after initialize + slack + initialize fit); peak = the larger of step peak and
initialize peak. The node is ranks-per-node ranks of the same sizes (DeepSpeed pads the partitions equal),
in lockstep (the node's sampled peak of a 2- or 8-rank run is the sum of its ranks' peaks).

A target more than FAR times the largest calibrated size is given with each fitted term's interval widened by
that term's whole per-parameter part (the calibration cannot tell whether a per-parameter cost measured on
its tensors persists on much larger ones: glibc returns freed chunks above its mmap threshold at once), and a
note.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config.modelshape import Shape
from . import fixes, partition, pinrule, stats
from .calibration import Calibration, Point
from .partition import Zero
from .pinrule import Rule

FAR = 100
GLIBC_MMAP_MAX = 32 * 2**20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: its dynamic threshold stops rising here
FITTED = ("steady", "step_peak", "initialize", "model_copy")


@dataclass(frozen=True)
class Term:
    """A figure in bytes with its interval (None where the calibration cannot give one)."""

    value: float
    low: float | None
    high: float | None

    @classmethod
    def exact(cls, value: float) -> Term:
        return cls(value, value, value)

    def __add__(self, other: Term) -> Term:
        low = None if self.low is None or other.low is None else self.low + other.low
        high = None if self.high is None or other.high is None else self.high + other.high
        return Term(self.value + other.value, low, high)

    def times(self, k: float) -> Term:
        return Term(self.value * k, None if self.low is None else self.low * k,
                    None if self.high is None else self.high * k)

    def fields(self, name: str) -> dict[str, float | None]:
        return {f"{name}_bytes": self.value, f"{name}_bytes_low": self.low, f"{name}_bytes_high": self.high}


def larger(a: Term, b: Term) -> Term:
    """The larger of two figures, each bound the larger of the two bounds (max is monotone)."""
    low = None if a.low is None or b.low is None else max(a.low, b.low)
    high = None if a.high is None or b.high is None else max(a.high, b.high)
    return Term(max(a.value, b.value), low, high)


@dataclass(frozen=True)
class Target:
    """What is estimated: a model's shapes, one rank's ZeRO configuration (world = ranks x nodes), the node."""

    shape: Shape
    zero: Zero
    ranks_per_node: int
    nodes: int
    rule: Rule  # the caching host allocator the slack is predicted with (CUDA)
    via: str = "torch"  # "register": pin.register pins every request at its own size


def live(shape: Shape, zero: Zero, at: str) -> dict[str, int]:
    """Host bytes per role of one rank after `at` (init / step)."""
    return partition.roles(partition.buffers(shape, zero), zero.accelerator != "cpu", at)


def pinned(shape: Shape, zero: Zero, rule: Rule, via: str) -> dict[str, int]:
    """One rank's pin requests alive at the end, what CUDA holds for them, and the difference (0 on the CPU
    accelerator, where pinning is a no-op)."""
    ops = partition.pin_ops(shape, zero, via)
    freed = {op[1] for op in ops if op[0] == "free"}
    requested = sum(op[2] for op in ops if op[0] == "alloc" and op[1] not in freed)
    if zero.accelerator == "cpu":
        return {"requested": requested, "held": requested, "slack": 0, "requests": len(ops) - len(freed)}
    held = pinrule.predict(ops, rule).pinned
    return {"requested": requested, "held": held, "slack": held - requested, "requests": len(ops) - len(freed)}


def _explained(p: Point, at: str) -> int:
    """What a calibration run's shapes decide: its host live buffers after `at`, plus its predicted slack."""
    return sum(live(p.shape, p.zero, at).values()) + pinned(p.shape, p.zero, p.rule, p.via)["slack"]


def residuals(points: list[Point]) -> dict[str, list[float]]:
    """Per fitted term, each calibration run's bytes that the shapes do not decide."""
    return {"steady": [p.steady - _explained(p, "step") for p in points],
            "step_peak": [p.step_peak - _explained(p, "step") for p in points],
            "initialize": [p.init_peak - _explained(p, "init") for p in points],
            "model_copy": [float(p.after_model) for p in points]}


# What each fitted term grows with: the whole model (every rank computes every gradient, builds the whole model)
# or the rank's own partition (initialize's transients are partition-sized: on CUDA each pinned buffer is first
# made pageable and copied into its pinned block, DeepSpeedZeroOptimizer.__init__ / initialize_optimizer_states)
GROWS_WITH = {"steady": "model", "step_peak": "model", "initialize": "partition", "model_copy": "model"}


def size(shape: Shape, zero: Zero, term: str) -> int:
    return shape.params if GROWS_WITH[term] == "model" else partition.partition_params(shape, zero)


def fits(points: list[Point]) -> dict[str, stats.LinearFit]:
    return {name: stats.linear_fit([float(size(p.shape, p.zero, name)) for p in points], ys)
            for name, ys in residuals(points).items()}


def _fitted(fit: stats.LinearFit, n: float, far: bool, widen: bool = True) -> Term:
    e = stats.predict(fit, float(n))
    if e.low is None or e.high is None:
        return Term(e.value, None, None)
    extra = abs(fit.slope * n) if far and widen else 0.0
    return Term(e.value, e.low - extra, e.high + extra)


def checks(points: list[Point]) -> list[str]:
    """Where the calibration's own records disagree with the partition arithmetic (empty: they all agree)."""
    out = []
    for p in points:
        if p.partition is not None and p.partition != partition.partition_params(p.shape, p.zero):
            out.append(f"{p.run}: DeepSpeed's partition {p.partition:,} elements, computed "
                       f"{partition.partition_params(p.shape, p.zero):,}")
        for at, census in (("init", "after_init"), ("step", "end")):
            computed, found = live(p.shape, p.zero, at), p.roles.get(census, {})
            for role in set(computed) | set(found) - {"other"}:
                gap = found.get(role, 0) - computed.get(role, 0)
                if abs(gap) > 64 * 1024:  # a census counts whole resident pages of each storage
                    out.append(f"{p.run}: census {census} {role} {found.get(role, 0):,} B, computed "
                               f"{computed.get(role, 0):,} B")
        if p.pin_ops is not None:
            recorded = [(op[0], op[2]) if op[0] == "alloc" else ("free",) for op in p.pin_ops]
            modelled = [(op[0], op[2]) if op[0] == "alloc" else ("free",) for op in
                        partition.pin_ops(p.shape, p.zero, "torch")]
            if recorded != modelled:
                out.append(f"{p.run}: its {len(recorded)} pin requests differ from the {len(modelled)} modelled")
    return out


def rank(target: Target, cal: Calibration) -> dict[str, Any]:
    """One rank's figures (bytes, with intervals) and how far the calibration was extrapolated."""
    far_by = target.shape.params / max(cal.params)
    far = far_by > FAR
    f = fits(cal.points)
    roles, roles_init = live(target.shape, target.zero, "step"), live(target.shape, target.zero, "init")
    pins = pinned(target.shape, target.zero, target.rule, target.via)
    slack = Term.exact(pins["slack"])
    x = {term: size(target.shape, target.zero, term) for term in GROWS_WITH}
    steady = Term.exact(sum(roles.values())) + slack + _fitted(f["steady"], x["steady"], far)
    step_peak = Term.exact(sum(roles.values())) + slack + _fitted(f["step_peak"], x["step_peak"], far)
    state = Term.exact(sum(roles_init.values())) + slack + _fitted(f["initialize"], x["initialize"], far)
    copy = _fitted(f["model_copy"], x["model_copy"], far, widen=False)
    init_peak = larger(copy, state)
    peak = larger(step_peak, init_peak)
    baseline = stats.mean_interval([float(p.baseline) for p in cal.points])
    fixed = stats.intercept(f["steady"])
    fixed_term = Term(fixed.value - baseline.value, None if fixed.low is None else fixed.low - baseline.value,
                      None if fixed.high is None else fixed.high - baseline.value)
    return {
        "terms": {"steady": steady, "peak": peak, "step_peak": step_peak, "initialize_peak": init_peak,
                  "initialize_state": state, "initialize_model_copy": copy, "fixed": fixed_term, "pinned_slack": slack},
        "roles": roles, "roles_after_initialize": roles_init, "pinned": pins,
        "baseline_bytes": baseline.value,
        "per_param_residual_bytes_per_param": f["steady"].slope,
        "initialize_peak_is": "model copy" if copy.value >= state.value else "buffers after initialize",
        "extrapolation": far_by, "far": far,
        "fits": {name: {"slope_bytes_per_param": fit.slope, "intercept_bytes": fit.intercept, "dof": fit.dof,
                        "worst_residual_bytes": fit.worst_residual} for name, fit in f.items()},
    }


FIELDS = {"steady": "steady_rss", "peak": "peak_rss", "pinned_slack": "pinned_slack", "fixed": "fixed",
          "initialize_peak": "initialize_peak", "step_peak": "step_peak",
          "initialize_model_copy": "initialize_model_copy", "initialize_state": "initialize_state"}


def view(terms: dict[str, Term], roles: dict[str, int], k: int) -> dict[str, Any]:
    """The JSON view of one rank's terms times k (k = 1: the rank; ranks per node: the node)."""
    out: dict[str, Any] = {}
    for name, key in FIELDS.items():
        out.update(terms[name].times(k).fields(key))
    scaled = {role: b * k for role, b in sorted(roles.items(), key=lambda kv: -kv[1])}
    out.update({"roles": scaled, "roles_low": dict(scaled), "roles_high": dict(scaled),
                "live_bytes": sum(scaled.values())})
    return out


def estimate(target: Target, cal: Calibration) -> dict[str, Any]:
    """The rank's and the node's figures, the calibration's checks, and the notes an engineer needs."""
    r = rank(target, cal)
    terms, k = r["terms"], target.ranks_per_node
    notes = []
    if r["far"]:
        notes.append(f"the target ({target.shape.params / 1e6:,.1f} M params) is {r['extrapolation']:,.0f}x the "
                     f"largest calibrated size ({max(cal.params) / 1e6:,.2f} M), beyond {FAR}x: each fitted term's "
                     "interval is widened by its whole per-parameter part")
    largest = max(p.shape.largest_tensor for p in cal.points) * partition.FP32
    if cal.allocator == "glibc" and "MALLOC_MMAP_THRESHOLD_" not in cal.malloc_env and \
            largest < GLIBC_MMAP_MAX <= target.shape.largest_tensor * partition.FP32:
        notes.append(f"the target's largest tensor is {target.shape.largest_tensor * partition.FP32 / 2**20:,.0f} MiB "
                     f"in fp32, the calibration's {largest / 2**20:,.0f} MiB: glibc returns freed blocks above its "
                     "largest dynamic mmap threshold (32 MiB) at once, so per-parameter residuals fitted on the "
                     "calibration's smaller transients may overstate the target's")
    if any(t.low is None for t in terms.values()):
        notes.append("no interval: the calibration has no degrees of freedom left (2 runs); run 3 sizes or more")
    return {
        "rank": {**view(terms, r["roles"], 1), "baseline_bytes": r["baseline_bytes"],
                 "partition_params": partition.partition_params(target.shape, target.zero),
                 "pinned_requested_bytes": r["pinned"]["requested"], "pinned_held_bytes": r["pinned"]["held"],
                 "pin_requests": r["pinned"]["requests"], "initialize_peak_is": r["initialize_peak_is"],
                 "per_param_residual_bytes_per_param": r["per_param_residual_bytes_per_param"]},
        "node": {**view(terms, r["roles"], k), "ranks": k},
        "extrapolation": r["extrapolation"], "fits": r["fits"], "checks": checks(cal.points), "notes": notes,
        # the pinned-slack fixes over the same requests (rssprobe/data/fixes.toml; predicted, CUDA only)
        "fixes": fixes.compare(partition.pin_ops(target.shape, target.zero, target.via), target.rule.torch, None,
                               target.shape.params, r["pinned"]["held"]) if target.zero.accelerator != "cpu" else [],
    }
