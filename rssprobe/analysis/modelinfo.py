"""What a run's model was, from its events and manifest: kind, architecture, the layer count a size target
resolved to, parameter tensors, tied weights. Every per-parameter figure is per *unique* parameter: a weight
two modules share (GPT-2's wte and lm_head) is counted once, in the parameter count and in the census."""

from __future__ import annotations

from typing import Any

from ..contract.manifest import Manifest
from ..contract.status import Status


def _of(value: Any, kind: type | tuple[type, ...], default: Any = None) -> Any:
    """`value` if it has the type the readers expect (a damaged event's field is shown as unknown, never raised)."""
    return value if isinstance(value, kind) and not isinstance(value, bool) else default


def describe(by_kind: dict[str, list[dict[str, Any]]], manifest: Manifest) -> dict[str, Any] | None:
    model = (by_kind.get("model") or [None])[0]
    tensors = _of((model or {}).get("param_tensors"), int)
    if model is None or tensors is None:  # runs made before the model event said
        return None
    declared = _of(_of(manifest.scenario, dict, {}).get("model"), dict, {})
    tied = [g for g in _of(model.get("tied"), list, []) if isinstance(g, list) and all(isinstance(n, str) for n in g)]
    target = _of(declared.get("params"), (int, float))
    return {
        "kind": _of(model.get("model_kind"), str, "linear"), "architecture": _of(model.get("architecture"), str),
        "layers": _of(model.get("layers"), int), "params_target": target,
        "params": model.get("params"), "param_tensors": tensors, "tied": tied,
        # a script's trainable parameters (requires_grad); fewer than params: a fine-tune, the rest frozen
        "trainable_params": _of(model.get("trainable_params"), int),
        "tied_params": _of(model.get("tied_params"), int, 0),
        "model_type": _of(_of(declared.get("hf"), dict, {}).get("model_type"), str),
        "seq_len": _of(declared.get("seq_len"), int), "imports": _of((by_kind.get("model_imports") or [None])[0], dict),
    }


def script(by_kind: dict[str, list[dict[str, Any]]], manifest: Manifest) -> dict[str, Any] | None:
    """A script run's script (path, sha256, arguments) and how it ended: stopped after N steps as asked, or a
    step it began and never finished."""
    declared = _of(_of(manifest.scenario, dict, {}).get("script"), dict)
    if not declared:
        return None
    end = next((e for e in by_kind.get("end", []) if e.get("status") == Status.OK), {})
    return {"path": _of(declared.get("path"), str, "?"), "sha256": _of(declared.get("sha256"), str),
            "args": [a for a in _of(declared.get("args"), list, []) if isinstance(a, str)],
            "stop_after": _of(declared.get("stop_after"), int),
            # the user's own launch command (rssprobe run -- LAUNCHER ...), when it started the ranks
            "command": [a for a in _of(declared.get("command"), list, []) if isinstance(a, str)],
            "stopped": _of(end.get("stopped"), str), "unfinished_step": _of(end.get("unfinished_step"), str),
            "engines": len(by_kind.get("init", [])) + sum(1 for e in by_kind.get("inrun", [])
                                                          if e.get("name") == "reinit")}
