"""Live-tensor census: every CPU tensor storage alive in the process, summed by role.

Storages are deduplicated (views share one), roles come from DeepSpeed's own attributes
(declared in data/roles.toml, read by rssprobe.contract.roles), and each storage is measured twice:
the bytes it allocated and the bytes of it that are resident, read from /proc/self/pagemap. The difference
matters: DeepSpeed's gradient buckets are `torch.empty` of reduce_bucket_size elements,
mostly never touched, so allocated bytes would overstate RSS. Residency is judged by the
memory-map partition's reader (memmap.Reader), so both count a tensor's bytes alike.

Host storages are also split pinned vs pageable (`is_pinned()`: page-locked through CUDA's host
allocator; always pageable on the CPU accelerator, where pinning is a no-op). Tensors on a device
(CUDA) are counted by role apart, bytes allocated only, and never enter the host figures.
"""

from __future__ import annotations

import bisect
import gc
import sys
import warnings
from collections.abc import Iterator
from typing import Any

from ..contract.names import roles as load_roles
from .memmap import Reader, checkpoint_ranges

# tensors whose storage lies in a mapped checkpoint file (a model loaded from safetensors uses its weights in place
# until something copies them): their resident pages are page cache of that file, not memory the process made
CHECKPOINT_ROLE = "checkpoint_mapped"
# a path step in roles.toml that walks a module's frozen parameters (requires_grad False)
FROZEN = "@frozen"
# a path's first step in roles.toml: the engine's module rather than the ZeRO optimizer (ZeRO-1/2's optimizer keeps
# no reference to it, and a fine-tune's frozen weights are in no optimizer group)
MODULE = "@module"


def _walk(obj: Any, parts: list[str]) -> Iterator[Any]:
    if obj is None:
        return
    if not parts:
        yield obj
        return
    head, rest = parts[0], parts[1:]
    if head == FROZEN:  # a module's parameters that nothing trains (a fine-tune's frozen base)
        params = getattr(obj, "parameters", None)
        for p in params() if callable(params) else ():
            if not getattr(p, "requires_grad", True):
                yield from _walk(p, rest)
    elif head == "*":
        items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
        for item in items:
            yield from _walk(item, rest)
    elif isinstance(obj, dict) and head in obj:
        yield from _walk(obj[head], rest)
    else:
        yield from _walk(getattr(obj, head, None), rest)


def _storage_key(t: Any) -> tuple[int, int] | None:
    try:
        s = t.untyped_storage()
        return (s.data_ptr(), s.nbytes())
    except (RuntimeError, NotImplementedError):
        return None  # meta/sparse tensors have no host storage


def _pinned(t: Any) -> bool:
    """Page-locked? Asked of torch each time (on the CPU accelerator it answers False: pinning is a no-op)."""
    try:
        with warnings.catch_warnings():  # some torch builds warn when no accelerator can be asked
            warnings.simplefilter("ignore")
            return bool(t.is_pinned())
    except RuntimeError:
        return False


def role_tensors(zero_optimizer: Any, tensor_type: type, stage: int,
                 module: Any = None) -> Iterator[tuple[str, Any, tuple[int, int]]]:
    """(role, tensor, storage key) for every tensor the declared roles reach from the ZeRO optimizer (or, for a
    path starting at @module, from the engine's module), the last role listed first, so that a caller keeping the
    last role it sees for a storage keeps the first listed."""
    if zero_optimizer is None:
        return
    for role, paths in reversed(load_roles(stage)):
        for path in paths:
            steps = path.split(".")
            root = zero_optimizer
            if steps[0] == MODULE:
                root, steps = module, steps[1:]
            for t in _walk(root, steps):
                if isinstance(t, tensor_type):
                    key = _storage_key(t)
                    if key is not None and key[1] > 0:
                        yield role, t, key


def take(zero_optimizer: Any, torch_module: Any, stage: int,
         module: Any = None) -> tuple[dict[str, Any], list[tuple[int, int]], list[tuple[int, int]]]:
    """Role -> {allocated, resident, pinned, storages} for all live CPU tensor storages, device storages by
    role apart, and the host storages' (data_ptr, nbytes), all and pinned, which the memory-map partition needs."""
    Tensor = torch_module.Tensor
    storages: dict[tuple[int, int], str] = {}
    pinned: set[tuple[int, int]] = set()
    on_device: dict[tuple[str, int, int], str] = {}
    with warnings.catch_warnings():  # isinstance() on some deprecated torch objects warns
        warnings.simplefilter("ignore")
        tracked = gc.get_objects()
        tensors = [obj for obj in tracked if isinstance(obj, Tensor)]
        python_objects = len(tracked)
        del tracked
    for obj in tensors:
        key = _storage_key(obj)
        if key is None or key[1] <= 0:
            continue
        if obj.device.type == "cpu":
            if key not in storages:
                storages[key] = "other"
                if _pinned(obj):
                    pinned.add(key)
        elif obj.device.type != "meta":
            on_device.setdefault((str(obj.device), *key), "other")
    del tensors
    mapped = checkpoint_ranges()
    if mapped:
        starts = [lo for lo, _hi in mapped]
        for key in storages:
            i = bisect.bisect_right(starts, key[0]) - 1
            if i >= 0 and key[0] < mapped[i][1]:
                storages[key] = CHECKPOINT_ROLE
    for role, t, key in role_tensors(zero_optimizer, Tensor, stage, module):
        if t.device.type == "cpu":
            if key not in storages and _pinned(t):
                pinned.add(key)
            storages[key] = role
        elif t.device.type != "meta":
            on_device[(str(t.device), *key)] = role
    roles: dict[str, dict[str, int]] = {}
    reader = Reader()
    try:  # in address order, so that neighbours share the reader's window of pagemap
        resident = {key: reader.resident(key[0], key[0] + key[1]) if key[0] else 0 for key in sorted(storages)}
    finally:
        reader.close()
    for (ptr, nbytes), role in storages.items():
        r = roles.setdefault(role, {"allocated": 0, "resident": 0, "pinned": 0, "storages": 0})
        r["allocated"] += nbytes
        r["resident"] += resident[(ptr, nbytes)]
        r["pinned"] += nbytes if (ptr, nbytes) in pinned else 0
        r["storages"] += 1
    out = {
        "python_objects": python_objects,  # gc-tracked objects: what the pymalloc part is made of
        "python_modules": len(sys.modules),
        "roles": roles,
        "allocated": sum(r["allocated"] for r in roles.values()),
        "resident": sum(r["resident"] for r in roles.values()),
        "pinned": sum(r["pinned"] for r in roles.values()),  # host bytes page-locked (0 on the CPU accelerator)
        "device": _device_roles(on_device) if on_device or torch_module.cuda.is_available() else None,
    }
    return out, list(storages), sorted(pinned)


# Packages whose subpackages are named apart when imports are counted (torch._inductor, not torch).
SPLIT_PACKAGES = frozenset({"torch", "deepspeed"})


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] in SPLIT_PACKAGES else parts[0]


def imported_since(seen: set[str], top: int = 12) -> dict[str, int]:
    """Modules imported since `seen` (which is updated), counted by top-level package (torch's and DeepSpeed's
    by subpackage), the largest first and the rest summed as "other"; "total" is their number. A library that
    imports hundreds of modules during initialize (DeepSpeed 0.19.8 pulls in torch._inductor, sympy and
    networkx there) adds a fixed cost in python objects and glibc in use that no parameter count explains."""
    new = set(sys.modules) - seen
    seen.update(new)
    counts: dict[str, int] = {}
    for name in new:
        package = _package(name)
        counts[package] = counts.get(package, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    out = dict(ranked[:top])
    if len(ranked) > top:
        out["other"] = sum(n for _, n in ranked[top:])
    return {"total": len(new), **out}


def _device_roles(on_device: dict[tuple[str, int, int], str]) -> dict[str, Any]:
    """Device storages by role (bytes allocated: residency means nothing there), apart from the host."""
    roles: dict[str, dict[str, int]] = {}
    devices: set[str] = set()
    for (device, _ptr, nbytes), role in on_device.items():
        r = roles.setdefault(role, {"allocated": 0, "storages": 0})
        r["allocated"] += nbytes
        r["storages"] += 1
        devices.add(device)
    return {"devices": sorted(devices), "roles": roles, "allocated": sum(r["allocated"] for r in roles.values())}


def gathered(module: Any) -> dict[str, int] | None:
    """ZeRO-3: how many of the module's parameters are gathered (full, not released) right now, by DeepSpeed's
    own bookkeeping (ds_status AVAILABLE; the data then holds all ds_numel elements, not the empty tensor a
    released parameter keeps). Deterministic, unlike RSS. None for a module ZeRO-3 did not partition."""
    params = [p for p in module.parameters() if hasattr(p, "ds_status")]
    if not params:
        return None
    available = [p for p in params if p.ds_status.name == "AVAILABLE"]
    persistent = [p for p in available if getattr(p, "ds_persist", False)]
    return {"tensors": len(available), "params": sum(p.ds_numel for p in available),
            "persistent_tensors": len(persistent), "persistent_params": sum(p.ds_numel for p in persistent),
            "full_params": sum(p.ds_numel for p in available if p.data.numel() == p.ds_numel),
            "of_tensors": len(params), "of_params": sum(p.ds_numel for p in params)}
