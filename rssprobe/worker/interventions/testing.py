"""Test-only interventions with known answers: they allocate a known number of bytes per
parameter at a known site, so attribution can be checked against the truth.

Allocations are anonymous mmaps touched page by page: their RSS cost is exact and does
not depend on glibc's heap state.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
from typing import Any

from ..sites import replace_function, resolve
from .base import Context, Intervention, Refused

INJECT = "testing.inject"
LITTER = "testing.litter"

_kept: list[Any] = []  # retained allocations live until the process ends


def _touched_mmap(size: int) -> mmap.mmap:
    buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for offset in range(0, size, mmap.PAGESIZE):
        buf[offset] = 1
    return buf


def _wrap_site(name: str, path: str, make: Any) -> None:
    found = resolve(path)
    if found is None:
        raise Refused(f"{name}: site {path!r} does not exist in the installed version")
    replace_function(*found, lambda fn: functools.wraps(fn)(make(fn)))


def apply_inject(ctx: Context, options: dict[str, str]) -> None:
    try:
        path = options["site"]
        per_param = float(options.get("bytes_per_param", "3"))
        at_step = int(options.get("step", "1"))
        mode = options.get("mode", "retained")
        fixed = int(float(options["mib"]) * 2**20) if "mib" in options else None
    except (KeyError, ValueError) as e:
        raise Refused(f"{INJECT}: bad options {options} ({e})") from None
    if fixed is not None and ("bytes_per_param" in options or fixed <= 0):
        raise Refused(f"{INJECT}: mib is an absolute size > 0, instead of bytes_per_param, not with it")
    if mode not in ("retained", "transient"):
        raise Refused(f"{INJECT}: mode must be retained or transient, not {mode!r}")
    effect = ctx.effect(INJECT)
    effect.update(injections=0, bytes=0, site=path, mode=mode, step=at_step)

    def make(fn: Any) -> Any:
        def injected(*args: Any, **kwargs: Any) -> Any:
            if ctx.step == at_step and effect["injections"] == 0:
                size = int(per_param * ctx.params) if fixed is None else fixed
                buf = _touched_mmap(size)
                effect["injections"] += 1
                effect["bytes"] += size
                if mode == "retained":
                    _kept.append(buf)
                else:
                    buf.close()
            return fn(*args, **kwargs)
        return injected

    _wrap_site(INJECT, path, make)


def apply_litter(ctx: Context, options: dict[str, str]) -> None:
    """Before every call of a site, leave `mib` MiB free-but-retained in glibc's heap.

    Small chunks below a fence chunk: freed, they stay in the heap (not trimmed from the
    top), resident, until malloc_trim releases them. A trim that runs afterwards is then
    visible as a large RSS drop, which lets tests count trims from the probes alone.
    """
    path = options.get("site", "deepspeed.runtime.zero.stage_1_and_2.DeepSpeedZeroOptimizer._optimizer_step")
    mib = int(options.get("mib", "64"))
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    chunk = 64 * 1024
    effect = ctx.effect(LITTER)
    effect.update(litters=0, mib=mib, site=path)

    def make(fn: Any) -> Any:
        def littered(*args: Any, **kwargs: Any) -> Any:
            ptrs = [libc.malloc(chunk) for _ in range(mib * 1024 * 1024 // chunk)]
            for p in ptrs:
                ctypes.memset(p, 1, chunk)
            # The fence is allocated last, so above the chunks, and kept: the freed chunks
            # cannot merge into the heap top, which glibc would trim by itself.
            _kept.append(libc.malloc(chunk))
            for p in ptrs:
                libc.free(p)
            effect["litters"] += 1
            return fn(*args, **kwargs)
        return littered

    _wrap_site(LITTER, path, make)


INTERVENTIONS = [
    Intervention(INJECT, "test only: allocate bytes_per_param x params bytes (or a fixed mib MiB, whatever the "
                 "size) touched, inside a site on one step, kept (mode=retained) or freed before it returns "
                 "(mode=transient)", apply_inject,
                 options={"site": "dotted path of the function", "bytes_per_param": "float, default 3",
                          "mib": "float: a fixed size in MiB instead of bytes_per_param",
                          "step": "step number, default 1 (0 = during init)", "mode": "retained|transient"},
                 testing=True, counter="injections"),
    Intervention(LITTER, "test only: leave MiB of free-but-retained glibc heap before every call of a site",
                 apply_litter, options={"site": "dotted path, default ZeRO _optimizer_step", "mib": "int, default 64"},
                 testing=True, counter="litters"),
]
