"""What the launcher records of a script run (`rssprobe run --script`): the scenario before it runs holds only
what rssprobe decides; when it concludes, what the script's engine decided (ZeRO stage, offloads, precision,
micro-batch, accumulation, its DeepSpeed config: the worker's script_engine event) is written in. The script
as a run configuration is rssprobe/config/script.py; the worker side rssprobe/worker/script.py."""

from __future__ import annotations

from typing import Any

from ..contract.manifest import Manifest

# what a script's own DeepSpeed config decides: not recorded before its engine says
ENGINE_DECIDES = ("model", "optimizer", "zero", "precision", "micro_batch", "grad_accum_steps")


def recorded(resolved: dict[str, Any]) -> dict[str, Any]:
    """A script run's scenario as recorded before it runs: what rssprobe decides, not its own defaults for
    what the script decides (model, optimizer, ZeRO, precision, batch: the engine's, at conclude)."""
    keep = {k: v for k, v in resolved.items() if k not in ENGINE_DECIDES}
    return {**keep, "model": {"kind": "script"}, "zero": {}}


def amend_manifest(manifest: Manifest, events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The fields of the manifest's scenario that the script's engine decided (None when it never started)."""
    engine = next((e for e in events if e["event"] == "script_engine"), None)
    if engine is None or not isinstance(engine.get("zero"), dict) or not isinstance(manifest.scenario, dict):
        return None  # never initialized (or a damaged event, from a launch rssprobe did not control)
    scen = dict(manifest.scenario)
    scen["zero"] = dict(engine["zero"])
    scen.update({k: engine.get(k) for k in ENGINE_DECIDES[3:]})  # precision, micro_batch, grad_accum_steps
    return {"scenario": scen, "deepspeed_config": engine.get("deepspeed_config")}
