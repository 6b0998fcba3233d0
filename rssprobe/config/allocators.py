"""The allocators rssprobe can preload into a worker, and glibc's knobs: `glibc`, `jemalloc`, `tcmalloc`,
and in a plan NAME[+KNOB=VALUE...] (glibc+MALLOC_ARENA_MAX=2)."""

from __future__ import annotations

# name -> (Debian package, library file); None: glibc, nothing to preload
ALLOCATORS: dict[str, tuple[str, str] | None] = {
    "glibc": None,
    "jemalloc": ("libjemalloc2", "libjemalloc.so.2"),
    "tcmalloc": ("libtcmalloc-minimal4", "libtcmalloc_minimal.so.4"),
}
MALLOC_KNOBS = ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def parse_allocator(value: str) -> tuple[str, dict[str, str]]:
    """'glibc+MALLOC_ARENA_MAX=2' -> ('glibc', {'MALLOC_ARENA_MAX': '2'}); ValueError naming what is wrong."""
    name, *knobs = value.split("+")
    if name not in ALLOCATORS:
        raise ValueError(f"{value!r}: unknown allocator {name!r} (known: {', '.join(ALLOCATORS)})")
    env: dict[str, str] = {}
    for knob in knobs:
        key, sep, setting = knob.partition("=")
        if not sep or key not in MALLOC_KNOBS or not setting.isdigit():
            raise ValueError(f"{value!r}: {knob!r} is not KNOB=INTEGER with KNOB one of {', '.join(MALLOC_KNOBS)}")
        env[key] = setting
    if env and name != "glibc":
        raise ValueError(f"{value!r}: glibc knobs apply to glibc only")
    return name, env
