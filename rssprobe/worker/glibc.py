"""glibc malloc introspection through ctypes: mallinfo2 and malloc_trim.

Only meaningful when the process really allocates through glibc: under a preloaded
jemalloc/tcmalloc glibc's mallinfo2 still answers, with zeros. We therefore check
that the `malloc` the process calls is glibc's own (by what it does to glibc's counters)
before trusting it, and report "not available" (None) instead of numbers otherwise.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from dataclasses import dataclass

MALLINFO_FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                   "keepcost")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in MALLINFO_FIELDS]


@dataclass(frozen=True)
class GlibcStatus:
    available: bool
    reason: str
    version: str | None


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def _status() -> GlibcStatus:
    libc = _libc()
    if libc is None or not hasattr(libc, "gnu_get_libc_version"):
        return GlibcStatus(False, "not glibc (no libc.so.6 / gnu_get_libc_version)", None)
    libc.gnu_get_libc_version.restype = ctypes.c_char_p
    version = libc.gnu_get_libc_version().decode()
    major, minor = (int(x) for x in version.split(".")[:2])
    if (major, minor) < (2, 33):
        return GlibcStatus(False, f"glibc {version} < 2.33 has no mallinfo2", version)
    if not hasattr(libc, "mallinfo2"):
        return GlibcStatus(False, f"glibc {version} exports no mallinfo2", version)
    if not _glibc_serves_malloc(libc):
        return GlibcStatus(False, "malloc is not glibc's (another allocator serves it)", version)
    return GlibcStatus(True, "glibc malloc", version)


def _glibc_serves_malloc(libc: ctypes.CDLL) -> bool:
    """Whether the malloc this process calls is glibc's, asked by behaviour: 1 MiB taken through the
    process's own malloc must move glibc's in-use counters by at least 1 MiB (mapped or from an arena,
    whatever the thresholds). Comparing symbol addresses is not enough: where the executable is not
    position-independent (Ubuntu's python3.12), dlsym returns its PLT slot, never libc's address, and a
    preloaded jemalloc/tcmalloc leaves glibc's counters still. Three tries: a concurrent free elsewhere
    could hide one."""
    process = ctypes.CDLL(None)
    take, give = process.malloc, process.free
    take.restype, take.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    give.restype, give.argtypes = None, [ctypes.c_void_p]
    libc.mallinfo2.restype = _Mallinfo2
    size = 1 << 20
    for _ in range(3):
        before = libc.mallinfo2()
        block = take(size)
        after = libc.mallinfo2()
        give(block)
        if block and (after.uordblks + after.hblkhd) - (before.uordblks + before.hblkhd) >= size:
            return True
    return False


STATUS = _status()
_LIBC = _libc() if STATUS.available else None
if _LIBC is not None:
    _LIBC.mallinfo2.restype = _Mallinfo2
    _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
    _LIBC.malloc_trim.restype = ctypes.c_int


def mallinfo2() -> dict[str, int] | None:
    """The five byte counters that matter, or None when glibc malloc is not in use."""
    if _LIBC is None:
        return None
    info = _LIBC.mallinfo2()
    return {
        "arena": info.arena,
        "hblkhd": info.hblkhd,
        "uordblks": info.uordblks,
        "fordblks": info.fordblks,
        "keepcost": info.keepcost,
    }


def in_use_and_free() -> tuple[int, int, int] | None:
    """(in use, free-retained, of the in-use bytes those in mmapped chunks) from one mallinfo2 call, for the
    per-call site probes (no dict built). mmapped chunks (hblkhd) count at their full size whether or not their
    pages were ever touched, so they are reported apart. mallinfo2 walks every free chunk of every arena: it is
    the costliest per-call read."""
    if _LIBC is None:
        return None
    info = _LIBC.mallinfo2()
    return info.uordblks + info.hblkhd, info.fordblks, info.hblkhd


def malloc_trim(pad: int = 0) -> int | None:
    """Call glibc malloc_trim; returns 1 if memory was released, 0 if not, None when not glibc."""
    if _LIBC is None:
        return None
    return int(_LIBC.malloc_trim(pad))
