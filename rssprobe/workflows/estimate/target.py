"""The target as asked: its scenario at the target size (a SCENARIO, a shipped model's published config, or a
config.json), its exact shape and where its model comes from; a size the model cannot take, or a question naming
no model (or two), refused in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...analysis import partition
from ...config import hfconfig, knownmodels, modelshape
from ...config.scenario import Scenario
from ...config.scenariospec import ScenarioSpec
from ...contract.interventions import PIN_REGISTER
from ...errors import UserError
from .request import Question, Request, number, zero_options


def target_spec(req: Request) -> ScenarioSpec:
    """The target as asked: its scenario (a known model's or config.json's name when it is not a file), the user's
    --set words, and --steps, --params, --stage, --offload-param as typed values."""
    return ScenarioSpec(req.scenario_ref or req.model or str(req.hf_config), tuple(req.sets), steps=req.steps,
                        params=req.params or None, **zero_options(req))


def target_scenario(req: Request, read: tuple[str, dict[str, Any]] | None = None
                    ) -> tuple[Scenario, modelshape.Shape, str]:
    """The scenario at the target size, its exact shape and where its model comes from; UserError for a size the
    model cannot take or a question naming no model (or two). `read`: the SCENARIO file as run() read it."""
    number("--params", req.params, 1)
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


def describe_target(scen: Scenario, shape: modelshape.Shape, zero: partition.Zero, req: Request, q: Question,
                    origin: str) -> dict[str, Any]:
    return {"scenario": scen.name, "model_from": origin, "params": shape.params, "layers": shape.layers,
            "tensors": shape.tensors, "param_groups": len(shape.groups), "largest_tensor": shape.largest_tensor,
            "stage": zero.stage, "offload_param": zero.offload_param, "precision": scen.precision,
            "steps": scen.steps, "ranks_per_node": q.ranks, "nodes": req.nodes, "world_size": zero.world,
            "accelerator": q.accelerator,
            "pin_memory": {"offload_optimizer": zero.pin_optimizer, "offload_param": zero.pin_param},
            "pinned_via": "pin.register (exact size)" if PIN_REGISTER in req.options.patches else
            "torch's caching host allocator", "torch_alloc_conf": req.torch_alloc_conf}
