"""The target as asked: its scenario at the target size (a SCENARIO, a shipped model's published config, or a
config.json), its exact shape and where its model comes from; a size the model cannot take, or a question naming
no model (or two), refused in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...analysis import partition
from ...config import hfconfig, knownmodels, modelshape
from ...config.scenario import Scenario
from ...contract.interventions import PIN_REGISTER
from ...errors import UserError
from .request import Question, Request, number


def target_scenario(req: Request, read: tuple[str, dict[str, Any]] | None = None
                    ) -> tuple[Scenario, modelshape.Shape, str]:
    """The scenario at the target size, its exact shape and where its model comes from; UserError for a size the
    model cannot take. `read`: the SCENARIO file as run() read it."""
    spec = req.spec
    number("--params", spec.params, 1)
    optimizer_on_device(spec.sets)
    if req.source == "model":
        known = knownmodels.load(spec.ref)
        raw = knownmodels.raw_scenario(known.name, known.hf, f"{known.title} (published config: {known.source})")
        origin = f"{known.title}: its published config ({known.source})"
        scen = spec.apply(raw, spec.ref)
        if spec.params is not None:
            published = hfconfig.build_config(dict(known.hf), spec.ref)
            layers = int(getattr(published, hfconfig.layers_key(published)))
            if scen.model.n_layers != layers:
                raise UserError(f"--model {spec.ref} --params {spec.params:g}: {known.name} is "
                                f"{known.params / 1e9:,.2f} B params ({layers} layers) as published; --params would "
                                f"rebuild it with {scen.model.n_layers} layers under the same name: drop --params "
                                "(or, for another size of this architecture, a SCENARIO or --hf-config of its "
                                "config.json with that num_hidden_layers)")
    elif req.source == "hf-config":
        hf, dropped = knownmodels.from_config_json(Path(spec.ref))
        raw = knownmodels.raw_scenario(Path(spec.ref).parent.name or "hf-config", hf, spec.ref)
        origin = spec.ref + (f" (not shapes, left out: {', '.join(dropped)})" if dropped else "")
        scen = spec.apply(raw, spec.ref)
    else:
        scen = spec.apply(read[1], read[0]) if read else spec.load()
        origin = f"scenario {spec.ref}"
    if scen.script is not None:
        raise UserError(f"{spec.ref}: a script builds its own model; the target is a scenario, --model or "
                        "--hf-config of the same model, calibrated on the script: rssprobe scale --script train.py "
                        "--size-arg layers=1,2,3 --out DIR -- ARGS, then estimate ... --calibration DIR")
    if scen.grad_accum_steps > 1:
        raise UserError("grad_accum_steps > 1: the per-parameter gradient accumulation buffers are not modelled "
                        "by estimate yet")
    per_layer, outside = modelshape.layer_params(scen)
    if spec.params is not None and (spec.params - outside) / per_layer < 0.5:
        raise UserError(f"--params {spec.params:g}: less than one layer of {scen.name}'s model (a layer is "
                        f"{per_layer:,} params" + (f", the rest of the model {outside:,}" if outside else "") + ")")
    return scen, modelshape.of(scen, scen.name), origin


def optimizer_on_device(sets: tuple[str, ...]) -> None:
    """UserError (one line, what to type) for a --set that keeps the optimizer off the host: the calibrations'
    scenarios accept only zero.offload_optimizer "cpu"; a GPU job with nothing offloaded is --no-offload-optimizer."""
    for word in sets:
        key, _, value = word.partition("=")
        value = value.strip().strip("\"'")
        if key.strip() == "zero.offload_optimizer" and value != "cpu":
            raise UserError(f"--set {word}: the optimizer kept on the GPU is --no-offload-optimizer (CUDA targets); "
                            "zero.offload_optimizer takes only \"cpu\", the default")


def optimizer_kept(req: Request, accelerator: str, offload_param: bool) -> bool:
    """Whether the target keeps its optimizer on the device (--no-offload-optimizer); UserError (one line) where
    that is not a GPU job with its parameters on the device."""
    if req.offload_optimizer is not False:
        return False
    if accelerator == "cpu":
        raise UserError("--no-offload-optimizer: on the CPU accelerator the optimizer is in host RAM anyway; drop it")
    if offload_param:
        raise UserError("--no-offload-optimizer with the parameters offloaded (--offload-param) is not estimated: "
                        "add --no-offload-param, or drop --no-offload-optimizer")
    return True


def describe_target(scen: Scenario, shape: modelshape.Shape, zero: partition.Zero, req: Request, q: Question,
                    origin: str) -> dict[str, Any]:
    return {"scenario": scen.name, "model_from": origin, "params": shape.params, "layers": shape.layers,
            "tensors": shape.tensors, "param_groups": len(shape.groups), "largest_tensor": shape.largest_tensor,
            "stage": zero.stage, "offload_param": zero.offload_param, "precision": scen.precision,
            "steps": scen.steps, "ranks_per_node": q.ranks, "nodes": req.nodes, "world_size": zero.world,
            "accelerator": q.accelerator,
            "pin_memory": {"offload_optimizer": zero.pin_optimizer, "offload_param": zero.pin_param},
            "pinned_via": "pin.register (exact size)" if PIN_REGISTER in req.options.patches else
            "torch's caching host allocator", "torch_alloc_conf": req.spec.torch_alloc_conf}
