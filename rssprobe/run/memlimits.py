"""The memory this machine gives a job: its RAM (MemTotal), the cgroup's limit on this process's group, and the
limit on locked memory per process (`ulimit -l`, RLIMIT_MEMLOCK), read where `estimate` answers for this machine.

cgroup v2 (memory.max of this process's cgroup, and of its ancestors: the tightest wins) and v1
(memory.limit_in_bytes) are read; "max", an absent file or an unreadable one means no limit there. Nothing is
written.
"""

from __future__ import annotations

import resource
from pathlib import Path

PROC = Path("/proc")
CGROUP = Path("/sys/fs/cgroup")


def mem_total(proc: Path = PROC) -> int | None:
    """MemTotal of /proc/meminfo in bytes (None when it cannot be read)."""
    try:
        for line in (proc / "meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _number(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() and int(text) < 2**62 else None  # v1 says "no limit" with ~2^63


def cgroup_limit(proc: Path = PROC, root: Path = CGROUP) -> int | None:
    """The tightest memory limit of this process's cgroup and its ancestors (None: none set)."""
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        _hid, controllers, path = [*line.split(":", 2), "", ""][:3]
        rel = Path(path.lstrip("/"))
        if controllers == "":  # v2: memory.max along the path
            for part in [rel, *rel.parents]:
                limits.append(_number(root / part / "memory.max"))
        elif "memory" in controllers.split(","):
            limits.append(_number(root / "memory" / rel / "memory.limit_in_bytes"))
    found = [n for n in limits if n is not None]
    return min(found) if found else None


def node_ram() -> tuple[int | None, str]:
    """This machine's RAM for a job: the smaller of MemTotal and the cgroup limit, and where it comes from."""
    total, limit = mem_total(), cgroup_limit()
    if limit is not None and (total is None or limit < total):
        return limit, "this machine's cgroup limit"
    return total, "this machine's MemTotal"


def lock_limit() -> int | None:
    """RLIMIT_MEMLOCK's soft limit in bytes (None: unlimited)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return None if soft == resource.RLIM_INFINITY else soft
