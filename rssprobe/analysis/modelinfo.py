"""What a run's model was, from its events and manifest: kind, architecture, the layer count a size target
resolved to, parameter tensors, tied weights. Every per-parameter figure is per *unique* parameter: a weight
two modules share (GPT-2's wte and lm_head) is counted once, in the parameter count and in the census."""

from __future__ import annotations

from typing import Any


def describe(by_kind: dict[str, list[dict[str, Any]]], manifest: dict[str, Any]) -> dict[str, Any] | None:
    model = (by_kind.get("model") or [None])[0]
    if model is None or "param_tensors" not in model:  # runs made before the model event said
        return None
    declared = (manifest.get("scenario") or {}).get("model") or {}
    imports = (by_kind.get("model_imports") or [None])[0]
    return {
        "kind": model.get("model_kind", "linear"), "architecture": model.get("architecture"),
        "layers": model.get("layers"), "params_target": declared.get("params"),
        "params": model.get("params"), "param_tensors": model["param_tensors"],
        "tied": model.get("tied") or [], "tied_params": model.get("tied_params") or 0,
        "model_type": (declared.get("hf") or {}).get("model_type"), "seq_len": declared.get("seq_len"),
        "imports": imports,
    }


def script(by_kind: dict[str, list[dict[str, Any]]], manifest: dict[str, Any]) -> dict[str, Any] | None:
    """A script run's script (path, sha256, arguments) and how it ended: stopped after N steps as asked, or a
    step it began and never finished."""
    declared = (manifest.get("scenario") or {}).get("script")
    if not declared:
        return None
    end = next((e for e in by_kind.get("end", []) if e.get("status") == "ok"), {})
    return {**declared, "stopped": end.get("stopped"), "unfinished_step": end.get("unfinished_step"),
            "engines": len(by_kind.get("init", [])) + sum(1 for e in by_kind.get("inrun", [])
                                                          if e.get("name") == "reinit")}
