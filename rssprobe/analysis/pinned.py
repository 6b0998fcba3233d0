"""Pinned host memory of a run: DeepSpeed's pin requests (the worker's `pins` events) by role and site, what
torch's caching host allocator holds for them predicted by its rule (rssprobe.analysis.pinrule) under the
run's torch and PYTORCH_CUDA_ALLOC_CONF, and on CUDA what was measured.

Figures are counts, not RSS readings, so they are exact across identical runs:
`pinned.requested` (bytes of the requests alive at the end), `pinned.held_predicted` (host memory
page-locked for them at the end, predicted for CUDA) and `pinned.slack_predicted` (their difference);
on a CUDA run also `pinned.held` (the allocator's own allocated_bytes at the last step, plus what pin.register
registered and has not released) and `pinned.slack` (that minus the live pinned tensors the census found).
A CPU run has only the predicted ones: nothing is pinned there, nothing is measured as if it were. The
names are registered in analysis/metrics.py (group "pinned", exact, not gated by default: it says why).
"""

from __future__ import annotations

from typing import Any

from ..contract.environment import TORCH_ALLOC_CONF_ENV, TORCH_ALLOC_CONF_NEWER_ENV
from ..contract.interventions import PIN_REGISTER
from ..contract.manifest import Manifest
from . import fixes, pinrule
from .pinrule import Rule

INTERNAL_NOTE = ("torch's own small pinned blocks (non_blocking device-to-host copies; 3 blocks, 13 B on the "
                 "H200 tiny run) are not DeepSpeed requests and not predicted")


def alloc_conf(config: dict[str, Any], manifest: Manifest) -> str | None:
    """The alloc conf the worker's torch read: PYTORCH_ALLOC_CONF before PYTORCH_CUDA_ALLOC_CONF (torch >= 2.9
    reads the first, the second is its older name); runs without the worker's record: the scenario's."""
    env = config.get("env")
    if isinstance(env, dict) and env:
        return env.get(TORCH_ALLOC_CONF_NEWER_ENV) or env.get(TORCH_ALLOC_CONF_ENV)
    return (manifest.scenario or {}).get("torch_alloc_conf")


def request_ops(requests: list[dict[str, Any]], freed: list[dict[str, int]]) -> list[tuple[Any, ...]]:
    """Allocations and frees in the order they happened (request ids and free numbers share one counter)."""
    timeline: list[tuple[int, tuple[Any, ...]]] = [
        (r["id"], ("alloc", r["id"], r["bytes"] or 0, str(r.get("via", "torch")))) for r in requests]
    timeline += [(f["seq"], ("free", f["id"])) for f in freed]
    return [op for _seq, op in sorted(timeline, key=lambda x: x[0])]


def summarize(pin_events: list[dict[str, Any]], manifest: Manifest, last_step: dict[str, Any] | None,
              end_census: dict[str, Any] | None, params: int | None,
              base_census: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The run's pinned-memory view (None for a run made before pin requests were recorded and without CUDA
    figures). `base_census` (the pre-model one) with `end_census`: the pages mlock holds at the end above the
    baseline (VmLck), measured wherever the kernel locks them (DeepSpeed's native backend, on CPU too)."""
    measured_held = _measured_held(last_step, manifest)
    locked = _locked(end_census, base_census)
    if not pin_events and measured_held is None and not locked:
        return None
    config = next((e["config"] for e in pin_events if isinstance(e.get("config"), dict)), {})
    for key, kind in (("env", dict), ("pin_memory_effective", dict), ("entries", list)):
        if not isinstance(config.get(key), kind):  # a damaged record: what it said is not known
            config = {**config, key: None}
    requests = [r for e in pin_events for r in e["requests"]]
    freed = [f for e in pin_events for f in e["freed"]]
    gone = {f["id"] for f in freed}
    torch_version = (manifest.versions or {}).get("torch")
    conf = alloc_conf(config, manifest)
    problem = None
    try:
        rule = Rule.of(torch_version, conf)
    except ValueError as e:  # a setting a later check refuses (a run made before it): shown, never a traceback
        rule, problem = Rule.of(torch_version, None), (f"PYTORCH_CUDA_ALLOC_CONF {conf}: {e}; rssprobe cannot tell "
                                                        "what torch made of it, so nothing pinned is predicted")
    ops = request_ops(requests, freed)
    p = pinrule.predict(ops, rule)
    on_cuda = (config.get("accelerator") or manifest.accelerator) == "cuda"

    def per_param(n: float | None) -> float | None:
        return None if n is None or not params else n / params

    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for r in requests:
        key = (r.get("role") or ("(freed before it was read)" if r["id"] in gone else "(no census role)"), r["site"])
        function = str(r.get("function") or r["site"]).replace("<locals>.", "")
        where = f"{'.'.join(function.split('.')[-2:])}:{r['line']}"
        row = rows.setdefault(key, {"role": key[0], "site": key[1], "where": where, "entry": r["entry"], "requests": 0,
                                    "requested": 0, "held_predicted": 0, "reused": 0, "freed": 0,
                                    "held_measured": 0 if on_cuda else None, "via": r.get("via", "torch")})
        row["requests"] += 1
        row["requested"] += r["bytes"] or 0
        row["held_predicted"] += p.new.get(r["id"], 0)
        row["reused"] += r["id"] in p.reused
        row["freed"] += r["id"] in gone
        if on_cuda:
            block = r.get("block")
            row["held_measured"] += block["bytes"] if isinstance(block, dict) and isinstance(block.get("bytes"), int) \
                else 0
    out_rows = sorted(rows.values(), key=lambda row: -row["requested"])
    for row in out_rows:
        for k in ("requested", "held_predicted", "held_measured"):
            row[f"{k}_bytes_per_param"] = per_param(row[k])
        row["slack_predicted_bytes_per_param"] = per_param(row["held_predicted"] - row["requested"])
    live = sum(r["bytes"] or 0 for r in requests if r["id"] not in gone)
    pinned_tensors = (end_census or {}).get("pinned") if on_cuda else None
    totals = {
        "requests": len(requests), "freed": len(gone), "alive": len(requests) - len(gone), "requested_live": live,
        "held_predicted": p.pinned,
        "allocator_held_predicted": p.held, "reserve_segment": p.segment, "exact_size": p.exact,
        "held_measured": measured_held, "pinned_tensors_measured": pinned_tensors, "locked_measured": locked,
    }
    totals.update({f"{k}_bytes_per_param": per_param(v) for k, v in list(totals.items())
                   if k not in ("requests", "freed", "alive")})
    totals["slack_predicted_bytes_per_param"] = per_param(p.pinned - live)
    totals["slack_measured_bytes_per_param"] = None if measured_held is None or pinned_tensors is None \
        else per_param(measured_held - pinned_tensors)
    scenario = manifest.scenario or {}
    zero = scenario.get("zero") or {}
    # a script's own DeepSpeed config decides pin_memory; rssprobe's scenario says nothing of it
    told = "script" if scenario.get("script") else zero.get("pin_memory", True) if zero else None
    return {
        "torch": torch_version, "alloc_conf": conf, "on_cuda": on_cuda, "recorded": bool(pin_events),
        "rule": {"round_threshold": rule.round_threshold, "max_cached": rule.max_cached,
                 "host_register": rule.host_register, "reserve_segment": rule.reserve_segment,
                 "reuse_checks_size": rule.reuse_checks_size},
        "pin_memory": {"scenario": told,
                       "effective": config.get("pin_memory_effective")},
        "ds_pin_backend": (config["env"] or {}).get("DS_PIN_MEMORY_BACKEND"),
        "entries": config.get("entries"), "rows": out_rows, "totals": totals, "undersized_reuse": p.undersized,
        "undersized_reuses": len(p.undersized), "via_register": any(r["via"] == "register" for r in out_rows),
        "via_native": sum(r["requests"] for r in out_rows if r["via"] == "native"),
        # the known answer of the native backend: what mlock holds is the native requests' own pages, no more
        "locked_minus_native_pages": None if locked is None else locked - p.exact,
        "not_predicted": INTERNAL_NOTE, "problem": problem,
        # every fix of rssprobe/data/fixes.toml over the same requests (predicted for CUDA), the one in use named
        "fixes": fixes.compare(ops, torch_version, conf, params, p.pinned, manifest.versions or {})
        if pin_events and not problem else [],
        "fix_in_use": fixes.of_run(list(manifest.patches or []), conf, zero.get("pin_memory")).name,
    }


def _measured_held(last_step: dict[str, Any] | None, manifest: Manifest) -> int | None:
    """CUDA only: the caching host allocator's held bytes at the last step, plus pin.register's live bytes."""
    host = ((last_step or {}).get("cuda") or {}).get("pinned_host") or {}
    if not isinstance(host, dict) or not isinstance(host.get("held"), int) or isinstance(host["held"], bool):
        return None  # not a CUDA run (or a damaged figure: not shown as measured)
    register = (manifest.effects or {}).get(PIN_REGISTER) or {}
    held = [register.get(k, 0) for k in ("registered_bytes", "unregistered_bytes")]
    return host["held"] + (held[0] - held[1] if all(isinstance(v, int) for v in held) else 0)


def _locked(end: dict[str, Any] | None, base: dict[str, Any] | None) -> int | None:
    """VmLck at the end census above the pre-model one (bytes); None where either did not read it."""
    a, b = (end or {}).get("locked"), (base or {}).get("locked")
    ok = all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (a, b))
    return a - b if ok else None  # type: ignore[operator]


def metrics(view: dict[str, Any] | None) -> dict[str, float]:
    """pinned.requested / held_predicted / slack_predicted from the requests; pinned.held / slack measured (CUDA)."""
    if not view:
        return {}
    t = view["totals"]
    out: dict[str, float | None] = {}
    if view["recorded"]:
        out["pinned.requested"] = t["requested_live_bytes_per_param"]
        if not view.get("problem"):  # no rule known: nothing predicted
            out["pinned.held_predicted"] = t["held_predicted_bytes_per_param"]
            out["pinned.slack_predicted"] = t["slack_predicted_bytes_per_param"]
    out["pinned.held"] = t["held_measured_bytes_per_param"]
    out["pinned.locked"] = t["locked_measured_bytes_per_param"]
    out["pinned.slack"] = t["slack_measured_bytes_per_param"]
    return {k: v for k, v in out.items() if v is not None}

