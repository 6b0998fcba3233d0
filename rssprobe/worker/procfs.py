"""Kernel-side memory counters of the current process, read from /proc/self.

statm is the cheapest RSS read (one small file); VmHWM with a clear_refs reset gives the
exact peak of an interval with no sampling thread; smaps_rollup splits anonymous from
file-backed memory (costlier, read once per step).

The hot reads (every instrumented call) keep their file descriptors open and use
pread at offset 0, which makes procfs regenerate the file: ~1-3 us instead of ~7-12 us
for open + read + close. Descriptors are per process (reopened after a fork).
"""

from __future__ import annotations

import os
import resource

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
_fds: dict[str, int] = {}
_pid = 0


def _fd(name: str, flags: int) -> int:
    global _pid
    if _pid != os.getpid():  # a forked child must not share the parent's /proc/self files
        _fds.clear()
        _pid = os.getpid()
    fd = _fds.get(name)
    if fd is None:
        fd = _fds[name] = os.open(f"/proc/self/{name}", flags | os.O_CLOEXEC)
    return fd


def rss_bytes() -> int:
    return int(os.pread(_fd("statm", os.O_RDONLY), 256, 0).split()[1]) * PAGE_SIZE


def _status_kb(status: bytes, key: bytes) -> int:
    start = status.find(key)
    if start < 0:
        raise RuntimeError(f"{key.decode()} missing from /proc/self/status")
    return int(status[start + len(key):status.index(b"kB", start)]) * 1024


def rss_and_hwm() -> tuple[int, int]:
    """(VmRSS, VmHWM) from one read: the current RSS and the peak since the last reset_hwm()."""
    status = os.pread(_fd("status", os.O_RDONLY), 16384, 0)
    return _status_kb(status, b"VmRSS:"), _status_kb(status, b"VmHWM:")


def locked_bytes() -> int | None:
    """VmLck: bytes of this process's pages locked in memory (mlock; DeepSpeed's native pinned backend), counted in
    whole pages by the kernel. None where the kernel does not say (a status without the line)."""
    status = os.pread(_fd("status", os.O_RDONLY), 16384, 0)
    return _status_kb(status, b"VmLck:") if b"VmLck:" in status else None


def rusage_max_rss() -> int:
    """getrusage's ru_maxrss in bytes: VmHWM (the mm's hiwater_rss, which clear_refs resets), or, on kernels
    that fold it in, the peak inherited at exec if higher; PeakTracker guards against that part.
    RUSAGE_THREAD: ~4 us in a training process, where RUSAGE_SELF (it sums every thread's CPU time, and
    torch runs one per core) took ~68 us and a /proc/self/status read ~31 us (measured, README)."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_maxrss * 1024


def reset_hwm() -> bool:
    """Reset VmHWM to the current RSS (clear_refs type 5). False where the kernel refuses."""
    try:
        os.write(_fd("clear_refs", os.O_WRONLY), b"5")
        return True
    except OSError:
        return False


SMAPS_FIELDS = {
    b"Rss:": "rss",
    b"Pss:": "pss",
    b"Pss_Anon:": "pss_anon",
    b"Pss_File:": "pss_file",
    b"Pss_Shmem:": "pss_shmem",  # shared memory (/dev/shm, memfd, shared anonymous maps): the "shared" of a load
    b"Private_Clean:": "private_clean",
    b"Private_Dirty:": "private_dirty",
    b"Anonymous:": "anonymous",
    b"Swap:": "swap",
}


def smaps_rollup() -> dict[str, int] | None:
    """Rss/Pss split and USS (private clean + dirty), in bytes; None where the file is absent."""
    try:
        with open("/proc/self/smaps_rollup", "rb") as f:
            data = f.read()
    except OSError:
        return None
    out: dict[str, int] = {}
    for line in data.splitlines():
        parts = line.split()
        if parts and parts[0] in SMAPS_FIELDS:
            out[SMAPS_FIELDS[parts[0]]] = int(parts[1]) * 1024
    out["uss"] = out.get("private_clean", 0) + out.get("private_dirty", 0)
    out["file_backed"] = out.get("rss", 0) - out.get("anonymous", 0)
    return out
