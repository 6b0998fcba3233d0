"""Test-only interventions with known answers: they allocate a known number of bytes per
parameter at a known site, so attribution can be checked against the truth.

Allocations are anonymous mmaps touched page by page: their RSS cost is exact and does
not depend on glibc's heap state.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import mmap
import os
import threading
from typing import Any

from ...contract.interventions import ABORT_AT_EXIT, HOLD, INJECT, INTERVENTIONS, KEEP_ENGINE, LITTER
from ..sites import replace_function, resolve
from .base import Context, Refused

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


def inject_options(options: dict[str, str]) -> tuple[str, float, int | None, str, int | None]:
    """(site, bytes_per_param, step (None: every call), mode, fixed bytes or None), as the contract declares them."""
    v = INTERVENTIONS[INJECT].values(options)
    fixed = None if v["mib"] is None else int(v["mib"] * 2**20)
    return v["site"], v["bytes_per_param"], v["step"], v["mode"], fixed


def apply_inject(ctx: Context, options: dict[str, str]) -> None:
    path, per_param, at_step, mode, fixed = inject_options(options)
    effect = ctx.effect(INJECT)
    effect.update(injections=0, bytes=0, site=path, mode=mode, step=at_step)

    def make(fn: Any) -> Any:
        def injected(*args: Any, **kwargs: Any) -> Any:
            if (ctx.step == at_step and effect["injections"] == 0) or at_step is None:
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
    v = INTERVENTIONS[LITTER].values(options)
    path, mib = v["site"], v["mib"]
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


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.pthread_self.restype = ctypes.c_ulong
    libc.pthread_getattr_np.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
    libc.pthread_attr_getstack.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                           ctypes.POINTER(ctypes.c_size_t)]
    libc.pthread_attr_destroy.argtypes = [ctypes.c_void_p]
    return libc


def _hold_stack(libc: ctypes.CDLL, size: int) -> None:
    """A thread whose stack has `size` bytes touched, parked for good (blocked in the kernel)."""
    touched = threading.Event()

    def body() -> None:
        attr = ctypes.create_string_buffer(128)  # pthread_attr_t is 56 bytes on x86_64
        if libc.pthread_getattr_np(libc.pthread_self(), attr) == 0:
            low, length = ctypes.c_void_p(), ctypes.c_size_t()
            libc.pthread_attr_getstack(attr, ctypes.byref(low), ctypes.byref(length))
            libc.pthread_attr_destroy(attr)
            ctypes.memset(low.value, 1, size)  # the stack's far end, away from the frames in use
        touched.set()
        threading.Event().wait()

    old = threading.stack_size(size + (4 << 20))
    try:
        threading.Thread(target=body, name="rssprobe-hold", daemon=True).start()
    finally:
        threading.stack_size(old)
    touched.wait()


def apply_hold(ctx: Context, options: dict[str, str]) -> None:
    """Hold known amounts of memory of four kinds, each in the part that must name it."""
    v = INTERVENTIONS[HOLD].values(options)
    path, at_step = v["site"], v["step"]
    mib = {k: v[f"{k}_mib"] for k in ("anon", "stack", "malloc", "file")}
    effect = ctx.effect(HOLD)
    effect.update(holds=0, **{f"{k}_bytes": 0 for k in mib})
    libc = _libc()

    def hold() -> None:
        if mib["anon"]:
            _kept.append(_touched_mmap(mib["anon"] << 20))
        if mib["stack"]:
            _hold_stack(libc, mib["stack"] << 20)
        if mib["malloc"]:
            chunk = 4096
            for _ in range((mib["malloc"] << 20) // chunk):
                p = libc.malloc(chunk)
                ctypes.memset(p, 1, chunk)
                _kept.append(p)
        if mib["file"]:
            path = os.path.join(ctx.run_dir, "testing-hold.bin")
            with open(path, "wb") as f:
                f.write(b"\1" * (mib["file"] << 20))
            with open(path, "rb") as f:
                mapped = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
            sum(mapped[o] for o in range(0, len(mapped), mmap.PAGESIZE))  # every page read: resident
            _kept.append(mapped)
        effect["holds"] += 1
        for k, v in mib.items():
            effect[f"{k}_bytes"] = v << 20

    def make(fn: Any) -> Any:
        def held(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            if ctx.step == at_step and effect["holds"] == 0:
                hold()
            return out
        return held

    _wrap_site(HOLD, path, make)


def apply_abort_at_exit(ctx: Context, options: dict[str, str]) -> None:
    """As DeepSpeed 0.15.4's rank 0 does after its last step: C++'s std::terminate at interpreter exit."""
    INTERVENTIONS[ABORT_AT_EXIT].values(options)

    def abort() -> None:
        os.write(2, b"terminate called without an active exception\n")
        os.abort()

    atexit.register(abort)  # after the worker's end event and the close of its event file
    ctx.effect(ABORT_AT_EXIT)["armed"] = 1


def apply_keep_engine(ctx: Context, options: dict[str, str]) -> None:
    """Keep every engine deepspeed.initialize returns alive for good: a re-initialisation then leaks
    the whole old engine (its model, optimizer, offloaded states), the known answer for reinit events."""
    effect = ctx.effect(KEEP_ENGINE)
    effect.update(kept=0)

    def make(fn: Any) -> Any:
        def keeping(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            _kept.append(out)
            effect["kept"] += 1
            return out
        return keeping

    _wrap_site(KEEP_ENGINE, "deepspeed.initialize", make)


APPLY = {INJECT: apply_inject, LITTER: apply_litter, HOLD: apply_hold, ABORT_AT_EXIT: apply_abort_at_exit,
         KEEP_ENGINE: apply_keep_engine}
