"""Live-tensor census: every CPU tensor storage alive in the process, summed by role.

Storages are deduplicated (views share one), roles come from DeepSpeed's own attributes
(declared in data/roles.toml), and each storage is measured twice: the bytes it allocated
and the bytes of it that are resident, read from /proc/self/pagemap. The difference
matters: DeepSpeed's gradient buckets are `torch.empty` of reduce_bucket_size elements,
mostly never touched, so allocated bytes would overstate RSS.
"""

from __future__ import annotations

import gc
import os
import warnings
from collections.abc import Iterator
from importlib import resources
from typing import Any

import tomllib

from .procfs import PAGE_SIZE

_PRESENT = 1 << 63


def load_roles() -> list[tuple[str, list[str]]]:
    text = resources.files("rssprobe.data").joinpath("roles.toml").read_text()
    return [(r["name"], list(r["paths"])) for r in tomllib.loads(text)["role"]]


def _walk(obj: Any, parts: list[str]) -> Iterator[Any]:
    if obj is None:
        return
    if not parts:
        yield obj
        return
    head, rest = parts[0], parts[1:]
    if head == "*":
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


class _Pagemap:
    """Counts resident bytes of an address range from /proc/self/pagemap."""

    def __init__(self) -> None:
        self.fd = os.open("/proc/self/pagemap", os.O_RDONLY)

    def close(self) -> None:
        os.close(self.fd)

    def resident(self, start: int, length: int) -> int:
        if length <= 0 or start == 0:
            return 0
        end = start + length
        first, last = start // PAGE_SIZE, (end - 1) // PAGE_SIZE
        data = os.pread(self.fd, (last - first + 1) * 8, first * 8)
        entries = memoryview(data).cast("Q")
        total = 0
        for i, entry in enumerate(entries):
            if entry & _PRESENT:
                page_start = (first + i) * PAGE_SIZE
                total += min(end, page_start + PAGE_SIZE) - max(start, page_start)
        return total


def take(zero_optimizer: Any, torch_module: Any) -> dict[str, Any]:
    """Role -> {allocated, resident, tensors} for all live CPU tensor storages."""
    Tensor = torch_module.Tensor
    storages: dict[tuple[int, int], str] = {}
    with warnings.catch_warnings():  # isinstance() on some deprecated torch objects warns
        warnings.simplefilter("ignore")
        tensors = [obj for obj in gc.get_objects() if isinstance(obj, Tensor)]
    for obj in tensors:
        if obj.device.type == "cpu":
            key = _storage_key(obj)
            if key is not None and key[1] > 0:
                storages.setdefault(key, "other")
    del tensors
    if zero_optimizer is not None:
        for role, paths in reversed(load_roles()):  # reversed: the first role listed wins
            for path in paths:
                for t in _walk(zero_optimizer, path.split(".")):
                    if isinstance(t, Tensor) and t.device.type == "cpu":
                        key = _storage_key(t)
                        if key is not None and key[1] > 0:
                            storages[key] = role
    roles: dict[str, dict[str, int]] = {}
    pagemap = _Pagemap()
    try:
        for (ptr, nbytes), role in storages.items():
            r = roles.setdefault(role, {"allocated": 0, "resident": 0, "storages": 0})
            r["allocated"] += nbytes
            r["resident"] += pagemap.resident(ptr, nbytes)
            r["storages"] += 1
    finally:
        pagemap.close()
    return {
        "roles": roles,
        "allocated": sum(r["allocated"] for r in roles.values()),
        "resident": sum(r["resident"] for r in roles.values()),
    }
