"""Kernel-side memory counters of the current process, read from /proc/self.

statm is the cheapest RSS read (one small file); VmHWM with a clear_refs reset gives the
exact peak of an interval with no sampling thread; smaps_rollup splits anonymous from
file-backed memory (costlier, read once per step).
"""

from __future__ import annotations

import os

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * PAGE_SIZE


def hwm_bytes() -> int:
    """VmHWM: the peak RSS since process start or since the last reset_hwm()."""
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmHWM missing from /proc/self/status")


def reset_hwm() -> bool:
    """Reset VmHWM to the current RSS (clear_refs type 5). False where the kernel refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


SMAPS_FIELDS = {
    b"Rss:": "rss",
    b"Pss:": "pss",
    b"Pss_Anon:": "pss_anon",
    b"Pss_File:": "pss_file",
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
