"""Census roles (declared in data/roles.toml) and memory-map parts with the metric key each is gated by.

Part of the contract (rssprobe/contract/__init__.py): stdlib only."""

import tomllib
from importlib import resources
from typing import Any

# ---- census roles (declared in data/roles.toml) -----------------------------------------------------------

def _roles_file(stage: int | None) -> list[dict[str, Any]]:
    roles = tomllib.loads(resources.files("rssprobe.data").joinpath("roles.toml").read_text())["role"]
    return [r for r in roles if stage is None or stage in r["stages"]]


def roles(stage: int | None) -> list[tuple[str, list[str]]]:
    """(name, attribute paths) of one ZeRO stage's roles in priority order (every stage's when None)."""
    return [(r["name"], list(r["paths"])) for r in _roles_file(stage)]


def role_names(stage: int | None = None) -> list[str]:
    """Each role name once, in declaration order (every stage's when `stage` is None)."""
    return list(dict.fromkeys(name for name, _paths in roles(stage)))


def partitioned_roles(stage: int | None = None) -> frozenset[str]:
    """The roles ZeRO splits across data-parallel ranks; a name means the same at every stage it is declared for."""
    return frozenset(r["name"] for r in _roles_file(stage) if r.get("partitioned"))


# ---- memory-map parts: the worker's labels, and the metric key each is gated by ---------------------------

TENSORS = "live tensors"
GLIBC_IN_USE = "glibc in use, not tensors"
GLIBC_FREE = "glibc free, resident"
GLIBC_UNWALKED = "glibc heap, not walked"
PYMALLOC = "python objects (pymalloc pools)"
STACKS = "thread stacks"
ANON_OTHER = "anonymous, other"
SHARED = "shared memory"
# CUDA's pinned host blocks are shared anonymous mappings (/dev/zero, seen on an H200 with torch 2.11): a block
# holding a pinned tensor is named apart, and what of it no tensor uses is the caching host allocator's rounding
# to a power of two and its cached blocks (reports/gpu-check.md: 10 B/param with ZeRO-2 offload)
PINNED_SLACK = "pinned host blocks, not tensors"
FILE_TORCH_CPU = "file: libtorch_cpu.so"
FILE_TORCH = "file: other torch libraries"
FILE_OPS = "file: deepspeed ops"
FILE_PYTHON = "file: python"
FILE_OTHER = "file: other files"
# a checkpoint's weights mapped from disk (safetensors maps its files; torch.load(mmap=True) a .bin): page cache
# the process shares with the kernel, not memory it allocated, and a load's own part
FILE_CHECKPOINT = "file: checkpoint weights (mapped)"
# label -> metric name; the keys are stable (users' gates and ceilings name them), whatever the labels become
PART_KEYS: dict[str, str] = {
    TENSORS: "part.live_tensors",
    GLIBC_IN_USE: "part.glibc_in_use_not_tensors",
    GLIBC_FREE: "part.glibc_free_resident",
    GLIBC_UNWALKED: "part.glibc_heap_not_walked",
    PYMALLOC: "part.python_objects_pymalloc_pools",
    STACKS: "part.thread_stacks",
    ANON_OTHER: "part.anonymous_other",
    SHARED: "part.shared_memory",
    PINNED_SLACK: "part.pinned_host_blocks_not_tensors",
    FILE_TORCH_CPU: "part.file_libtorch_cpu_so",
    FILE_TORCH: "part.file_other_torch_libraries",
    FILE_OPS: "part.file_deepspeed_ops",
    FILE_PYTHON: "part.file_python",
    FILE_OTHER: "part.file_other_files",
    FILE_CHECKPOINT: "part.file_checkpoint_weights_mapped",
}
PARTS = tuple(PART_KEYS)
