"""The calibration a target gets on this machine (Plan): its scenario's shape at 1, 2 and 3 layers (x param
groups), or its kind's packaged proxy when one layer is too large to calibrate here; how many runs, ranks and steps;
and the key (installed versions, shape, allocator, patches, runs) its cached directory is named by.

Steps: a target of S steps is estimated from the first S of CALIBRATION_STEPS. Runs: 3 a size under glibc's own mmap
threshold (identical runs differ there: the interval comes from that spread), 1 with it fixed (they agree to 0.1%).
Ranks: one, two for a target of several (a process among several, and ZeRO-3's gathers, have costs of their own).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...campaign import engine, scale
from ...config import hfconfig, modelshape
from ...config.scenario import Scenario
from ...config.scenariospec import ScenarioSpec
from ...contract.answers import DeepSpeedInfo
from ...store import layout
from .request import Request, number

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
# keys of a scenario that do not change what one process holds per parameter (or are set by the calibration)
NOT_SHAPE = ("name", "description", "steps", "world_size", "timeout_s", "probes", "torch_alloc_conf", "seed")


def shape_key(scen: Scenario) -> dict[str, Any]:
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
    number("--calibration-steps", steps, 2)
    number("--calibration-ranks", cal_ranks, 1)
    def user_sets(*drop: str) -> tuple[str, ...]:  # the user's --set words but those of the keys given
        return tuple(s for s in req.spec.sets if not s.split("=", 1)[0].strip().startswith(drop))

    # the target's spec at the calibration's steps and ranks, sized by the sweep; the CUDA alloc conf stays out
    spec = dataclasses.replace(req.spec, ref=req.spec.ref if req.source == "scenario" else "",
                               sets=user_sets("model.params", "model.layers"), steps=steps, world_size=cal_ranks,
                               params=None, torch_alloc_conf=None, trim_at_end=True)
    proxy, cal_scen = None, scen
    if req.source != "scenario" or (req.calibration_params is None and
                                    min(calibration_sizes(scen)) > PROXY_ABOVE):
        proxy = PROXY[scen.model.kind]
        spec = dataclasses.replace(spec, ref=proxy, sets=user_sets("model."))
        cal_scen = spec.load()
    sizes = scale.check_sizes(list(req.calibration_params), "--calibration-params " + ",".join(
        f"{n:g}" for n in req.calibration_params)) if req.calibration_params else calibration_sizes(cal_scen)
    return Plan(spec, cal_scen, repeat, cal_ranks, steps, sizes, proxy)


def calibration_key(req: Request, plan: Plan, info: DeepSpeedInfo, python: str,
                    patches: list[str]) -> dict[str, Any]:
    return {"torch": info["torch"], "deepspeed": info["deepspeed"], "python": python,
            "scenario": shape_key(plan.scen), "allocator": req.options.allocator,
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
