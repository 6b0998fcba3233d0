"""Host RAM of one rank and of a node for a run nobody has made yet, from a calibration (pure arithmetic).

Every rank's RSS (as `ps` shows it: the process's resident bytes, its pre-model baseline included) is split
into what the model's shapes decide exactly and what the calibration measured:

* the live ZeRO buffers by census role: each rank's partition of the target's exact tensors, the way DeepSpeed
  computes it (analysis/partition.py), in host memory (on CUDA the bit16 model, one temp gradient buffer, the
  reduce bucket and gathered parameters are on the device);
* on CUDA, the pinned-block slack, a term of its own (`pinned_slack`): torch's caching host allocator rule
  (analysis/pinrule.py) replayed over DeepSpeed's pin requests at their exact sizes, under the target's torch
  and alloc conf, or pinned at their own size with pin.register. On the CPU accelerator pinning is a no-op;
* fitted terms, each a least-squares line against what it grows with over the calibration's runs, every size
  and every repeat (stats.proportional_fit: weighted 1/x^2, because the scatter between identical runs, glibc's
  retention, is bytes per parameter), and the prediction for the target with its t interval (stats.predict_sum:
  the node's interval is its ranks' sum, the line's uncertainty and each rank's own scatter counted once per rank:
  the ranks of one run may retain alike):
  - steady: the steady RSS (the mean of steps 2..S, S the target's steps, at most the calibration's) minus the
    live buffers (and, on CUDA, the predicted slack) of each calibration run: its intercept is the baseline
    plus the fixed cost per process, its slope what else grows per parameter (glibc's retention of freed
    transients, allocator bookkeeping);
  - step peak: the highest step peak of steps 1..S minus the same;
  - initialize: deepspeed.initialize's exact peak minus the buffers it leaves (its transients: flattening,
    the fp32 gradient buffer of ZeRO-3's initialize_optimizer_states, imports);
  - model copy: RSS with the model built whole, before initialize partitions it (the `after_model` phase): the
    full model every rank holds at once unless it is built under zero.Init (DeepSpeed #1814, #5290; rssprobe
    never builds under zero.Init), so the node's initialize peak grows with ranks per node;
  - checkpoint save, where the calibration's scenario saves: the highest save_checkpoint peak minus the live
    buffers;
  - checkpoint load, where the calibration's scenario loads its model from a checkpoint (model.load =
    "checkpoint"): the load's exact peak, absolute (its intercept is the baseline plus the load's fixed cost). It
    is fitted against the whole model even under zero.Init, where each rank keeps only its partition: every rank
    still reads every tensor of the checkpoint (its file pages, mapped, count in each rank's RSS), so from a
    calibration at fewer ranks than the target the partition's share is overstated: an upper side, never a low one.
  Each is fitted against what it grows with (GROWS_WITH): the steady and step-peak residuals and the model copy
  against the whole model's parameter count (every rank builds the whole model and computes every parameter's
  gradient: the recorded 1, 2 and 8 rank runs of the default scenario, reports/cuda-pinned, have the same
  steady residual per rank, 8.57 B/param, and the same step transient, 4.0-4.1 B/param of the whole model);
  initialize's against the rank's partition (its transients are partition-sized buffers).

steady = live + slack + steady fit; step peak = live + slack + step-peak fit; initialize peak = the larger of
(model copy, buffers after initialize + slack + initialize fit); peak = the larger of step peak, initialize peak,
checkpoint save and checkpoint load. The node is ranks-per-node ranks of the same sizes (DeepSpeed pads the
partitions equal), in lockstep (the node's sampled peak of a 2- or 8-rank run is the sum of its ranks' peaks).

A CUDA target with nothing offloaded (Target.optimizer_on_device, `--no-offload-optimizer`) has no host buffers, no
pinned slack and none of the per-parameter host terms fitted on the offloaded calibration: steady, the step peak
and initialize's buffers are the steady line's intercept (the baseline plus the fixed cost per process: predicted);
the model copy, the load and the saves stay (analysis/savephase.py).

For the checkpoint load that sum is the worst case, all ranks at their load peak at once: a run's node view
measures how much they overlap (reports/your-job.md: FAI-RL #68's order).

No bound is ever below what is exact: the live buffers (and slack) plus the calibration's lowest pre-model baseline,
and for the model copy the fp32 model as built on top of it (a loaded model's tensors may stay in the mapped
checkpoint, not resident until read: for a load and its model copy, the baseline alone). An interval wider than its
own figure (far beyond the calibration, or a calibration of 2 runs) is not printed: the estimate says how to
calibrate nearer instead (analysis/provision.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..config.modelshape import Shape
from . import fixes, partition, pinrule, savephase, stats
from .calibration import Calibration, Point
from .partition import Zero
from .pinrule import Rule
from .term import Term, fitted, larger

FAR = 100
# beyond this many times the largest calibrated size, under glibc's own mmap threshold, the point estimate is biased
# low (held out: 4x beyond, -7.1% on steady RSS; calibrated near the target, -1.5%: reports/estimate.md)
NEAR = 2
GLIBC_MMAP_MAX = 32 * 2**20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: its dynamic threshold stops rising here
FITTED = ("steady", "step_peak", "initialize", "model_copy", "checkpoint_save", "checkpoint_load")
# phases a node is provisioned for, in the order a run meets them (label, key of terms()). A phase whose key
# terms() does not return (a calibration that saves or loads no checkpoint) is "not measured" (analysis/provision.py)
PHASES = (("checkpoint load", "checkpoint_load"), ("initialize", "initialize_peak"), ("steady", "steady"),
          ("step peak", "step_peak"), ("checkpoint save", "checkpoint_save"), ("final model save", "model_save"))


@dataclass(frozen=True)
class Target:
    """What is estimated: a model's shapes, one rank's ZeRO configuration (world = ranks x nodes), the node, and
    the steps of the run (None: as many as the calibration made)."""

    shape: Shape
    zero: Zero
    ranks_per_node: int
    nodes: int
    rule: Rule  # the caching host allocator the slack is predicted with (CUDA)
    via: str = "torch"  # "register": pin.register pins every request at its own size
    steps: int | None = None
    zero_init: bool = False  # the model built under zero.Init: no whole copy per rank (a change, not measured)
    # bytes per parameter of the whole model each rank holds before initialize (without zero.Init): 4 as the
    # calibration builds it (fp32), 2 for a from_pretrained load in bf16 (torch_dtype, as Trainer jobs load)
    load_bytes: int = 4
    # the fraction of the parameters that train (an adapter: 0.005): DeepSpeed's optimizer partitions (fp32 master,
    # its gradient, Adam's two states, the bit16 gradient partitions) hold trainable parameters only
    trainable: float = 1.0
    # the job's final save (config/trainerjob.py FINAL_SAVES): the consolidated 16-bit model, DeepSpeed's
    # save_checkpoint (ZeRO-3 with stage3_gather_16bit_weights_on_model_save false), or none
    final_save: str = "model16"
    # CUDA with nothing offloaded (--no-offload-optimizer): the optimizer's states, its gradients and ZeRO's buffers
    # on the device; the per-parameter host terms fitted on the offloaded calibration do not apply (predicted)
    optimizer_on_device: bool = False
    # host memory of the trainer's own on the node (its dataset, data-loader workers, tokenizer: what the user saw
    # in steady training above the steady estimate, --seen-steady), spread over its ranks and held in every phase
    trainer_bytes: int = 0
    # from_pretrained with device_map onto the rank's GPU (--load-onto device, ms-swift below ZeRO-3): no whole copy
    # of the model in host RAM before initialize; the load passes a tensor at a time through it (predicted)
    load_onto_device: bool = False


# the roles that exist for trainable parameters only (the optimizer's param groups hold only those: HF Trainer
# passes the parameters that require grad); the bit16 parameters and the temp buffers stay the whole model's
TRAINABLE_ROLES = ("fp32_master", "fp32_grad", "adam_exp_avg", "adam_exp_avg_sq", "h2d_staging", "grad_partitions")


def live(shape: Shape, zero: Zero, at: str, trainable: float = 1.0) -> dict[str, int]:
    """Host bytes per role of one rank after `at` (init / step); with a trainable fraction below 1 the
    optimizer's roles are that fraction of the full model's (predicted: DeepSpeed's padding not recomputed)."""
    out = partition.roles(partition.buffers(shape, zero), zero.accelerator != "cpu", at)
    if trainable < 1.0:
        out = {role: round(b * trainable) if role in TRAINABLE_ROLES else b for role, b in out.items()}
    return out


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


def host_roles(target: Target, at: str) -> dict[str, int]:
    """The target's host live buffers after `at`: none with the optimizer on the device."""
    return {} if target.optimizer_on_device else live(target.shape, target.zero, at, target.trainable)


def host_pins(target: Target) -> dict[str, int]:
    """The target's pin requests (pinned): none with the optimizer on the device (DeepSpeed pins offload buffers)."""
    if target.optimizer_on_device:
        return {"requested": 0, "held": 0, "slack": 0, "requests": 0}
    return pinned(target.shape, target.zero, target.rule, target.via)


def _explained(p: Point, at: str) -> int:
    """What a calibration run's shapes decide: its host live buffers after `at`, plus its predicted slack."""
    return sum(live(p.shape, p.zero, at).values()) + pinned(p.shape, p.zero, p.rule, p.via)["slack"]


def residuals(points: list[Point], steps: int | None = None) -> dict[str, list[float]]:
    """Per fitted term, each calibration run's bytes that the shapes do not decide, for a run of `steps` steps."""
    out = {"steady": [p.steady_at(steps) - _explained(p, "step") for p in points],
           "step_peak": [p.peak_at(steps) - _explained(p, "step") for p in points],
           "initialize": [p.init_peak - _explained(p, "init") for p in points],
           "model_copy": [float(p.after_model) for p in points]}
    if all(p.checkpoint_peak is not None for p in points):
        out["checkpoint_save"] = [p.checkpoint_peak - _explained(p, "step") for p in points]  # type: ignore[operator]
    if all(p.load_peak is not None for p in points):
        out["checkpoint_load"] = [float(p.load_peak) for p in points]  # type: ignore[arg-type]
    return out


# the figures the trainer's own memory (Target.trainer_bytes) is part of: every phase and what a phase is the larger of
TRAINER_HELD = ("steady", "step_peak", "initialize_state", "initialize_model_copy", "initialize_peak",
                "checkpoint_save", "checkpoint_load", "model_save")
# What each fitted term grows with: the whole model (every rank computes every gradient, builds the whole model)
# or the rank's own partition (initialize's transients are partition-sized: on CUDA each pinned buffer is first
# made pageable and copied into its pinned block, DeepSpeedZeroOptimizer.__init__ / initialize_optimizer_states)
GROWS_WITH = {"steady": "model", "step_peak": "model", "initialize": "partition", "model_copy": "model",
              "checkpoint_save": "model", "checkpoint_load": "model"}


def size(shape: Shape, zero: Zero, term: str) -> int:
    return shape.params if GROWS_WITH[term] == "model" else partition.partition_params(shape, zero)


def calibration_steps(target: Target, cal: Calibration) -> int:
    """The calibration steps the target is estimated from: its own steps, at most the calibration's."""
    return min(target.steps or cal.steps, cal.steps)


def fits(points: list[Point], steps: int | None = None) -> dict[str, stats.ProportionalFit]:
    return {name: stats.proportional_fit([float(size(p.shape, p.zero, name)) for p in points], ys)
            for name, ys in residuals(points, steps).items()}


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


def terms(target: Target, cal: Calibration, k: int, f: dict[str, stats.ProportionalFit] | None = None
          ) -> dict[str, Term]:
    """The figures of k ranks of the target summed (k = 1: one rank; ranks per node: the node)."""
    f = f or fits(cal.points, calibration_steps(target, cal))
    shape, zero = target.shape, target.zero
    base = k * min(p.baseline for p in cal.points)  # the lowest pre-model baseline measured: exact enough a floor
    sd = cal.read_sd  # no interval finer than one RSS read of the calibrating machine
    roles, roles_init = host_roles(target, "step"), host_roles(target, "init")
    slack = Term.exact(k * host_pins(target)["slack"])
    x = {term: size(shape, zero, term) for term in GROWS_WITH}
    now, after_init = Term.exact(k * sum(roles.values())) + slack, Term.exact(k * sum(roles_init.values())) + slack
    out = {"pinned_slack": slack, "live": Term.exact(k * sum(roles.values())),
           "steady": now + fitted(f["steady"], x["steady"], k, base, sd),
           "step_peak": now + fitted(f["step_peak"], x["step_peak"], k, base, sd),
           "initialize_state": after_init + fitted(f["initialize"], x["initialize"], k, base, sd)}
    if target.optimizer_on_device:  # no host buffers, no host transients: the steady line's intercept alone
        fixed_only = intercept(f["steady"], k, base, sd)
        out.update(steady=fixed_only, step_peak=fixed_only, initialize_state=fixed_only)
    # the model every rank holds before initialize, fp32 as built; loaded, its tensors may stay in the mapped
    # checkpoint, not resident until read (docs/your-job.md): then the baseline alone is exact
    on_host = 0 if target.load_onto_device else target.load_bytes  # bytes a parameter of the copy in host RAM
    whole = 0 if "checkpoint_load" in f else on_host * shape.params
    # the calibration built its models in fp32: a model loaded in bf16 is the same line at half the bytes per
    # parameter (the fit evaluated at load_bytes / 4 of the parameters: its intercept, the baseline, unchanged)
    copy = fitted(f["model_copy"], x["model_copy"] * on_host / partition.FP32, k, k * whole + base, sd) if on_host \
        else intercept(f["model_copy"], k, base, sd)  # no copy in host RAM: the line's fixed part alone
    out["initialize_model_copy"] = copy if not target.zero_init else Term.exact(0.0)
    out["initialize_peak"] = larger(out["initialize_model_copy"], out["initialize_state"])
    peaks = [out["step_peak"], out["initialize_peak"]]
    if "checkpoint_save" in f and not target.optimizer_on_device:  # measured with the optimizer offloaded
        out["checkpoint_save"] = now + fitted(f["checkpoint_save"], x["checkpoint_save"], k, base, sd)
        peaks.append(out["checkpoint_save"])
    if "checkpoint_load" in f:
        out["checkpoint_load"] = fitted(f["checkpoint_load"], x["checkpoint_load"], k, base, sd)
        peaks.append(out["checkpoint_load"])
    if cal.phases is not None:  # what the target's calibration did not measure, from the save/load calibration
        for key, term in savephase.terms(target, cal.phases, k, out["steady"], base).items():
            if key not in out:
                out[key] = term
                peaks += [term] if key in savephase.TERMS else []
    out["peak"] = larger(*peaks)
    if target.trainer_bytes:  # held throughout: every phase, and the peak, shifted by the same exact bytes
        own = Term.exact(target.trainer_bytes * k / target.ranks_per_node)
        for key in (*TRAINER_HELD, "peak"):
            if key in out:
                out[key] = out[key] + own
    baseline = stats.mean_interval([float(p.baseline) for p in cal.points]).value
    e = stats.fixed_part(f["steady"])  # the fixed cost per process: the steady line's intercept less the baseline
    out["fixed"] = Term(k * (e.value - baseline), None if e.low is None else k * (e.low - baseline),
                        None if e.high is None else k * (e.high - baseline))
    return out


def intercept(fit: stats.ProportionalFit, k: int, floor: float, read_sd: float = 0.0) -> Term:
    """k ranks of a line's intercept (the steady line's: the baseline plus the fixed cost per process) as a
    process's figure, with its 95% interval (the intercept's own uncertainty, the same for every rank, no finer than
    one RSS read of `read_sd`), never below `floor`."""
    e = stats.fixed_part(fit, read_sd=read_sd)
    value = max(k * e.value, floor)
    if e.low is None or e.high is None:
        return Term(value, None, None, floor)
    return Term(value, max(k * e.low, floor), max(k * e.high, value), floor)


FIELDS = {"steady": "steady_rss", "peak": "peak_rss", "pinned_slack": "pinned_slack", "fixed": "fixed",
          "initialize_peak": "initialize_peak", "step_peak": "step_peak", "checkpoint_save": "checkpoint_save",
          "checkpoint_load": "checkpoint_load",
          "model_save": "model_save", "model_save_state_dict": "model_save_state_dict",
          "initialize_model_copy": "initialize_model_copy", "initialize_state": "initialize_state"}


def _too_wide(term: Term) -> bool:
    """An interval wider than the figure itself tells a user nothing: not printed."""
    return term.low is not None and term.high is not None and term.high - term.low > term.value


def view(figures: dict[str, Term], roles: dict[str, int], k: int) -> dict[str, Any]:
    """The JSON view of k ranks' figures (k = 1: the rank; ranks per node: the node); an interval wider than its
    figure is withheld (its bounds None, `wide` names it)."""
    out: dict[str, Any] = {"wide": []}
    for name, key in FIELDS.items():
        if name not in figures:
            continue
        term = figures[name]
        if _too_wide(term):
            out["wide"].append(key)
            term = Term(term.value, None, None, term.floor)
        out.update(term.fields(key))
    scaled = {role: b * k for role, b in sorted(roles.items(), key=lambda kv: -kv[1])}
    out.update({"roles": scaled, "live_bytes": sum(scaled.values())})
    return out


def rank_details(target: Target, cal: Calibration, f: dict[str, stats.ProportionalFit]) -> dict[str, Any]:
    pins = host_pins(target)
    one = terms(target, cal, 1, f)
    return {"baseline_bytes": stats.mean_interval([float(p.baseline) for p in cal.points]).value,
            "partition_params": partition.partition_params(target.shape, target.zero),
            "pinned_requested_bytes": pins["requested"], "pinned_held_bytes": pins["held"],
            "pin_requests": pins["requests"],
            "initialize_peak_is": "model copy" if one["initialize_model_copy"].value >= one["initialize_state"].value
            else "buffers after initialize",
            "per_param_residual_bytes_per_param": f["steady"].slope}


def estimate(target: Target, cal: Calibration) -> dict[str, Any]:
    """The rank's and the node's figures, the calibration's checks, and the notes an engineer needs."""
    steps = calibration_steps(target, cal)
    f = fits(cal.points, steps)
    k = target.ranks_per_node
    rank_terms, node_terms = terms(target, cal, 1, f), terms(target, cal, k, f)
    roles = host_roles(target, "step")
    rank = {**view(rank_terms, roles, 1), **rank_details(target, cal, f)}
    node = {**view(node_terms, roles, k), "ranks": k}
    far_by = target.shape.params / max(cal.params)
    notes = []
    if target.steps and target.steps > cal.steps:
        notes.append(f"the target makes {target.steps} steps, the calibration's runs {cal.steps}: its later steps "
                     f"are estimated as the calibration's steps 2..{cal.steps} (glibc's retention levels off by "
                     "then: reports/estimate.md)")
    largest = max(p.shape.largest_tensor for p in cal.points) * partition.FP32
    if cal.glibc_dynamic and largest < GLIBC_MMAP_MAX <= target.shape.largest_tensor * partition.FP32:
        notes.append(f"the target's largest tensor is {target.shape.largest_tensor * partition.FP32 / 2**20:,.0f} MiB "
                     f"in fp32, the calibration's {largest / 2**20:,.0f} MiB: glibc returns freed blocks above its "
                     "largest dynamic mmap threshold (32 MiB) at once, so per-parameter residuals fitted on the "
                     "calibration's smaller transients may overstate the target's")
    save_load = None
    if cal.phases is not None:
        pf = savephase.fits(cal.phases)
        model16 = target.final_save == "model16"
        save_load = {"calibration": cal.phases.describe(), "final_save": target.final_save,
                     "holders": savephase.holders(target.zero, k) if model16 else 0,
                     "state_dict_bytes": savephase.state_dict_bytes(target.shape, target.zero) if model16 else 0,
                     "fits": {name: {"slope_bytes_per_param": fit.slope, "intercept_bytes": fit.intercept,
                                     "dof": fit.dof, "noise_bytes_per_param": fit.s} for name, fit in pf.items()}}
    if f["steady"].dof == 0:
        notes.append("no interval: the calibration has no degrees of freedom left (2 runs); run 3 sizes or more")
    return {"rank": rank, "node": node, "extrapolation": far_by, "far": far_by > FAR, "steps": steps,
            "fits": {name: {"slope_bytes_per_param": fit.slope, "intercept_bytes": fit.intercept, "dof": fit.dof,
                            "noise_bytes_per_param": fit.s, "worst_residual_bytes": fit.worst_residual}
                     for name, fit in f.items()},
            "checks": checks(cal.points), "notes": notes, "save_load": save_load,
            # the pinned-slack fixes over the same requests (rssprobe/data/fixes.toml; predicted, CUDA only)
            "fixes": fixes.compare(partition.pin_ops(target.shape, target.zero, target.via), target.rule.torch, None,
                                   target.shape.params, rank["pinned_held_bytes"])
            if target.zero.accelerator != "cpu" and not target.optimizer_on_device else []}


def with_changes(target: Target, **changes: Any) -> Target:
    """The target with some of its fields changed (a what-if: another ZeRO stage, fewer ranks, zero.Init)."""
    return replace(target, **changes)
