"""What an estimate says of its own terms: where each comes from (measured: by whom, on what; predicted: by what
rule), the caching host allocator rule its pinned slack is predicted with, and the notes on what the calibration
does not cover (several ranks from one, a target beyond the calibrated sizes, and how to calibrate nearer)."""

from __future__ import annotations

from typing import Any

from ...analysis import calibration as calib
from ...analysis import estimate as arithmetic
from ...analysis import nearer
from ...analysis.pinrule import KEYS_SINCE, Rule
from ...config import torch_alloc_conf
from ...config.scenario import Scenario
from ...config.sizes import format_count
from ...contract.answers import DeepSpeedInfo
from ...contract.interventions import PIN_REGISTER
from ...contract.workerscenario import DEFAULT_ZERO_STAGE
from ...errors import UserError
from ...run import memlimits
from .plan import CALIBRATION_STEPS, REPEAT_GLIBC, Plan
from .request import Question, Request


def rule(version: str | None, conf: str | None) -> Rule:
    """The caching host allocator the slack is predicted with: the calibration's torch under the alloc conf."""
    if conf is not None:
        for key in torch_alloc_conf.split(conf):
            since = KEYS_SINCE.get(key)
            if since and torch_alloc_conf.release(version)[:2] < since:
                raise UserError(f"--torch-alloc-conf {conf}: torch {version} (the calibration's) has no {key!r} "
                                f"(first in torch {since[0]}.{since[1]})")
    return Rule.of(version, conf)


def terms(cal: calib.Calibration, rule: Rule, req: Request, q: Question, info: DeepSpeedInfo
           ) -> tuple[dict[str, str], dict[str, str]]:
    """Where each term of the estimate comes from, named (measured: by whom, on what; predicted: by what rule)."""
    where = cal.describe()
    on = "the packaged calibration" if cal.provenance.get("packaged") else \
        "this machine's calibration" if req.calibration is None else "the given calibration"
    loads = ("checkpoint_load",) if all(p.load_peak is not None for p in cal.points) else ()
    measured = {term: f"{on}: {where}" for term in ("baseline", "fixed", "per_parameter_residual", "step_transient",
                                                     "initialize_transient", "model_copy", *loads)}
    predicted = {"roles": f"DeepSpeed's partitioning of the target's exact tensors (analysis/partition.py, as in "
                          f"DeepSpeed {info['deepspeed']}), checked against the calibration's census and partition",
                 "deepspeed_estimate": f"DeepSpeed {info['deepspeed']}'s {info['estimator']}"}
    register = PIN_REGISTER in req.options.patches
    conf = req.spec.torch_alloc_conf
    if q.accelerator == "cuda":
        predicted["pinned_slack"] = (f"torch {rule.torch}'s caching host allocator rule (analysis/pinrule.py) over "
                                     "DeepSpeed's pin requests at their exact sizes"
                                     + (", pinned at their own size (pin.register)" if register else "")
                                     + (f", alloc conf {conf}" if conf else ""))
        for term in measured:
            measured[term] += " (on a GPU machine: figures for CUDA are predicted from it)"
    else:
        measured["pinned_slack"] = "none: pinning is a no-op on the CPU accelerator"
    return measured, predicted


def ranks_note(stage: int, world: int, steps: int, cal: calib.Calibration) -> list[str]:
    """Several ranks from a one-rank calibration (a packaged one, or --calibration-ranks 1): what a process among
    several holds of its own, and ZeRO-3's gathers, are not in it (reports/estimate.md: 8-9% low on CPU runs under
    glibc's own mmap threshold, within 1.5% calibrated at 2 ranks)."""
    if world < 2 or cal.ranks > 1 or not cal.glibc_dynamic:  # with the threshold fixed: within 3% (issue 24)
        return []
    how = f"--calibration-ranks 2 --calibration-steps {steps} measures them" if cal.accelerator == "cpu" else \
        "a 2-rank sweep on a GPU would measure them (rssprobe scale ... --world-size 2)"
    what = "the ranks' gathers and each process's own costs among several" if stage == 3 else \
        "each process's own costs among several"
    return [f"{world} ranks from a 1-rank calibration: {what} are not calibrated (8-9% low on CPU runs under glibc's "
            f"own mmap threshold, reports/estimate.md); {how}"]


def beyond_note(extrapolation: float, cal: calib.Calibration) -> str | None:
    """A target beyond NEAR times the largest calibrated size, under glibc's own mmap threshold: low (not far)."""
    if extrapolation <= arithmetic.NEAR or not cal.glibc_dynamic:
        return None
    return (f"the target is {extrapolation:,.1f}x the largest calibrated size: under glibc's own mmap threshold a "
            "held-out target 4x beyond was 7% low, 1.5% calibrated near it (reports/estimate.md)")



def nearer_advice(req: Request, q: Question, plan: Plan | None, cal: calib.Calibration, params: int) -> str:
    """How to calibrate nearer a target far beyond the calibration: the command and about how long."""
    here = q.accelerator == "cpu"
    memory = memlimits.node_ram()[0] if here else (cal.provenance.get("memory_bytes") or None)
    got = nearer.advice(cal, params, memory, plan.repeat if plan else REPEAT_GLIBC)
    sizes = ",".join(format_count(n) for n in got["params"])
    took = "" if got["seconds"] is None else f", about {got['seconds'] / 60:,.0f} min"
    reach = "" if got["reaches"] else f" (the largest this machine holds, {got['params'][-1] / 1e6:,.0f} M params)"
    if here and plan is not None:
        argv = [a for a in req.argv[1:] if a]
        return (f"calibrate nearer: {' '.join(['rssprobe', *argv])} --calibration-params {sizes}{reach}{took} "
                f"on this machine ({got['repeats']} runs a size)")
    name = cal.scenario.get("name") or "default"
    return (f"calibrate nearer on a {cal.accelerator.upper()} machine: rssprobe scale {name} --params {sizes} "
            f"--steps {CALIBRATION_STEPS} --repeat {REPEAT_GLIBC}{took} (as the calibration's runs took), then "
            "--calibration DIR")


def calibration_notes(req: Request, q: Question, plan: Plan | None, cal: calib.Calibration, out: dict[str, Any],
                      scen: Scenario, world: int, params: int) -> list[str]:
    """What the calibration does not cover for this target: another scenario or stage (a proxy), a world size
    replaced, several ranks from one, a target beyond (or far beyond) the calibrated sizes."""
    notes = []
    cal_stage = (cal.scenario.get("zero") or {}).get("stage", DEFAULT_ZERO_STAGE)
    if cal.scenario.get("name") != scen.name or cal_stage != scen.zero.stage:
        notes.append(f"calibrated on {cal.scenario.get('name')} at ZeRO-{cal_stage}"
                     + (" (a proxy: one layer of the target is too large to calibrate here)" if plan and plan.proxy
                        else "") + f", the target is {scen.name} at ZeRO-{scen.zero.stage}: the fitted terms are "
                     "the calibration's")
    if scen.world_size != 1 and scen.world_size != q.ranks * req.nodes:
        notes.append(f"the scenario's world_size {scen.world_size} is replaced by the ranks per node x --nodes")
    notes.extend(ranks_note(scen.zero.stage, world, scen.steps or CALIBRATION_STEPS, cal))
    if out["far"] or out["node"]["wide"] or out["rank"]["wide"]:
        notes.append((f"the target is {out['extrapolation']:,.0f}x the largest calibrated size; " if out["far"]
                      else "") + ("intervals wider than their figure are not given; " if out["node"]["wide"] else "")
                     + nearer_advice(req, q, plan, cal, params))
    elif beyond := beyond_note(out["extrapolation"], cal):
        notes.append(f"{beyond}; {nearer_advice(req, q, plan, cal, params)}")
    return notes
