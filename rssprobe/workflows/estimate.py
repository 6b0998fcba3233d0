"""`rssprobe estimate`: host RAM per rank and per node for a run nobody has made yet.

Checks the target before anything runs (a size below one layer, ranks DeepSpeed cannot partition over, an
alloc conf its torch lacks: one line, exit 2), asks the worker's DeepSpeed for its defaults and its own
estimate, then calibrates or loads the calibration and hands both to analysis/estimate.py.

A calibration is a size sweep of the target's scenario at 1, 2 and 3 layers (x param groups; 2 steps unless
--calibration-steps, one rank unless --calibration-ranks, this machine's allocator settings), run by
campaign/scale.py into the cache root
(`<cache>/estimate/<scenario>-<key>/scale`), keyed by the installed torch/DeepSpeed (and the Python), the
scenario's shape (everything but its size, steps and world size), the allocator and its glibc knobs, the
patches, the repeats, steps and ranks (`calibration.json` beside it says so, in the contract's format). On first use it
runs with a progress bar; later estimates reuse it; --fresh measures it again; --calibration DIR takes any
scale directory instead, e.g. one measured on a GPU (which --accelerator cuda needs: the fixed cost and the
per-parameter residuals of a CUDA process are not this machine's).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import contract
from ..analysis import calibration as calib
from ..analysis import estimate as arithmetic
from ..analysis import partition, sweep
from ..analysis.pinrule import KEYS_SINCE, Rule
from ..analysis.summary import ELEMENT_BYTES
from ..campaign import scale
from ..config import hfconfig, modelshape, patchsets, scenario, torch_alloc_conf
from ..config.scenario import Scenario
from ..contract import PIN_REGISTER, parse
from ..errors import UserError
from ..log import say
from ..run import dsinfo, preflight
from ..run.envs import resolve_python
from ..run.group import TRIM_AT_END, Start
from ..store import layout, reader
from ..store.writer import now_iso, write_json_atomic

CALIBRATION_LAYERS = (1, 2, 3)  # times the param groups: the smallest models of the scenario's shape ...
CALIBRATION_SPAN = 2  # ... stretched until the largest has this many times the smallest's parameters
CALIBRATION_STEPS = 2  # step 1 makes Adam's states; step 2 is the steady step (--calibration-steps: more)
CALIBRATION_FILE = "calibration.json"
ACCELERATORS = ("cpu", "cuda")
# keys of a scenario that do not change what one process holds per parameter (or are set by the calibration)
NOT_SHAPE = ("name", "description", "steps", "world_size", "timeout_s", "probes", "torch_alloc_conf", "seed")


class Stopped(UserError):
    """The calibration did not finish: interrupted (exit 130) or a run failed (exit 1)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class Request:
    """What `rssprobe estimate` was asked for."""

    scenario_ref: str
    sets: list[str] = field(default_factory=list)
    params: float | None = None
    ranks_per_node: int | None = None
    nodes: int = 1
    accelerator: str = "cpu"
    calibration: Path | None = None
    calibrate: bool = False
    fresh: bool = False
    allocator: str = "glibc"
    malloc_env: dict[str, str] = field(default_factory=dict)
    patches: list[str] = field(default_factory=list)
    torch_alloc_conf: str | None = None
    repeat: int = 1
    calibration_ranks: int = 1
    calibration_steps: int = CALIBRATION_STEPS
    env_ref: str | None = None
    python: str | None = None
    argv: list[str] = field(default_factory=list)


def _number(flag: str, value: float | None, minimum: float) -> None:
    if value is not None and (not isinstance(value, (int, float)) or not math.isfinite(value) or value < minimum):
        raise UserError(f"{flag} {value}: not a number >= {minimum:g}")


def target_scenario(req: Request) -> tuple[Scenario, modelshape.Shape]:
    """The scenario at the target size and its exact shape; UserError for a size the model cannot take."""
    _number("--params", req.params, 1)
    _number("--ranks-per-node", req.ranks_per_node, 1)
    _number("--nodes", req.nodes, 1)
    _number("--calibration-ranks", req.calibration_ranks, 1)
    _number("--calibration-steps", req.calibration_steps, CALIBRATION_STEPS)
    if req.accelerator not in ACCELERATORS:
        raise UserError(f"--accelerator {req.accelerator}: not one of {', '.join(ACCELERATORS)}")
    scen = scenario.load(req.scenario_ref, [*req.sets, *([f"model.params={req.params!r}"] if req.params else [])])
    if scen.script is not None:
        raise UserError(f"{req.scenario_ref}: a script builds its own model; estimate takes a scenario")
    if scen.grad_accum_steps > 1:
        raise UserError("grad_accum_steps > 1: the per-parameter gradient accumulation buffers are not modelled "
                        "by estimate yet")
    per_layer, outside = modelshape.layer_params(scen)
    if req.params is not None and (req.params - outside) / per_layer < 0.5:
        raise UserError(f"--params {req.params:g}: less than one layer of {scen.name}'s model (a layer is "
                        f"{per_layer:,} params" + (f", the rest of the model {outside:,}" if outside else "") + ")")
    return scen, modelshape.of(scen, req.scenario_ref)


def _rule(version: str | None, conf: str | None) -> Rule:
    """The caching host allocator the slack is predicted with: the calibration's torch under the alloc conf."""
    if conf is not None:
        for key in torch_alloc_conf.split(conf):
            since = KEYS_SINCE.get(key)
            if since and torch_alloc_conf.release(version)[:2] < since:
                raise UserError(f"--torch-alloc-conf {conf}: torch {version} (the calibration's) has no {key!r} "
                                f"(first in torch {since[0]}.{since[1]})")
    return Rule.of(version, conf)


def _shape_key(scen: Scenario) -> dict[str, Any]:
    """What makes two scenarios calibrate alike: everything but their size and what the calibration sets."""
    raw = scen.model_dump(mode="json")
    out = {k: v for k, v in raw.items() if k not in NOT_SHAPE}
    model = {k: v for k, v in raw["model"].items() if k not in ("params", "layers")}
    if isinstance(model.get("hf"), dict):
        model["hf"] = {k: v for k, v in model["hf"].items() if k not in (hfconfig.LAYERS, "n_layer")}
    return {**out, "model": model}


def calibration_key(req: Request, scen: Scenario, info: contract.DeepSpeedInfo, python: str,
                    patches: list[str]) -> dict[str, Any]:
    return {"torch": info["torch"], "deepspeed": info["deepspeed"], "python": python, "scenario": _shape_key(scen),
            "allocator": req.allocator, "malloc_env": req.malloc_env, "patches": patches, "repeat": req.repeat,
            **({"ranks": req.calibration_ranks} if req.calibration_ranks != 1 else {}),
            "layers": calibration_layers(scen), "steps": req.calibration_steps}


def calibration_dir(scen: Scenario, key: dict[str, Any]) -> Path:
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return layout.estimate_root() / layout.slug(f"{scen.name}-{digest}")


def calibration_layers(scen: Scenario) -> list[int]:
    """Three layer counts of the scenario's shape: 1, 2, 3 (x param groups), stretched where the layers are a small
    part of the model (a transformers model's embedding and head) until the largest model has CALIBRATION_SPAN
    times the smallest's parameters, so that the fit's slope is measured over a range of sizes, not one point."""
    groups = scen.model.param_groups if scen.model.kind == "linear" else 1
    per_layer, outside = modelshape.layer_params(scen)
    first = groups * CALIBRATION_LAYERS[0]
    last = max(groups * CALIBRATION_LAYERS[-1],
               -(-((CALIBRATION_SPAN - 1) * (outside + first * per_layer) + first * per_layer) // per_layer))
    return [first, (first + last) // 2, last]


def calibration_sizes(scen: Scenario) -> list[float]:
    per_layer, outside = modelshape.layer_params(scen)
    return [float(outside + k * per_layer) for k in calibration_layers(scen)]


def _read_key(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    data = reader.read_json_object(path, "calibration file")
    version = contract.format_of(data)
    if version is None or version > contract.FORMAT_VERSION:
        raise UserError(f"{path}: {contract.too_new(version) if version else 'not a calibration file'}")
    return data.get("key") if isinstance(data.get("key"), dict) else None


def calibration_sets(req: Request) -> list[str]:
    """The target's --set, less its size, with the calibration's steps, ranks and end-of-run trim."""
    return [*(s for s in req.sets if s.split("=", 1)[0].strip() not in ("model.params", "model.layers")),
            f"steps={req.calibration_steps}", f"world_size={req.calibration_ranks}", TRIM_AT_END]


def calibrate(req: Request, scen: Scenario, key: dict[str, Any], patches: list[str]) -> Path:
    """The cached calibration's scale directory, run (or resumed, or with --fresh remeasured) if unfinished."""
    home = calibration_dir(scen, key)
    directory = home / "scale"
    stored = _read_key(home / CALIBRATION_FILE)
    if stored is not None and stored != json.loads(json.dumps(key)):
        raise UserError(f"{home}: holds a calibration for another configuration; remove it or pass --fresh")
    finished = stored is not None and not req.fresh and _finished(directory)
    if not finished:
        sets = calibration_sets(req)
        home.mkdir(parents=True, exist_ok=True)
        write_json_atomic(home / CALIBRATION_FILE, {contract.FORMAT_KEY: contract.FORMAT_VERSION, "key": key,
                                                    "created": now_iso()})
        say(f"calibrating {scen.name} on this machine: {len(calibration_layers(scen))} sizes x {req.repeat} run(s), "
            f"{req.calibration_steps} steps each, {req.calibration_ranks} rank(s), into {directory}")
        outcome = scale.sweep(calibration_sizes(scen), Start(
            scenario_ref=req.scenario_ref, sets=sets, patches=patches, allocator=req.allocator,
            malloc_env=req.malloc_env, repeat=req.repeat, env_ref=req.env_ref, python=req.python,
            argv=req.argv), directory, req.fresh)
        if outcome.exit_code == contract.EXIT_INTERRUPTED:
            raise Stopped(f"calibration interrupted; rerun to resume it ({directory})", outcome.exit_code)
        if outcome.exit_code:
            raise Stopped(f"calibration failed: {'; '.join(outcome.data['problems'][:2])} ({directory})", 1)
    return directory


def _finished(directory: Path) -> bool:
    """Whether every size of the calibration has its finished runs."""
    try:
        return sweep.ScaleDir.is_scale(directory) and not sweep.Sweep.load(directory).problems
    except UserError:
        return False


def _describe_target(scen: Scenario, shape: modelshape.Shape, zero: partition.Zero, req: Request,
                     ranks: int) -> dict[str, Any]:
    return {"scenario": scen.name, "params": shape.params, "layers": shape.layers, "tensors": shape.tensors,
            "param_groups": len(shape.groups), "largest_tensor": shape.largest_tensor, "stage": zero.stage,
            "offload_param": zero.offload_param, "precision": scen.precision, "ranks_per_node": ranks,
            "nodes": req.nodes, "world_size": zero.world, "accelerator": req.accelerator,
            "pin_memory": {"offload_optimizer": zero.pin_optimizer, "offload_param": zero.pin_param},
            "pinned_via": "pin.register (exact size)" if PIN_REGISTER in req.patches else "torch's caching host "
            "allocator", "torch_alloc_conf": req.torch_alloc_conf}


def _terms(cal: calib.Calibration, rule: Rule, req: Request, info: contract.DeepSpeedInfo
           ) -> tuple[dict[str, str], dict[str, str]]:
    where = cal.describe()
    on = "this machine's calibration" if req.calibration is None else "the given calibration"
    measured = {"baseline": f"{on}: {where}", "fixed": f"{on}: {where}",
                "per_parameter_residual": f"{on}: {where}", "step_transient": f"{on}: {where}",
                "initialize_transient": f"{on}: {where}", "model_copy": f"{on}: {where}"}
    predicted = {"roles": f"DeepSpeed's partitioning of the target's exact tensors (analysis/partition.py, as in "
                          f"DeepSpeed {info['deepspeed']}), checked against the calibration's census and partition",
                 "deepspeed_estimate": f"DeepSpeed {info['deepspeed']}'s {info['estimator']}"}
    if req.accelerator == "cuda":
        predicted["pinned_slack"] = (f"torch {rule.torch}'s caching host allocator rule (analysis/pinrule.py) over "
                                     "DeepSpeed's pin requests at their exact sizes"
                                     + (", pinned at their own size (pin.register)" if PIN_REGISTER in req.patches
                                        else "") + (f", alloc conf {req.torch_alloc_conf}"
                                                    if req.torch_alloc_conf else ""))
    else:
        measured["pinned_slack"] = "none: pinning is a no-op on the CPU accelerator"
    return measured, predicted


def ranks_note(stage: int, world: int, steps: int, cal: calib.Calibration) -> list[str]:
    """ZeRO-3 over several ranks from a one-rank calibration under glibc's own mmap threshold: what glibc keeps of
    the ranks' gathers and releases is not in it (reports/estimate.md: low there, and within 3% calibrated so)."""
    glibc_own = cal.allocator == "glibc" and "MALLOC_MMAP_THRESHOLD_" not in cal.malloc_env
    if stage != 3 or world < 2 or not glibc_own or max(p.zero.world for p in cal.points) > 1:
        return []
    return [f"ZeRO-3 at {world} ranks from a 1-rank calibration under glibc's own mmap threshold: the ranks' "
            f"gathers are not calibrated; --calibration-ranks 2 --calibration-steps {steps} measures them"]


def run(req: Request) -> dict[str, Any]:
    """Check, calibrate (or load), estimate; the estimate as a dict (analysis/estimate.py's, and what it is)."""
    scen, shape = target_scenario(req)
    if req.ranks_per_node is None and not req.calibrate:
        raise UserError("--ranks-per-node R is required (the ranks of one node)")
    ranks = req.ranks_per_node or 1
    patchsets.resolve(scen, False, False, req.patches)  # an unknown intervention is refused as `run` refuses it
    patches = [p for p in req.patches if parse(p)[0] != PIN_REGISTER]  # pin.register cannot apply on the CPU
    why = partition.refusal(shape, partition.zero_of(scen.zero.model_dump(), ELEMENT_BYTES[scen.precision],
                                                     ranks * req.nodes, req.accelerator, {}))
    if why:  # the world size alone decides it: refused before DeepSpeed is even asked
        raise UserError(f"--ranks-per-node {ranks} --nodes {req.nodes}: {why}")
    if req.torch_alloc_conf is not None:
        try:
            torch_alloc_conf.split(req.torch_alloc_conf)
        except ValueError as e:
            raise UserError(f"--torch-alloc-conf {req.torch_alloc_conf}: {e}") from None
    if req.calibration is None and req.accelerator == "cuda":
        raise UserError("--accelerator cuda needs --calibration DIR: a scale directory measured on a GPU (a "
                        "CUDA process's fixed cost and per-parameter residuals are not this machine's)")
    made_here = {"--calibration-steps": (req.calibration_steps, CALIBRATION_STEPS),
                 "--calibration-ranks": (req.calibration_ranks, 1), "--repeat": (req.repeat, 1)}
    given = [f"{flag} {value}" for flag, (value, default) in made_here.items() if value != default]
    if req.calibration is not None and given:
        raise UserError(f"{', '.join(given)}: shape a calibration this machine makes; --calibration DIR is "
                        "measured already")
    if req.calibration is not None:  # what it was measured on decides before DeepSpeed is asked anything
        accelerator, versions = calib.recorded(req.calibration)
        if accelerator != req.accelerator:
            raise UserError(f"--calibration {req.calibration}: measured on {accelerator}, the target is "
                            f"--accelerator {req.accelerator}")
        _rule(versions.get("torch"), req.torch_alloc_conf)
    if req.calibration is None:  # the calibration's runs are checked (steps against the time-out, the machine)
        scale.size_scenarios(req.scenario_ref, calibration_sets(req), calibration_sizes(scen))  # before anything
    python, _env = resolve_python(req.env_ref, req.python, log=say)
    preflight.check_alloc_conf(req.torch_alloc_conf, python)  # a misspelt key or a bad value, as `run` refuses it
    info = dsinfo.ask(python, {"params": shape.params, "largest_layer": shape.largest_layer, "ranks_per_node": ranks,
                               "nodes": req.nodes, "stage": scen.zero.stage,
                               "offload_param": scen.zero.offload_param is not None})
    defaults = info["zero_defaults"]
    zero = partition.zero_of(scen.zero.model_dump(), ELEMENT_BYTES[scen.precision], ranks * req.nodes,
                             req.accelerator, defaults)
    directory = req.calibration or calibrate(req, scen, calibration_key(req, scen, info, python, patches), patches)
    cal = calib.load(directory, defaults)
    rule = _rule(cal.versions.get("torch"), req.torch_alloc_conf)
    target = arithmetic.Target(shape, zero, ranks, req.nodes, rule,
                               "register" if PIN_REGISTER in req.patches else "torch")
    out = arithmetic.estimate(target, cal)
    measured, predicted = _terms(cal, rule, req, info)
    notes = list(out.pop("notes"))
    cal_zero = cal.scenario.get("zero") or {}
    if cal.scenario.get("name") != scen.name or cal_zero.get("stage", 2) != scen.zero.stage:
        notes.append(f"calibrated on {cal.scenario.get('name')} at ZeRO-{cal_zero.get('stage', 2)}, the target is "
                     f"{scen.name} at ZeRO-{scen.zero.stage}: the fitted terms are the calibration's")
    if scen.world_size != 1 and scen.world_size != ranks * req.nodes:
        notes.append(f"the scenario's world_size {scen.world_size} is replaced by --ranks-per-node x --nodes")
    notes.extend(ranks_note(scen.zero.stage, zero.world, scen.steps, cal))
    estimator = info["estimator_cpu_bytes"]
    return {contract.FORMAT_KEY: contract.FORMAT_VERSION,
            "target": _describe_target(scen, shape, zero, req, ranks), **out,
            "deepspeed_estimate_bytes": estimator,
            "deepspeed_estimate_rank_bytes": None if estimator is None else estimator / ranks,
            "deepspeed_estimator": info["estimator"],
            "versions": {"estimate_for": {"torch": info["torch"], "deepspeed": info["deepspeed"]},
                         "calibration": cal.versions},
            "measured_terms": measured, "predicted_terms": predicted, "notes": notes,
            "calibration": {"path": str(cal.path), "accelerator": cal.accelerator, "runs": len(cal.points),
                            "params": sorted(cal.params), "left_out": cal.left_out, "allocator": cal.allocator,
                            "malloc_env": cal.malloc_env, "scenario": cal.scenario.get("name")}}
