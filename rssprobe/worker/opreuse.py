"""DeepSpeed's CPU ops built once and loaded by every environment that would build the very same library.

Each environment has its own TORCH_EXTENSIONS_DIR (run/host.ops_cache_dir): DeepSpeed's build files name the
absolute path of its installed sources, so environments sharing one build directory would make ninja rebuild
each other's ops (and a symlinked venv is another path). Without this module every new environment, or the
same venv reached through another path, compiled cpu_adam and deepspeed_shm_comm again (~2-4 minutes of CPU).

Here an op's library is also kept in a shared directory (RSSPROBE_SHARED_OPS), under a key of everything the
build depends on: the op's name, the contents of its sources and of every file under its include directories,
its compile and link flags as DeepSpeed computes them here (-march=native, SIMD width), the compiler's
`--version`, the CPU (model and flags), the C library, Python's version and ABI, torch's version, git revision
and C++ ABI, DeepSpeed's version. An environment whose key matches imports that library directly (as torch's own loader
does) and registers it as DeepSpeed's loaded op, so neither torch's JIT build nor ninja nor a compiler runs;
any difference in any part is another key, and the op is built as before (then kept under its own key). The
parts are stored beside the library and compared whole, so a key is never trusted on its hash alone.

CPU op builders only (the CPU accelerator's); a CUDA build, or a builder whose parts cannot be read, builds as
before. Loaded in the worker (and by run/opbuild's ahead-of-time build); torch and DeepSpeed are imported by the
caller.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..contract.environment import SHARED_OPS_ENV
from ..contract.environment import SHARED_OPS_PARTS as PARTS


def _cpu() -> str:
    """The CPU model and feature flags (-march=native builds for this CPU)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return "unknown"
    model = next((line for line in lines if line.startswith("model name")), "")
    flags = next((line for line in lines if line.startswith("flags")), "")
    return hashlib.sha1(f"{model}|{flags}".encode()).hexdigest()


def files_digest(paths: list[str]) -> str:
    """One digest of the files' contents (directories: every file under them, by relative name)."""
    h = hashlib.sha256()
    for path in paths:
        p = Path(path)
        if not p.exists():  # an include directory DeepSpeed names but does not ship: the compiler skips it too
            h.update(f"missing:{p.name}\0".encode())
            continue
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        for f in files:
            h.update(str(f.relative_to(p) if p.is_dir() else f.name).encode() + b"\0")
            h.update(f.read_bytes())
            h.update(b"\0")
    return h.hexdigest()


def compiler() -> str:
    """What `--version` says of the compiler torch's builder would run ($CXX, else c++)."""
    cxx = os.environ.get("CXX") or "c++"
    exe = shutil.which(cxx)
    if exe is None:
        return f"{cxx}: not found"
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


def key_parts(builder: Any) -> dict[str, Any]:
    """Everything the op's library depends on, as DeepSpeed's jit_load would build it in this process (its flags
    asked in jit mode, as jit_load does). Only the CPU builders: a CUDA builder's build also depends on the GPU
    architectures and nvcc (not keyed here), so it builds as before."""
    import deepspeed
    import torch

    sources = [os.path.abspath(builder.deepspeed_src_path(p)) for p in builder.strip_empty_entries(builder.sources())]
    includes = [os.path.abspath(builder.deepspeed_src_path(p))
                for p in builder.strip_empty_entries(builder.include_paths())]
    saved, builder.jit_mode = builder.jit_mode, True
    try:
        cxx_args = [*builder.strip_empty_entries(builder.cxx_args()), "-UC10_USE_GLOG"]
        ldflags = builder.strip_empty_entries(builder.extra_ldflags())
    finally:
        builder.jit_mode = saved
    return {
        "op": builder.name,
        "sources": files_digest(sources),
        "includes": files_digest(includes),
        "cxx_args": cxx_args,
        "ldflags": ldflags,
        "compiler": compiler(),
        "cpu": _cpu(),
        "libc": "-".join(platform.libc_ver()),
        "python": f"{sys.implementation.cache_tag}{sys.abiflags}",
        "torch": [torch.__version__, str(torch.version.git_version), str(torch.compiled_with_cxx11_abi())],
        "deepspeed": deepspeed.__version__,
    }


def shareable(builder: Any) -> bool:
    """A CPU builder: a CUDA one's build also depends on the GPU architectures and nvcc, not keyed here."""
    return not any(c.__name__ == "CUDAOpBuilder" for c in type(builder).__mro__)


def key(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def shared_root() -> Path | None:
    """The shared directory of built ops; None when reuse is off (the variable unset or empty)."""
    value = os.environ.get(SHARED_OPS_ENV, "")
    return Path(value) if value else None


def find(root: Path, parts: dict[str, Any]) -> Path | None:
    """The library built with exactly these parts, or None (then the op is built)."""
    where = root / key(parts)
    library = where / f"{parts['op']}.so"
    try:
        stored = json.loads((where / PARTS).read_text())
    except (OSError, ValueError):
        return None
    return library if stored == parts and library.is_file() else None


def keep(root: Path, parts: dict[str, Any], built: Path) -> Path | None:
    """Copy a library just built (and loaded) with these parts under their key; atomic, first writer wins."""
    where = root / key(parts)
    library = where / f"{parts['op']}.so"
    if find(root, parts) is not None or not built.is_file():
        return None
    try:
        where.mkdir(parents=True, exist_ok=True)
        tmp = where / f".{library.name}.{os.getpid()}"
        shutil.copy2(built, tmp)
        tmp.replace(library)
        tmp_parts = where / f".{PARTS}.{os.getpid()}"
        tmp_parts.write_text(json.dumps(parts, sort_keys=True, indent=1))
        tmp_parts.replace(where / PARTS)  # last: a reader trusts the library only once its parts are there
    except OSError:
        return None
    return library


def _register(builder: Any, module: Any) -> bool:
    """Make `module` DeepSpeed's loaded op for this builder (its OpBuilder._loaded_ops); True when load() says so."""
    owner = next((c for c in type(builder).__mro__ if "_loaded_ops" in vars(c)), None)
    if owner is None:
        return False
    owner._loaded_ops[builder.name] = module
    if builder.load() is module:
        return True
    owner._loaded_ops.pop(builder.name, None)
    return False


def _import(library: Path, name: str) -> Any:
    """Import a built op as torch's cpp_extension does (_import_module_from_library)."""
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {library}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def built_here(name: str) -> Path:
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR", "")) / name / f"{name}.so"


def load(builder: Any, on_compile: Callable[[str], None] | None = None) -> str:
    """Load the builder's op: 'reused' (a library of the same key, no build), 'loaded' (this environment's own,
    built or found by torch's builder, then kept for others) or 'already' (loaded before in this process)."""
    owner = next((c for c in type(builder).__mro__ if "_loaded_ops" in vars(c)), None)
    if owner is not None and builder.name in owner._loaded_ops:
        return "already"
    root = shared_root() if shareable(builder) else None
    parts = None
    if root is not None:
        try:
            parts = key_parts(builder)
        except Exception as e:  # a builder this module cannot read builds as before
            print(f"rssprobe: {builder.name}: not shared ({type(e).__name__}: {e})", file=sys.stderr)
        if parts is not None and (library := find(root, parts)) is not None:
            try:
                if _register(builder, _import(library, builder.name)):
                    print(f"rssprobe: {builder.name} reused from {library} (same sources, flags, compiler, "
                          "torch and DeepSpeed: not compiled)", file=sys.stderr, flush=True)
                    return "reused"
            except Exception as e:  # a library that does not import or register: built instead
                print(f"rssprobe: {library} did not load ({type(e).__name__}: {e}); building", file=sys.stderr)
    if on_compile is not None and not built_here(builder.name).is_file():
        on_compile(builder.name)
    builder.load()
    if root is not None and parts is not None:
        keep(root, parts, built_here(builder.name))
    return "loaded"
