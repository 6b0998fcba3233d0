"""Facts about this machine and the project that a manifest must carry, and where caches live."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from ..config.allocators import ALLOCATORS
from ..contract.answers import VERSION_ANSWER
from ..contract.environment import SHARED_OPS_PARTS
from ..errors import UserError
from ..store.layout import ENV_OPS, cache_root, is_rssprobe_env
from .ask import ask

__all__ = ["ALLOCATORS", "allocator_library", "cache_root", "cpu_key", "cpu_model", "facts", "file_bytes",
           "find_library", "git_revision", "is_rssprobe_env", "ops_cache_dir", "package_version",
           "remove_deepspeed_shm", "shared_ops", "shared_ops_dir", "unmapped_deepspeed_shm"]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_key() -> str:
    """Compiled ops use -march=native: key the cache by CPU model and feature flags."""
    flags = ""
    try:
        flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    except OSError:
        pass
    return hashlib.sha1(f"{cpu_model()}|{flags}".encode()).hexdigest()[:10]


def ops_cache_dir(python: str, torch_version: str, deepspeed_version: str) -> Path:
    """TORCH_EXTENSIONS_DIR for one (environment, torch, DeepSpeed, CPU): compile once per machine.

    Keyed by the environment too: DeepSpeed's build files name the absolute path of its
    installed sources, so two environments sharing a directory would rebuild each other's ops.
    An rssprobe environment keeps its ops inside itself, so that the path from the build
    directory to the environment's sources is the same in every environment: the compiler
    cache (run/compilecache.py) then sees the same relative paths and reuses the compiled objects.
    Not keyed by the prefix's realpath: a venv reached through a symlink names its sources by that path, so
    one directory for both would make ninja rebuild at each switch. Any environment loads a library of the
    same build key from shared_ops_dir() instead of building it (worker/opreuse.py).
    """
    prefix = Path(python).absolute().parent.parent
    name = f"torch{torch_version}-ds{deepspeed_version}-cpu{cpu_key()}"
    if is_rssprobe_env(python):
        return prefix / ENV_OPS / name
    env = hashlib.sha1(str(prefix).encode()).hexdigest()[:8]
    return cache_root() / "torch_extensions" / f"{name}-env{env}"


def shared_ops_dir() -> Path:
    """DeepSpeed ops any environment of the same build key loads instead of compiling (worker/opreuse.py)."""
    return cache_root() / "torch_extensions" / "shared"


def shared_ops(torch_version: str, deepspeed_version: str) -> list[str]:
    """The ops kept in the shared directory for these versions (an environment loads one only when the rest of its
    build key matches too: sources, flags, compiler, CPU, Python)."""
    found = set()
    for parts_file in shared_ops_dir().glob(f"*/{SHARED_OPS_PARTS}"):
        try:
            parts = json.loads(parts_file.read_text())
            if parts["torch"][0] == torch_version and parts["deepspeed"] == deepspeed_version:
                found.add(str(parts["op"]))
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            continue  # half-written or foreign: not counted
    return sorted(found)


def package_version(name: str, python: str | None = None) -> str | None:
    """A distribution's version without importing it (importing torch costs seconds)."""
    if python is None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(name)
        except PackageNotFoundError:
            return None
    code = (f"import importlib.metadata as m, json, sys\ntry: v = m.version(sys.argv[1])\n"
            f"except m.PackageNotFoundError: v = None\nprint({VERSION_ANSWER!r} + json.dumps(v))")
    reply = ask(python, ["-c", code, name], VERSION_ANSWER)
    if not reply.ran:
        raise UserError(f"{python}: {reply.why}")
    return reply.answer if isinstance(reply.answer, str) else None  # a Python that cannot say has none of it


def git_revision() -> str | None:
    here = Path(__file__).resolve().parents[2]  # the checkout rssprobe runs from
    if not (here / ".git").exists():
        return None
    out = subprocess.run(["git", "-C", str(here), "describe", "--always", "--dirty", "--abbrev=12"],
                         capture_output=True, text=True)
    return out.stdout.strip() or None


def facts() -> dict[str, Any]:
    return {
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),  # with cpu_count and the page: how far one RSS read can be off
        "page_bytes": os.sysconf("SC_PAGE_SIZE"),
        "mem_total_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "libc": "-".join(platform.libc_ver()),
        "rssprobe_revision": git_revision(),
    }


def allocator_library(name: str) -> str | None:
    """The LD_PRELOAD path for an allocator (None for glibc); UserError naming the package if missing."""
    if name not in ALLOCATORS:
        raise UserError(f"--allocator {name}: unknown allocator (known: {', '.join(ALLOCATORS)})")
    entry = ALLOCATORS[name]
    if entry is None:
        return None
    package, filename = entry
    path = find_library(filename)
    if path is not None:
        return path
    raise UserError(f"--allocator {name}: {filename} not found; install the Debian package {package} "
                    f"(apt-get install {package})")


def _elf_kind(path: str | Path) -> tuple[int, int, int] | None:
    """(ELF class, byte order, machine) of a binary; None if it is not ELF."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    return head[4], head[5], int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")


def _ld_cache() -> list[tuple[str, str]]:
    """(soname, path) pairs of the dynamic loader's cache (`ldconfig -p`), all ABIs."""
    ldconfig = shutil.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.access(p, os.X_OK)), None)
    if ldconfig is None:
        return []
    try:
        out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    pairs = []
    for line in out.splitlines()[1:]:  # first line: "N libs found in cache ..."
        name, sep, path = line.strip().partition(" => ")
        if sep:
            pairs.append((name.split(" (", 1)[0], path.strip()))
    return pairs


def find_library(filename: str) -> str | None:
    """The path the dynamic loader would load for `filename` (a soname such as libjemalloc.so.2).

    Searched as ld.so does: LD_LIBRARY_PATH, then its cache (`ldconfig -p`), then the default
    directories; only a library of this interpreter's own ELF class and machine counts (the cache
    lists every installed ABI: an i386 or aarch64 copy must not be preloaded into an x86_64 worker).
    """
    mine = _elf_kind(os.path.realpath(sys.executable))
    multiarch = sysconfig.get_config_var("MULTIARCH") or f"{platform.machine()}-linux-gnu"
    candidates = [Path(d) / filename for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    candidates += [Path(path) for name, path in _ld_cache() if name == filename]
    candidates += [Path(d) / filename for d in (f"/lib/{multiarch}", f"/usr/lib/{multiarch}", "/lib64", "/usr/lib64",
                                                 "/lib", "/usr/lib", "/usr/local/lib")]
    for path in candidates:
        if path.is_file() and (mine is None or _elf_kind(path) == mine):
            return str(path)
    return None


SHM_DIR = Path("/dev/shm")
DEEPSPEED_SHM = "deepspeed_allreduce_buffer_*"


def unmapped_deepspeed_shm() -> list[Path]:
    """DeepSpeed shm_comm buffers in /dev/shm that no process maps any more: RAM held by nobody until removed
    or until a reboot (runs whose orchestrator was killed, or that another launcher started)."""
    found = sorted(SHM_DIR.glob(DEEPSPEED_SHM)) if SHM_DIR.is_dir() else []
    if not found:
        return []
    mapped: set[str] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            lines = maps.read_text().splitlines()
        except OSError:  # gone, or not ours to read
            continue
        mapped.update(line.split(None, 5)[-1].removesuffix(" (deleted)") for line in lines
                      if DEEPSPEED_SHM[:-1] in line)
    return [path for path in found if str(path) not in mapped]


def file_bytes(paths: list[Path]) -> int:
    """Total size of the files that still exist (a run may remove its own while they are counted)."""
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size
        except OSError:
            continue
    return total


def remove_deepspeed_shm(port: str) -> dict[str, Any]:
    """Remove the shared-memory buffers DeepSpeed's CPU shm_comm made for a run on `port` (named
    deepspeed_allreduce_buffer_<i>_<addr>_<port>_<rank>): DeepSpeed never unlinks them, so each run would leave
    one (66 MiB here) in /dev/shm, which is RAM, until the machine reboots. Only after the run's processes ended."""
    removed = {"port": int(port), "files": 0, "bytes": 0}
    for path in SHM_DIR.glob(f"{DEEPSPEED_SHM}_{port}_*"):
        try:
            size = path.stat().st_size
            path.unlink()
        except OSError:
            continue
        removed["files"] += 1
        removed["bytes"] += size
    return removed
