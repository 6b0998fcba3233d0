"""What this machine can measure, and what it cannot: one (probe, works, detail) row each."""

from __future__ import annotations

import importlib.util
import shutil
import sys

from . import host
from .worker import glibc, procfs


def checks() -> list[tuple[str, bool, str]]:
    out: list[tuple[str, bool, str]] = []
    out.append(("RSS (/proc/self/statm)", True, f"{procfs.rss_bytes() / 2**20:.0f} MiB now"))
    smaps = procfs.smaps_rollup()
    out.append(("USS/PSS, anon/file (/proc/self/smaps_rollup)", smaps is not None, "" if smaps else "file missing"))
    resets = procfs.reset_hwm()
    out.append(("exact peak (clear_refs 5 + VmHWM)", resets, "reset works" if resets else "kernel refused the reset"))
    out.append(("glibc mallinfo2 / malloc_trim", glibc.STATUS.available,
                f"glibc {glibc.STATUS.version}: {glibc.STATUS.reason}"))
    for name in ("jemalloc", "tcmalloc"):
        try:
            path = host.allocator_library(name)
            out.append((f"--allocator {name}", True, str(path)))
        except Exception as e:
            out.append((f"--allocator {name}", False, str(e).split(": ", 1)[-1]))
    torch_v, ds_v = host.package_version("torch"), host.package_version("deepspeed")
    out.append(("torch", torch_v is not None, torch_v or "not installed"))
    out.append(("deepspeed", ds_v is not None, ds_v or "not installed"))
    out.append(("ninja + g++ (JIT-compiled DeepSpeed ops)", bool(shutil.which("ninja") and shutil.which("g++")),
                f"ninja {shutil.which('ninja') or 'missing'}, g++ {shutil.which('g++') or 'missing'}"))
    if torch_v and ds_v:
        cache = host.ops_cache_dir(sys.executable, torch_v, ds_v)
        built = sorted(p.parent.name for p in cache.glob("*/*.so")) if cache.is_dir() else []
        out.append(("compiled ops cache", bool(built), f"{cache}: {', '.join(built) or 'empty (first run compiles)'}"))
        import torch

        cuda = torch.cuda.is_available()
        out.append(("CUDA allocator + pinned host stats", cuda,
                    f"{torch.cuda.get_device_name(0)}" if cuda else "not available: no CUDA device; GPU figures "
                    "are not measured on this machine"))
    out.append(("memray (--memray native view)", importlib.util.find_spec("memray") is not None, ""))
    left = host.unmapped_deepspeed_shm()
    held = host.file_bytes(left)
    out.append(("no DeepSpeed buffers left in /dev/shm (RAM)", not left,
                f"{len(left)} that no process maps hold {held / 2**20:.0f} MiB of RAM until removed "
                f"(e.g. {left[0]})" if left else "none"))
    return out
