"""CUDA caching-allocator and pinned-host (caching host allocator) figures, parsed from torch's own dicts.

Two documented key sets exist for `torch.cuda.host_memory_stats()` (flat keys, nested dicts joined by '.'):

* "segment" (torch 2.7 - 2.9 docs): `allocated.*` / `allocated_bytes.*` = blocks handed out to callers,
  `segment.*` / `reserved_bytes.*` = pinned blocks the allocator holds (cudaHostAlloc'ed, in use or cached).
* "active" (torch 2.10+ docs): `allocations.*` / `allocated_bytes.*` = pinned blocks the allocator owns
  (active + cached), `active_requests.*` / `active_bytes.*` = blocks checked out to callers.

The same name `allocated_bytes` thus means "in use" in one and "held" in the other; the parser names the
two figures for what they are: `in_use` (checked out) and `held` (pinned memory owned, which is host RAM
once touched). Both count the rounded block size (a power of two, pytorch #95823), never the request.
`torch.cuda.memory_stats()` has one documented key set (`allocated_bytes.all.current`, ...).
An empty dict (CUDA not initialised) parses to None: not available, never zeros.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# (schema, key that identifies it, in-use prefix, held prefix, in-use count prefix, held count prefix)
HOST_SCHEMAS = (
    ("active", "active_bytes.current", "active_bytes", "allocated_bytes", "active_requests", "allocations"),
    ("segment", "reserved_bytes.current", "allocated_bytes", "reserved_bytes", "allocated", "segment"),
)


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """torch's nested stats dict as flat 'a.b.c' keys (host_memory_stats_as_nested_dict's shape)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def device_figures(stats: Mapping[str, Any]) -> dict[str, Any] | None:
    """The CUDA caching allocator's bytes on the device (torch.cuda.memory_stats())."""
    flat = flatten(stats)
    if not flat:
        return None
    return {
        "allocated": flat.get("allocated_bytes.all.current"),
        "allocated_peak": flat.get("allocated_bytes.all.peak"),
        "reserved": flat.get("reserved_bytes.all.current"),
        "reserved_peak": flat.get("reserved_bytes.all.peak"),
        "requested": flat.get("requested_bytes.all.current"),  # the callers' sizes, before rounding
    }


def host_figures(stats: Mapping[str, Any]) -> dict[str, Any] | None:
    """The caching host allocator's pinned bytes (torch.cuda.host_memory_stats()), named by meaning."""
    flat = flatten(stats)
    if not flat:
        return None
    for schema, marker, in_use, held, in_use_n, held_n in HOST_SCHEMAS:
        if marker in flat:
            return {
                "schema": schema,
                "in_use": flat.get(f"{in_use}.current"), "in_use_peak": flat.get(f"{in_use}.peak"),
                "held": flat.get(f"{held}.current"), "held_peak": flat.get(f"{held}.peak"),
                "in_use_blocks": flat.get(f"{in_use_n}.current"), "held_blocks": flat.get(f"{held_n}.current"),
                "host_allocs": flat.get("num_host_alloc"), "host_frees": flat.get("num_host_free"),
            }
    # a key set no documentation named: keep every byte counter as given, claim no meaning
    return {"schema": "unknown", "raw": {k: v for k, v in flat.items() if "bytes" in k.lower()}}


def cuda_stats(torch_module: Any) -> dict[str, Any] | None:
    """Device and pinned-host figures, or None where CUDA is absent or not initialised."""
    cuda = torch_module.cuda
    if not cuda.is_available() or not cuda.is_initialized():
        return None
    out: dict[str, Any] = device_figures(cuda.memory_stats()) or dict.fromkeys(
        ("allocated", "allocated_peak", "reserved", "reserved_peak", "requested"))
    host_stats = getattr(cuda, "host_memory_stats", None)  # torch >= 2.7
    out["pinned_host"] = host_figures(host_stats()) if host_stats is not None else None
    return out
