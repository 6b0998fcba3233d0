"""Facts about this machine and the project that a manifest must carry, and where caches live."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

from .errors import UserError
from .layout import cache_root


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
    """
    prefix = str(Path(python).absolute().parent.parent)
    env = hashlib.sha1(prefix.encode()).hexdigest()[:8]
    return cache_root() / "torch_extensions" / f"torch{torch_version}-ds{deepspeed_version}-cpu{cpu_key()}-env{env}"


def package_version(name: str, python: str | None = None) -> str | None:
    """A distribution's version without importing it (importing torch costs seconds)."""
    if python is None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(name)
        except PackageNotFoundError:
            return None
    code = ("import importlib.metadata as m, sys\ntry: print(m.version(sys.argv[1]))\n"
            "except m.PackageNotFoundError: pass")
    out = subprocess.run([python, "-c", code, name], capture_output=True, text=True)
    return out.stdout.strip() or None


def git_revision() -> str | None:
    here = Path(__file__).resolve().parent.parent
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
        "mem_total_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "libc": "-".join(platform.libc_ver()),
        "rssprobe_revision": git_revision(),
    }


# Allocators rssprobe can preload into the worker: name -> (Debian package, library file).
ALLOCATORS: dict[str, tuple[str, str] | None] = {
    "glibc": None,
    "jemalloc": ("libjemalloc2", "libjemalloc.so.2"),
    "tcmalloc": ("libtcmalloc-minimal4", "libtcmalloc_minimal.so.4"),
}


def allocator_library(name: str) -> str | None:
    """The LD_PRELOAD path for an allocator (None for glibc); UserError naming the package if missing."""
    if name not in ALLOCATORS:
        raise UserError(f"--allocator {name}: unknown allocator (known: {', '.join(ALLOCATORS)})")
    entry = ALLOCATORS[name]
    if entry is None:
        return None
    package, filename = entry
    multiarch = sysconfig.get_config_var("MULTIARCH") or f"{platform.machine()}-linux-gnu"
    for directory in (f"/usr/lib/{multiarch}", "/usr/lib", "/usr/local/lib"):
        path = Path(directory) / filename
        if path.exists():
            return str(path)
    raise UserError(f"--allocator {name}: {filename} not found; install the Debian package {package} "
                    f"(apt-get install {package})")
