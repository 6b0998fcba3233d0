"""`rssprobe estimate`: host RAM per rank and per node for a run nobody has made yet, and whether it fits.

The question as users ask it: a model (a scenario, `--model NAME` of the shipped public models, or `--hf-config
PATH`), its size (`--params 7B`), ZeRO stage, `--gpus-per-node G` (CUDA) or `--ranks-per-node R --accelerator
cpu` (a rank count alone is refused with a hint: "ranks" does not say where the buffers live), `--nodes K`, and
the node's RAM (`--node-ram`; for a CPU target on one node, this machine's). Checks the target before anything
runs (one line, exit 2), asks the worker's DeepSpeed for its defaults and its own estimate, calibrates or loads
the calibration, and hands both to analysis/estimate.py (figures), analysis/provision.py (phases, fit, changes,
the answer) and analysis/dsformula.py (DeepSpeed's formula beside it).

A calibration is a size sweep of the target's scenario at 1, 2 and 3 layers (x param groups; --calibration-params
instead), 12 steps (a target of S steps is estimated from the first S), on one rank (two for ZeRO-3 over several
ranks: its gathers are a multi-rank cost), 3 runs a size under glibc's own mmap threshold (identical runs differ
there: the interval comes from that spread) and 1 with it fixed (they agree to 0.1%), run by campaign/scale.py
into `<cache>/estimate/<scenario>-<key>/scale`, keyed by the installed torch/DeepSpeed (and the Python), the
scenario's shape, the allocator and its glibc knobs, the patches, repeats, steps, ranks and sizes
(`calibration.json`). A model too large to calibrate here (its one-layer model above PROXY_ABOVE params: a
published 7 B model) is calibrated on a packaged proxy of its kind (llama-small for a transformers model, default
for the Linear stack), said in the output. On CUDA the recorded H200 sweep ships as the default
(rssprobe/data/calibrations/h200-default.json); --calibration DIR|FILE takes any other.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from .. import contract
from ..analysis import calibration as calib
from ..analysis import dsformula, nearer, partition, provision, sweep
from ..analysis import estimate as arithmetic
from ..analysis.pinrule import KEYS_SINCE, Rule
from ..analysis.results import Estimate
from ..analysis.summary import ELEMENT_BYTES
from ..campaign import engine, scale
from ..config import hfconfig, knownmodels, modelshape, patchsets, scenario, torch_alloc_conf, trainerjob
from ..config.runoptions import RunOptions
from ..config.scenario import Scenario
from ..config.scenariospec import ScenarioSpec
from ..config.sizes import format_count
from ..contract.interventions import PIN_REGISTER, parse
from ..errors import UserError
from ..log import say
from ..run import dsinfo, memlimits, preflight
from ..run.envs import resolve_python
from ..run.group import Start
from ..store import layout, reader
from ..store.writer import now_iso, write_json_atomic
from . import estimate_job

CALIBRATION_LAYERS = (1, 2, 3)  # times the param groups: the smallest models of the scenario's shape ...
CALIBRATION_SPAN = 2  # ... stretched until the largest has this many times the smallest's parameters
# Steps of each calibration run: a target of S steps is estimated from the first S (its steady RSS the mean of
# steps 2..S, its step peak the highest of 1..S), so one calibration answers for 2 and for 12 steps; glibc's
# retention levels off within them (reports/estimate.md: the 24-step row)
CALIBRATION_STEPS = 12
# Runs per calibration size: under glibc's own mmap threshold identical runs retain different amounts (up to 7%
# apart, reports/estimate.md), and the interval is made from that spread, pooled over the sizes (3 sizes x 3 runs:
# 7 degrees of freedom); with the threshold fixed (or another allocator) they agree to 0.1%: one run a size
REPEAT_GLIBC = 3
REPEAT_STEADY = 1
PROXY_ABOVE = 200_000_000  # a one-layer model above this is calibrated on its kind's packaged proxy
PROXY = {"linear": "default", "transformers": "llama-small"}
CUDA_CALIBRATION = "h200-default"  # rssprobe/data/calibrations/<name>.json: the default for --accelerator cuda
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
    """What `rssprobe estimate` was asked for (None: not given)."""

    scenario_ref: str | None = None
    sets: list[str] = field(default_factory=list)  # the user's --set words
    steps: int | None = None
    params: float | None = None
    ranks_per_node: int | None = None
    gpus_per_node: int | None = None
    nodes: int = 1
    accelerator: str | None = None
    model: str | None = None
    hf_config: Path | None = None
    stage: int | None = None
    offload_param: bool | None = None
    node_ram: int | None = None
    calibration: Path | None = None
    calibrate: bool = False
    fresh: bool = False
    # the calibration's runs: patches, allocator, glibc knobs, environment; repeat None: by the glibc in use
    options: RunOptions = field(default_factory=lambda: RunOptions(repeat=None))
    torch_alloc_conf: str | None = None
    calibration_ranks: int | None = None
    calibration_steps: int | None = None
    calibration_params: list[float] | None = None
    argv: list[str] = field(default_factory=list)
    # the job as the trainer runs it (config/trainerjob.py; None: HF Trainer / accelerate's default)
    zero_init: bool | None = None
    load_dtype: str | None = None
    trainable: str | None = None


@dataclass
class Question:
    """The question resolved: where the buffers live and how many ranks share a node."""

    accelerator: str
    ranks: int
    for_this_machine: bool  # a CPU target on one node: this machine's RAM and lock limit are the default


def _number(flag: str, value: float | None, minimum: float) -> None:
    if value is not None and (not isinstance(value, (int, float)) or not math.isfinite(value) or value < minimum):
        raise UserError(f"{flag} {value}: not a number >= {minimum:g}")


def question(req: Request) -> Question:
    """Where the buffers live and how many ranks a node runs; UserError (one line, a hint) for a question that does
    not say: a rank count without an accelerator, or both --gpus-per-node and --ranks-per-node."""
    _number("--nodes", req.nodes, 1)
    if req.accelerator is not None and req.accelerator not in ACCELERATORS:
        raise UserError(f"--accelerator {req.accelerator}: not one of {', '.join(ACCELERATORS)}")
    if req.gpus_per_node is not None:
        _number("--gpus-per-node", req.gpus_per_node, 1)
        if req.ranks_per_node is not None:
            raise UserError("--gpus-per-node and --ranks-per-node both given: one says the ranks of a node "
                            "(--gpus-per-node G: CUDA; --ranks-per-node R --accelerator cpu: CPU ranks)")
        if req.accelerator == "cpu":
            raise UserError(f"--gpus-per-node {req.gpus_per_node} --accelerator cpu: GPUs are CUDA; CPU ranks are "
                            f"--ranks-per-node {req.gpus_per_node} --accelerator cpu")
        return Question("cuda", req.gpus_per_node, False)
    if req.ranks_per_node is not None:
        _number("--ranks-per-node", req.ranks_per_node, 1)
        if req.accelerator is None:
            raise UserError(f"--ranks-per-node {req.ranks_per_node}: on GPUs or CPUs? --gpus-per-node "
                            f"{req.ranks_per_node} (CUDA: the model on the device) or --ranks-per-node "
                            f"{req.ranks_per_node} --accelerator cpu (every buffer in host RAM)")
        return Question(req.accelerator, req.ranks_per_node, req.accelerator == "cpu" and req.nodes == 1)
    if req.calibrate:
        accelerator = req.accelerator or "cpu"
        return Question(accelerator, 1, accelerator == "cpu" and req.nodes == 1)
    raise UserError("how many ranks a node? --gpus-per-node G (CUDA) or --ranks-per-node R --accelerator cpu")


def _zero_options(req: Request) -> dict[str, Any]:
    """--stage and --offload-param as the spec's typed options (config/scenariospec.py)."""
    if req.stage is not None and req.stage not in (1, 2, 3):
        raise UserError(f"--stage {req.stage}: ZeRO stages are 1, 2 and 3")
    if req.offload_param and req.stage is not None and req.stage < 3:
        raise UserError(f"--offload-param: parameters are offloaded at ZeRO stage 3 only (--stage {req.stage})")
    offload = req.offload_param or (req.stage == 3 and req.offload_param is None)
    return {"stage": req.stage, "offload_param": "cpu" if offload else None}


def target_spec(req: Request) -> ScenarioSpec:
    """The target as asked: its scenario (a known model's or config.json's name when it is not a file), the user's
    --set words, and --steps, --params, --stage, --offload-param as typed values."""
    return ScenarioSpec(req.scenario_ref or req.model or str(req.hf_config), tuple(req.sets), steps=req.steps,
                        params=req.params or None, **_zero_options(req))


def target_scenario(req: Request, read: tuple[str, dict[str, Any]] | None = None
                    ) -> tuple[Scenario, modelshape.Shape, str]:
    """The scenario at the target size, its exact shape and where its model comes from; UserError for a size the
    model cannot take or a question naming no model (or two). `read`: the SCENARIO file as run() read it."""
    _number("--params", req.params, 1)
    given = [flag for flag, v in (("SCENARIO", req.scenario_ref), ("--model", req.model),
                                  ("--hf-config", req.hf_config)) if v is not None]
    if len(given) != 1:
        raise UserError("which model? a SCENARIO, --model NAME (rssprobe estimate --help lists them) or --hf-config "
                        "PATH" if not given else f"{' and '.join(given)}: give one model")
    spec = target_spec(req)
    if req.model is not None or req.hf_config is not None:
        if req.model is not None:
            known = knownmodels.load(req.model)
            raw = knownmodels.raw_scenario(known.name, known.hf, f"{known.title} (published config: {known.source})")
            origin = f"{known.title}: its published config ({known.source})"
        else:
            hf, dropped = knownmodels.from_config_json(Path(req.hf_config))  # type: ignore[arg-type]
            stem = Path(req.hf_config).parent.name or "hf-config"  # type: ignore[arg-type]
            raw = knownmodels.raw_scenario(stem, hf, f"{req.hf_config}")
            origin = f"{req.hf_config}" + (f" (not shapes, left out: {', '.join(dropped)})" if dropped else "")
        label = req.model or str(req.hf_config)
        scen = spec.apply(raw, label)
        if req.model is not None and req.params is not None:
            published = hfconfig.build_config(dict(known.hf), label)
            layers = int(getattr(published, hfconfig.layers_key(published)))
            if scen.model.n_layers != layers:
                raise UserError(f"--model {req.model} --params {req.params:g}: {known.name} is "
                                f"{known.params / 1e9:,.2f} B params ({layers} layers) as published; --params would "
                                f"rebuild it with {scen.model.n_layers} layers under the same name: drop --params "
                                "(or, for another size of this architecture, a SCENARIO or --hf-config of its "
                                "config.json with that num_hidden_layers)")
    else:
        scen = spec.apply(read[1], read[0]) if read else spec.load()
        origin = f"scenario {req.scenario_ref}"
    if scen.script is not None:
        raise UserError(f"{req.scenario_ref}: a script builds its own model; the target is a scenario, --model or "
                        "--hf-config of the same model, calibrated on the script: rssprobe scale --script train.py "
                        "--size-arg layers=1,2,3 --out DIR -- ARGS, then estimate ... --calibration DIR")
    if scen.grad_accum_steps > 1:
        raise UserError("grad_accum_steps > 1: the per-parameter gradient accumulation buffers are not modelled "
                        "by estimate yet")
    per_layer, outside = modelshape.layer_params(scen)
    if req.params is not None and (req.params - outside) / per_layer < 0.5:
        raise UserError(f"--params {req.params:g}: less than one layer of {scen.name}'s model (a layer is "
                        f"{per_layer:,} params" + (f", the rest of the model {outside:,}" if outside else "") + ")")
    return scen, modelshape.of(scen, scen.name), origin


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


@dataclass
class Plan:
    """How the calibration is made: which scenario (the target's, or its proxy), and its runs."""

    spec: ScenarioSpec
    scen: Scenario
    repeat: int
    ranks: int
    steps: int
    sizes: list[float]
    proxy: str | None = None  # the proxy's name when the target is too large to calibrate here


def calibration_plan(req: Request, scen: Scenario, ranks: int) -> Plan:
    """The calibration this target gets on this machine: its own scenario's shape at small sizes, or its kind's
    packaged proxy when even one layer is too large; runs, ranks and steps as the module says."""
    o = req.options
    glibc_own = o.allocator == "glibc" and "MALLOC_MMAP_THRESHOLD_" not in o.malloc_env
    repeat = o.repeat or (REPEAT_GLIBC if glibc_own else REPEAT_STEADY)
    # a process among several has costs a lone one lacks (and ZeRO-3 its gathers): a target of several ranks is
    # calibrated at 2 (held out, 2 ranks: -8.1% on the node's steady RSS from one rank, +0.8% from two;
    # reports/estimate.md)
    cal_ranks = req.calibration_ranks or (2 if ranks >= 2 else 1)
    steps = req.calibration_steps or CALIBRATION_STEPS
    _number("--calibration-steps", steps, 2)
    _number("--calibration-ranks", cal_ranks, 1)
    def user_sets(*drop: str) -> tuple[str, ...]:  # the user's --set words but those of the keys given
        return tuple(s for s in req.sets if not s.split("=", 1)[0].strip().startswith(drop))

    spec = ScenarioSpec(req.scenario_ref or "", user_sets("model.params", "model.layers"), steps=steps,
                        world_size=cal_ranks, trim_at_end=True, **_zero_options(req))
    proxy, cal_scen = None, scen
    if req.scenario_ref is None or (req.calibration_params is None and min(calibration_sizes(scen)) > PROXY_ABOVE):
        proxy = PROXY[scen.model.kind]
        spec = dataclasses.replace(spec, ref=proxy, sets=user_sets("model."))
        cal_scen = spec.load()
    sizes = scale.check_sizes(list(req.calibration_params), "--calibration-params " + ",".join(
        f"{n:g}" for n in req.calibration_params)) if req.calibration_params else calibration_sizes(cal_scen)
    return Plan(spec, cal_scen, repeat, cal_ranks, steps, sizes, proxy)


def calibration_key(req: Request, plan: Plan, info: contract.DeepSpeedInfo, python: str,
                    patches: list[str]) -> dict[str, Any]:
    return {"torch": info["torch"], "deepspeed": info["deepspeed"], "python": python,
            "scenario": _shape_key(plan.scen), "allocator": req.options.allocator,
            "malloc_env": req.options.malloc_env,
            "patches": patches, "repeat": plan.repeat, **({"ranks": plan.ranks} if plan.ranks != 1 else {}),
            "sizes": [int(s) for s in plan.sizes], "steps": plan.steps}


def calibration_dir(scen: Scenario, key: dict[str, Any]) -> Path:
    """Where the calibration of `key` is cached: named as every campaign's default directory is (its name and
    its definition's hash); the scale campaign inside it resumes or refuses as any campaign does."""
    return engine.default_dir(layout.estimate_root(), scen.name, key)


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


def calibrate(req: Request, plan: Plan, key: dict[str, Any], patches: list[str]) -> Path:
    """The cached calibration's scale directory, run (or resumed, or with --fresh remeasured) if unfinished."""
    home = calibration_dir(plan.scen, key)
    directory = home / "scale"
    stored = _read_key(home / CALIBRATION_FILE)
    if stored is not None and stored != json.loads(json.dumps(key)):
        raise UserError(f"{home}: holds a calibration for another configuration; remove it or pass --fresh")
    finished = stored is not None and not req.fresh and _finished(directory)
    options = dataclasses.replace(req.options, patches=tuple(patches), repeat=plan.repeat)
    start = Start(spec=plan.spec, options=options, argv=req.argv)
    if not finished:
        scale.preflight_sweep(plan.sizes, start)  # every size's per-run preflight, before its directory
        home.mkdir(parents=True, exist_ok=True)
        write_json_atomic(home / CALIBRATION_FILE, {contract.FORMAT_KEY: contract.FORMAT_VERSION, "key": key,
                                                    "created": now_iso()})
        say(f"calibrating {plan.scen.name} on this machine: {len(plan.sizes)} sizes x {plan.repeat} run(s), "
            f"{plan.steps} steps each, {plan.ranks} rank(s), into {directory}")
        outcome = scale.sweep(plan.sizes, start, directory, req.fresh)
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


def _describe_target(scen: Scenario, shape: modelshape.Shape, zero: partition.Zero, req: Request, q: Question,
                     origin: str) -> dict[str, Any]:
    return {"scenario": scen.name, "model_from": origin, "params": shape.params, "layers": shape.layers,
            "tensors": shape.tensors, "param_groups": len(shape.groups), "largest_tensor": shape.largest_tensor,
            "stage": zero.stage, "offload_param": zero.offload_param, "precision": scen.precision,
            "steps": scen.steps, "ranks_per_node": q.ranks, "nodes": req.nodes, "world_size": zero.world,
            "accelerator": q.accelerator,
            "pin_memory": {"offload_optimizer": zero.pin_optimizer, "offload_param": zero.pin_param},
            "pinned_via": "pin.register (exact size)" if PIN_REGISTER in req.options.patches else
            "torch's caching host allocator", "torch_alloc_conf": req.torch_alloc_conf}


def _terms(cal: calib.Calibration, rule: Rule, req: Request, q: Question, info: contract.DeepSpeedInfo
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
    if q.accelerator == "cuda":
        predicted["pinned_slack"] = (f"torch {rule.torch}'s caching host allocator rule (analysis/pinrule.py) over "
                                     "DeepSpeed's pin requests at their exact sizes"
                                     + (", pinned at their own size (pin.register)" if register else "")
                                     + (f", alloc conf {req.torch_alloc_conf}" if req.torch_alloc_conf else ""))
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


def _nearer(req: Request, q: Question, plan: Plan | None, cal: calib.Calibration, params: int) -> str:
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


def run(req: Request) -> Estimate:
    """Check, calibrate (or load), estimate; the estimate as a dict (analysis/estimate.py's, and what it is)."""
    q = question(req)
    # the SCENARIO file read once: for the target, and for the calibration's sizes when they are of its shape
    read = scenario.read(req.scenario_ref) if req.scenario_ref is not None and req.model is None \
        and req.hf_config is None else None
    scen, shape, origin = target_scenario(req, read)
    job = trainerjob.resolve(req.zero_init, req.load_dtype, req.trainable, scen.zero.stage, scen.model.kind,
                             shape.params)
    ranks = q.ranks
    asked = list(req.options.patches)
    patchsets.resolve(scen, False, False, asked)  # an unknown intervention is refused as `run` refuses it
    preflight.check_patch_pair(asked)  # and two that replace one another, as `run` refuses them
    patches = [p for p in asked if parse(p)[0] != PIN_REGISTER]  # pin.register cannot apply on the CPU
    why = partition.refusal(shape, partition.zero_of(scen.zero.model_dump(), ELEMENT_BYTES[scen.precision],
                                                     ranks * req.nodes, q.accelerator, {}))
    if why:  # the world size alone decides it: refused before DeepSpeed is even asked
        raise UserError(f"{ranks} ranks per node x {req.nodes} node(s): {why}")
    if req.torch_alloc_conf is not None:
        try:
            torch_alloc_conf.split(req.torch_alloc_conf)
        except ValueError as e:
            raise UserError(f"--torch-alloc-conf {req.torch_alloc_conf}: {e}") from None
    made_here = {"--calibration-steps": req.calibration_steps, "--calibration-ranks": req.calibration_ranks,
                 "--repeat": req.options.repeat, "--calibration-params": req.calibration_params}
    given = [flag for flag, value in made_here.items() if value is not None]
    cal_ref = req.calibration
    if cal_ref is None and q.accelerator == "cuda":
        cal_ref = calib.packaged(CUDA_CALIBRATION)
        if given:
            raise UserError(f"{', '.join(given)}: shape a calibration this machine makes; a CUDA target is estimated "
                            "from one measured on a GPU (the packaged H200 sweep, or --calibration DIR)")
    if req.calibration is not None and given:
        raise UserError(f"{', '.join(given)}: shape a calibration this machine makes; --calibration "
                        f"{req.calibration} is measured already")
    plan = None
    if cal_ref is not None:  # what it was measured on decides before DeepSpeed is asked anything
        accelerator, versions = calib.recorded(cal_ref)
        if accelerator != q.accelerator:
            raise UserError(f"--calibration {cal_ref}: measured on {accelerator}, the target is on {q.accelerator}")
        _rule(versions.get("torch"), req.torch_alloc_conf)
    else:  # the calibration's runs are checked (steps against the time-out, the machine) before anything
        plan = calibration_plan(req, scen, ranks)
        scale.size_scenarios(plan.spec, plan.sizes, read if plan.proxy is None else None)
    python, _env = resolve_python(req.options.env_ref, req.options.python, log=say)
    preflight.check_alloc_conf(req.torch_alloc_conf, python)  # a misspelt key or a bad value, as `run` refuses it
    info = dsinfo.ask(python, {"params": shape.params, "largest_layer": shape.largest_layer, "ranks_per_node": ranks,
                               "nodes": req.nodes, "stage": scen.zero.stage,
                               "offload_param": scen.zero.offload_param is not None})
    defaults = info["zero_defaults"]
    zero = partition.zero_of(scen.zero.model_dump(), ELEMENT_BYTES[scen.precision], ranks * req.nodes,
                             q.accelerator, defaults)
    directory = cal_ref or calibrate(req, plan, calibration_key(req, plan, info, python, patches), patches)  # type: ignore[arg-type]
    cal = calib.load(directory, defaults)
    rule = _rule(cal.versions.get("torch"), req.torch_alloc_conf)
    target = arithmetic.Target(shape, zero, ranks, req.nodes, rule,
                               "register" if PIN_REGISTER in asked else "torch", scen.steps, zero_init=job.zero_init,
                               load_bytes=job.load_bytes, trainable=job.trainable)
    out = arithmetic.estimate(target, cal)
    measured, predicted = _terms(cal, rule, req, q, info)
    notes = list(out.pop("notes"))
    cal_zero = cal.scenario.get("zero") or {}
    if cal.scenario.get("name") != scen.name or cal_zero.get("stage", 2) != scen.zero.stage:
        notes.append(f"calibrated on {cal.scenario.get('name')} at ZeRO-{cal_zero.get('stage', 2)}"
                     + (" (a proxy: one layer of the target is too large to calibrate here)" if plan and plan.proxy
                        else "") + f", the target is {scen.name} at ZeRO-{scen.zero.stage}: the fitted terms are "
                     "the calibration's")
    if scen.world_size != 1 and scen.world_size != ranks * req.nodes:
        notes.append(f"the scenario's world_size {scen.world_size} is replaced by the ranks per node x --nodes")
    notes.extend(ranks_note(scen.zero.stage, zero.world, scen.steps or CALIBRATION_STEPS, cal))
    if out["far"] or out["node"]["wide"] or out["rank"]["wide"]:
        notes.append((f"the target is {out['extrapolation']:,.0f}x the largest calibrated size; " if out["far"]
                      else "") + ("intervals wider than their figure are not given; " if out["node"]["wide"] else "")
                     + _nearer(req, q, plan, cal, shape.params))
    elif beyond := beyond_note(out["extrapolation"], cal):
        notes.append(f"{beyond}; {_nearer(req, q, plan, cal, shape.params)}")
    ram, ram_from = (req.node_ram, "--node-ram") if req.node_ram is not None else \
        memlimits.node_ram() if q.for_this_machine else (None, None)
    rows = provision.phases(out["node"], ram)
    prov = provision.provision(rows)
    fixes = provision.changes(target, cal, ram)
    argv = estimate_job.user_argv(req.argv)
    for c in fixes:
        c["command"] = estimate_job.command(argv, c["flags"])
    unit = ("GPU" if q.accelerator == "cuda" else "CPU rank") + ("s" if ranks != 1 else "")
    loaded = [f"loaded in {job.load_dtype}"] if scen.model.kind == "transformers" else []
    loaded += [f"{job.trainable:.2%} trainable"] if job.trainable < 1 else []
    size = f"{shape.params / 1e9:,.2f} B params" if shape.params >= 1e9 else f"{shape.params / 1e6:,.1f} M params"
    init = "" if zero.stage < 3 else " under zero.Init" if job.zero_init else " without zero.Init"
    what = f"{scen.name} ({', '.join([size, *loaded])}) at ZeRO-{zero.stage}{init} on {ranks} {unit} per node"
    measure = estimate_job.measure_hint(q.accelerator, rows, bool(cal.provenance.get("packaged")), req.argv)
    for r in rows:
        if not r["measured"] and measure:
            r["why"] = r["why"].replace("(the answer says how to measure it)", f"; {measure}")
    answer = provision.answer(what, out["node"], rows, prov, ram, ram_from, fixes, measure,
                              [c["command"] for c in fixes])
    other = estimate_job.other_way(target, cal, ram, job.load_dtype) if zero.stage == 3 else None
    if other is not None:
        answer.insert(1, other["sentence"])
    assumptions = job.assumptions(zero.stage, scen.zero.offload_optimizer is not None, zero.offload_param,
                                  scen.model.kind)
    lock = provision.lock_check(out["rank"]["pinned_requested_bytes"],
                                memlimits.lock_limit() if q.for_this_machine else None)
    rows_ds = [dsformula.formula(shape.params, ranks, req.nodes, zero.stage, zero.offload_param, z)
               for z in ((False, True) if zero.stage == 3 else (False,))]
    formula = next((f for f in rows_ds if f["zero_init"] == (job.zero_init and zero.stage == 3)), rows_ds[0])
    ds_values = {False: info["estimator_cpu_bytes"], True: info.get("estimator_cpu_bytes_zero_init")}
    for f in rows_ds:
        f["deepspeed_bytes"] = ds_values[f["zero_init"]]
        f["matches_target"] = f is formula
    estimator = formula["deepspeed_bytes"]
    return cast(Estimate, {contract.FORMAT_KEY: contract.FORMAT_VERSION,
            "answer": answer, "assumptions": assumptions, "other_way": other,
            "deepspeed_formula_rows": rows_ds,
            "target": _describe_target(scen, shape, zero, req, q, origin), **out,
            "phases": rows, "provision": {**prov, "line": provision.provision_line(prov)},
            "node_ram": {"bytes": ram, "from": ram_from}, "changes": fixes, "lock": lock,
            "deepspeed_estimate_bytes": estimator,
            "deepspeed_estimate_rank_bytes": None if estimator is None else estimator / ranks,
            "deepspeed_estimator": info["estimator"],
            "deepspeed_formula": {**formula, "reconciled": dsformula.reconcile(formula, out["node"], req.nodes,
                                                                               zero.stage)},
            "versions": {"estimate_for": {"torch": info["torch"], "deepspeed": info["deepspeed"]},
                         "calibration": cal.versions},
            "measured_terms": measured, "predicted_terms": predicted, "notes": notes,
            "calibration": {"path": str(cal.path), "accelerator": cal.accelerator, "runs": len(cal.points),
                            "repeats": cal.repeats, "steps": cal.steps, "ranks": cal.ranks,
                            "params": sorted(set(cal.params)), "left_out": cal.left_out, "allocator": cal.allocator,
                            "malloc_env": cal.malloc_env, "scenario": cal.scenario.get("name"),
                            "provenance": cal.provenance, "proxy": plan.proxy if plan else None}})
