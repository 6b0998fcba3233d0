"""What this machine can measure, and what it cannot: one (probe, works, detail) row each.

The worker's own probes answer in a fresh process of the worker's Python (rssprobe.worker.selfcheck), as
they would in a run; the rest (allocators, packages, compilers, the ops cache, /dev/shm) is asked here.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from typing import Any

from ..contract.answers import SELF_CHECK_ANSWER
from ..run import environment, host
from ..run.ask import ask


def machine() -> str:
    """The machine the checks describe: its CPU and kernel."""
    return f"{host.cpu_model()} ({host.facts()['kernel']})"


def worker_check(python: str = sys.executable) -> dict[str, Any] | str:
    """The worker probes' self-check in `python` (its JSON), or why it could not run."""
    reply = ask(python, ["-m", "rssprobe.worker.selfcheck", "--torch"], SELF_CHECK_ANSWER, environment.probe(python))
    return reply.answer if isinstance(reply.answer, dict) else f"the self-check did not answer ({reply.why})"


def checks(python: str = sys.executable) -> list[tuple[str, bool, str]]:
    out: list[tuple[str, bool, str]] = []
    worker = worker_check(python)
    if isinstance(worker, str):
        out.append(("the worker's probes", False, worker))
    else:
        out.append(("RSS (/proc/self/statm)", True, f"{worker['rss_bytes'] / 2**20:.0f} MiB in a fresh worker"))
        smaps = worker["smaps_rollup"]
        out.append(("USS/PSS, anon/file (/proc/self/smaps_rollup)", smaps, "" if smaps else "file missing"))
        resets = worker["hwm_reset"]
        out.append(("exact peak (clear_refs 5 + VmHWM)", resets,
                    "reset works" if resets else "kernel refused the reset"))
        glibc = worker["glibc"]
        out.append(("glibc mallinfo2 / malloc_trim", glibc["available"],
                    f"glibc {glibc['version']}: {glibc['reason']}"))
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
        cache = host.ops_cache_dir(python, torch_v, ds_v)
        built = sorted(p.parent.name for p in cache.glob("*/*.so")) if cache.is_dir() else []
        shared = host.shared_ops(torch_v, ds_v)
        out.append(("compiled ops cache", bool(built or shared),
                    f"{cache}: {', '.join(built) or 'empty'}; shared by environments of the same versions "
                    f"({host.shared_ops_dir()}): {', '.join(shared) or 'none'}"
                    + ("" if built or shared else " (first run compiles)")))
        cuda = None if isinstance(worker, str) else worker["cuda"]
        if cuda is not None:
            out.append(("CUDA allocator + pinned host stats", cuda["available"],
                        cuda["device"] if cuda["available"] else "not available: no CUDA device; GPU figures "
                        "are not measured on this machine"))
    out.append(("memray (--memray native view)", importlib.util.find_spec("memray") is not None, ""))
    left = host.unmapped_deepspeed_shm()
    held = host.file_bytes(left)
    out.append(("no DeepSpeed buffers left in /dev/shm (RAM)", not left,
                f"{len(left)} that no process maps hold {held / 2**20:.0f} MiB of RAM until removed "
                f"(e.g. {left[0]})" if left else "none"))
    return out
