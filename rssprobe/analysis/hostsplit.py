"""The budget's host/device split: pinned vs pageable host bytes, and device (CUDA) tensors by role apart.

Device bytes are never part of the host budget (RSS); they are reported beside it, per role, as bytes
allocated on the device per parameter. Pinned host bytes are page-locked through CUDA's caching host
allocator (always 0 on the CPU accelerator, where pinning is a no-op).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

NO_DEVICE = "not available: no CUDA device in this process"


def split(census: dict[str, Any], base: dict[str, Any], bpp: Callable[[float | None], float | None]) -> dict[str, Any]:
    """Budget entries above the pre-model census; None (not 0) where a census predates the split."""
    if "pinned" not in census or "pinned" not in base:
        return {"host_pinned_bytes_per_param": None, "host_pageable_bytes_per_param": None,
                "device": None, "device_note": "not recorded: this run's census predates the pinned/device split"}
    pinned = census["pinned"] - base["pinned"]
    allocated = census["allocated"] - base["allocated"]
    out: dict[str, Any] = {"host_pinned_bytes_per_param": bpp(pinned),
                           "host_pageable_bytes_per_param": bpp(allocated - pinned)}
    device, device_base = census.get("device"), base.get("device") or {"roles": {}, "allocated": 0}
    if device is None:
        out.update(device=None, device_note=NO_DEVICE)
        return out
    roles = {name: bpp(r["allocated"] - device_base["roles"].get(name, {}).get("allocated", 0))
             for name, r in device["roles"].items()}
    out["device"] = {"devices": device.get("devices"),
                     "roles": dict(sorted(roles.items(), key=lambda kv: -(kv[1] or 0))),
                     "allocated_bytes_per_param": bpp(device["allocated"] - device_base["allocated"])}
    out["device_note"] = "device tensors by role, bytes allocated on the device; not in RSS"
    return out
