"""ccache behind torch's extension builder, so a new environment reuses compiled DeepSpeed ops.

Every new environment JIT-compiles the same C++ ops (cpu_adam ~68 s, shm_comm ~48 s here)
although their sources rarely change between DeepSpeed releases. torch's cpp_extension takes
its compiler from $CXX, and accepts a wrapper that answers `-v` like g++; ccache invoked through
a symlink named c++ is such a wrapper (it runs the next c++ on PATH that is not itself).

What makes the hits possible across environments: host.ops_cache_dir puts an environment's
build directory inside the environment, so the paths from the build directory (ninja's working
directory) to the environment's sources and torch headers are the same in every environment;
CCACHE_BASEDIR (the envs root) makes ccache hash those paths relative to it, and
CCACHE_NOHASHDIR keeps the build directory itself out of the hash (DeepSpeed compiles with -g).
Objects are reused only where the preprocessed sources and flags are the same (ccache's own
check), so a release that changed an op's sources recompiles it.

torch >= 2.13 prepends ccache to the compiler by itself when ccache is on PATH, but with
ccache's defaults (absolute paths hashed): it reuses objects within one environment only, and
installing ccache changes every existing build line once (ninja rebuilds each ops directory once).
For rssprobe's environments TORCH_NO_COMPILER_WRAPPER turns torch's own wrapping off, so the
compiler runs behind exactly one ccache, configured as above, whatever the torch version.

Only for rssprobe's environments, where the sharing pays: another interpreter (the project's
own venv) keeps torch's default build, because a changed compiler line makes ninja rebuild ops
already compiled there, and other checkouts sharing that cache would rebuild them back.
Optional: without ccache on PATH (or with RSSPROBE_CCACHE=0, or a CXX of the user's own) no
variable is set and the build is torch's default.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..store import layout
from . import host

DISABLE = "RSSPROBE_CCACHE"  # "0": never use ccache
WRAPPER = "c++"  # the name torch's builder and ccache's masquerading both understand


def ccache() -> str | None:
    """The ccache executable, or None when it is absent or disabled."""
    if os.environ.get(DISABLE) == "0":
        return None
    return shutil.which("ccache")


def wrapper(executable: str) -> Path:
    """A symlink named c++ to ccache under the cache root (made or repaired on demand)."""
    link = layout.ccache_dir() / "bin" / WRAPPER
    target = os.path.realpath(executable)
    if not (link.is_symlink() and os.readlink(link) == target):
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f".{WRAPPER}.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        tmp.replace(link)  # atomic: a concurrent run sees the old or the new link, never none
    return link


def worker_env(python: str) -> dict[str, str]:
    """The variables that put ccache behind the op builds of a worker running `python`; empty when it
    cannot or should not (no ccache, disabled, CXX already chosen, not an rssprobe environment)."""
    executable = ccache()
    if executable is None or os.environ.get("CXX") or not host.is_rssprobe_env(python):
        return {}
    return {"CXX": str(wrapper(executable)), "TORCH_NO_COMPILER_WRAPPER": "1",
            "CCACHE_DIR": str(layout.ccache_dir() / "cache"), "CCACHE_BASEDIR": str(layout.envs_root().absolute()),
            "CCACHE_NOHASHDIR": "1"}
