"""The exact tensor shapes of a scenario's model, as DeepSpeed will see them, before anything is built.

DeepSpeed sizes every ZeRO buffer from the parameter tensors it is handed, per optimizer param group, in the
order the groups list them (analysis/partition.py does that arithmetic). This module says what those tensors
are: for the Linear stack, from the scenario (each layer a weight of width x width and a bias of width; the
layers dealt round-robin to `param_groups` groups, as worker/training.py builds them); for a transformers
model, from the model built on torch's meta device (no memory; `model.parameters()` order, one group, a tied
weight once, as worker/models.py hands them to deepspeed.initialize). The largest layer (the parameters one
module owns directly) is what DeepSpeed's ZeRO-3 estimator asks for.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UserError
from . import hfconfig, shapecache
from .scenario import Model, Scenario


@dataclass(frozen=True)
class Shape:
    """A model's parameter tensors (element counts) per optimizer param group, in DeepSpeed's order."""

    groups: tuple[tuple[int, ...], ...]
    largest_layer: int  # the most parameters one module owns directly
    layers: int

    @property
    def params(self) -> int:
        return sum(sum(g) for g in self.groups)

    @property
    def tensors(self) -> int:
        return sum(len(g) for g in self.groups)

    @property
    def largest_tensor(self) -> int:
        return max(n for g in self.groups for n in g)


def linear(layers: int, width: int, param_groups: int) -> Shape:
    """Linear(width, width) x layers: weight then bias per layer; layer k in group k mod param_groups."""
    per_layer = (width * width, width)
    groups = tuple(tuple(n for _layer in range(g, layers, param_groups) for n in per_layer)
                   for g in range(param_groups))
    return Shape(groups, width * width + width, layers)


def transformers(hf: dict[str, object], label: str, layers: int) -> Shape:
    """A transformers model of `layers` decoder layers, built on the meta device (or as it was built before:
    config/shapecache.py)."""
    question = {"hf": hf, "layers": layers}
    kept = shapecache.get("shape", question)
    if isinstance(kept, dict) and isinstance(kept.get("numels"), list) and isinstance(kept.get("largest"), int):
        return Shape((tuple(kept["numels"]),), kept["largest"], layers)
    model = hfconfig.meta_model(hfconfig.build_config(hf, label, layers))
    numels = tuple(p.numel() for p in model.parameters())  # unique: a tied weight once
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    shapecache.put("shape", question, {"numels": list(numels), "largest": largest})
    return Shape((numels,), largest, layers)


def of(scen: Scenario, label: str = "") -> Shape:
    """The shape of the model `scen` trains (its resolved layer count)."""
    m: Model = scen.model
    if m.kind == "linear":
        return linear(m.n_layers, m.width, m.param_groups)
    if m.kind == "transformers":
        return transformers(dict(m.hf or {}), label or scen.name, m.n_layers)
    raise UserError(f"{label or scen.name}: a script's model is its own; rssprobe cannot size it before it runs")


def layer_params(scen: Scenario) -> tuple[int, int]:
    """(parameters of one layer, parameters outside the layers) of the scenario's architecture."""
    m = scen.model
    if m.kind == "linear":
        return m.width * m.width + m.width, 0
    hf = dict(m.hf or {})
    kept = shapecache.get("layer_params", hf)
    if isinstance(kept, list) and len(kept) == 2 and all(isinstance(n, int) for n in kept):
        return kept[0], kept[1]
    first = hfconfig.leading_layers(hfconfig.build_config(hf, scen.name)) + 1  # a repeating layer's size
    one, two = (transformers(hf, scen.name, n).params for n in (first, first + 1))
    shapecache.put("layer_params", hf, [two - one, one - first * (two - one)])
    return two - one, one - first * (two - one)


def recorded(model: dict[str, object], layers: int | None, label: str, groups: object = None,
             largest_layer: object = None) -> Shape:
    """The shape of a run's model: the tensors its model event recorded (a script's), else rebuilt from its
    manifest's scenario `model` table and the layer count it ran with."""
    if groups is not None:
        if not (isinstance(groups, list) and groups and all(isinstance(g, list) and g for g in groups)
                and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for g in groups for n in g)
                and isinstance(largest_layer, int) and largest_layer > 0):
            raise UserError(f"{label}: its model event's shape_groups is not lists of positive tensor sizes")
        return Shape(tuple(tuple(g) for g in groups), largest_layer, layers if isinstance(layers, int) else 0)
    if model.get("kind", "linear") == "transformers" and isinstance(hf := model.get("hf"), dict) and layers:
        return transformers(dict(hf), label, layers)
    width, groups = model.get("width"), model.get("param_groups") or 1
    if model.get("kind", "linear") != "linear" or not isinstance(width, int) or not isinstance(layers, int):
        raise UserError(f"{label}: its model's shape is not recorded (kind {model.get('kind')!r}"
                        + (": a script run made before script runs recorded their tensors; rerun it"
                           if model.get("kind") == "script" else "") + ")")
    return linear(layers, width, int(groups))  # type: ignore[call-overload]
