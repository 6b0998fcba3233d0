"""Stale build locks in the compiled-ops cache (TORCH_EXTENSIONS_DIR).

torch's JIT build (cpp_extension, used by DeepSpeed's op builder) guards each op's build
directory with a `FileBaton`: a plain file `<op>/lock`, created with O_EXCL and removed in a
`finally`. Nothing holds it open. A process killed outright while it holds the baton leaves the
file behind, and every later process waits for it to vanish, forever, silently (seen: a run stuck
at "compiling deepspeed_shm_comm" with no compiler running).

A lock is judged stale when no live process works in that build directory (ninja and the
compilers run with it as their working directory, and name it in their arguments) and the file is
older than the short window in which a live holder has not started ninja yet (writing build.ninja,
or finding nothing to rebuild: milliseconds).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

HOLDER_WINDOW_S = 10.0  # a lock younger than this may belong to a holder that has not started ninja yet


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def workers_in(directory: Path) -> list[int]:
    """Pids of live processes (other than this one) whose cwd is in `directory` or whose command line names it."""
    target = str(directory.resolve())
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry.name}/cwd")
        except OSError:
            cwd = ""  # another user's process, or it just ended
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace").replace("\0", " ")
        except OSError:
            cmdline = ""
        if cwd == target or cwd.startswith(target + os.sep) or target in cmdline:
            found.append(int(entry.name))
    return found


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None  # released meanwhile


def stale_locks(cache_dir: Path, window_s: float = HOLDER_WINDOW_S) -> list[Path]:
    """Build locks in `cache_dir` (one per op: `<op>/lock`) that nothing holds."""
    out = []
    for lock in sorted(cache_dir.glob("*/lock")):
        mtime = _mtime(lock)
        if mtime is not None and time.time() - mtime >= window_s and not workers_in(lock.parent):
            out.append(lock)
    return out


def clear_stale_locks(cache_dir: Path, window_s: float = HOLDER_WINDOW_S,
                      say: Callable[[str], None] = _say) -> list[Path]:
    """Remove the stale build locks in `cache_dir`, one line each naming it; returns what was removed.

    A lock with no compiler alive but younger than `window_s` is looked at again once it is old
    enough (a wait of at most `window_s`), so a run started right after a killed one recovers too.
    """
    if not cache_dir.is_dir():
        return []
    young = [lock for lock in cache_dir.glob("*/lock") if not workers_in(lock.parent)]
    if young:
        newest = max((m for m in map(_mtime, young) if m is not None), default=0.0)
        time.sleep(max(0.0, min(window_s, newest + window_s - time.time())))
    removed = []
    for lock in stale_locks(cache_dir, window_s):
        try:
            lock.unlink()
        except FileNotFoundError:
            continue
        except OSError as e:
            say(f"rssprobe: stale build lock {lock} (no compiler is running there) could not be removed: "
                f"{e.strerror}; remove it by hand: rm {lock}")
            continue
        say(f"rssprobe: removed stale build lock {lock} (left by a process killed while compiling; "
            "no compiler is running there)")
        removed.append(lock)
    return removed
