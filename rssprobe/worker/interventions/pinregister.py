"""pin.register: DeepSpeed's pinned buffers at their exact size, instead of torch's caching host allocator.

torch's CachingHostAllocator rounds every pinned request up to a power of two and pins (makes resident)
the whole block; a buffer just above a power of two nearly doubles (reports/gpu-check.md: 10 B/param of the
28 B/param #7693 slope on an H200). This intervention answers each of the accelerator's pinning calls
(`pin_memory`, `pin_empty`, `pin_empty_like`) with page-aligned pageable memory of the request's size,
registered with `cudaHostRegister` (page-locked where it lies, no copy into a rounded block). The memory is
owned by a small object the tensor's storage keeps alive (torch.frombuffer): when the storage is freed, the
owner synchronises the device (registered memory is not tracked by torch's events: a copy still in flight
must end first), unregisters it and frees it. Every call counts: `registered` (and its bytes) on CUDA; on
the CPU accelerator there is nothing to register, the call is left as it is and counted `did_not_apply`, so
a CPU run with it proves nothing about CUDA (show flags it) while its figures stay those of the baseline.

The CUDA path is written against documented APIs (torch.cuda.cudart().cudaHostRegister / Unregister) and
has NOT run on a device yet (tests/gpu/test_pinned_cuda.py is its check: tests/gpu/check.sh, EVIDENCE=pinned).
Declared in rssprobe.contract (PIN_REGISTER: no options, counter `registered`); implemented here (APPLY).
"""

from __future__ import annotations

import ctypes
import functools
import math
import mmap
from typing import Any

from ...contract.interventions import INTERVENTIONS
from ...contract.interventions import PIN_REGISTER as REGISTER
from ..pins import ACCELERATOR_ENTRIES as ENTRIES  # the accelerator's pinning methods, where present
from ..pins import MARK
from .base import Context, Refused

_PAGE = mmap.PAGESIZE


class _Libc:
    """posix_memalign/free through ctypes, loaded once."""

    def __init__(self) -> None:
        libc = ctypes.CDLL("libc.so.6")
        libc.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
        libc.free.argtypes = [ctypes.c_void_p]
        self.libc = libc

    def alloc(self, size: int) -> int:
        ptr = ctypes.c_void_p()
        if self.libc.posix_memalign(ctypes.byref(ptr), _PAGE, size) != 0 or not ptr.value:
            raise MemoryError(f"{REGISTER}: posix_memalign of {size} bytes failed")
        return ptr.value


def registered_empty(torch: Any, libc: _Libc, shape: tuple[int, ...], dtype: Any, effect: dict[str, Any]) -> Any:
    """An uninitialised CPU tensor of `shape` in page-aligned memory registered with CUDA at its own size
    (rounded up to whole pages, which is what page-locking can lock)."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    nbytes = math.prod(shape) * itemsize
    size = max(_PAGE, -(-nbytes // _PAGE) * _PAGE)
    ptr = libc.alloc(size)
    cudart = torch.cuda.cudart()
    err = int(cudart.cudaHostRegister(ptr, size, 0))
    if err != 0:
        libc.libc.free(ptr)
        raise RuntimeError(f"{REGISTER}: cudaHostRegister({size} bytes) failed with cudaError {err}")

    class Owner(ctypes.c_uint8 * size):  # type: ignore[misc, valid-type]
        """The buffer torch.frombuffer keeps alive; its end unregisters, then frees."""

        def __del__(self) -> None:
            torch.cuda.synchronize()  # a non_blocking copy from this memory may still be running
            cudart.cudaHostUnregister(ptr)
            libc.libc.free(ptr)
            effect["unregistered"] = effect.get("unregistered", 0) + 1
            effect["unregistered_bytes"] = effect.get("unregistered_bytes", 0) + size

    owner = Owner.from_address(ptr)
    flat = torch.frombuffer(owner, dtype=torch.uint8, count=nbytes) if nbytes else torch.empty(0, dtype=torch.uint8)
    out = flat.view(dtype).view(shape)
    setattr(out, MARK, "register")
    effect["registered"] = effect.get("registered", 0) + 1
    effect["registered_bytes"] = effect.get("registered_bytes", 0) + size
    return out


def apply_register(ctx: Context, options: dict[str, str]) -> None:
    INTERVENTIONS[REGISTER].values(options)  # OptionError: it takes none
    import torch
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    effect = ctx.effect(REGISTER)
    on_cuda = accelerator.device_name() == "cuda" and torch.cuda.is_available()
    effect.update(registered=0, did_not_apply=0, accelerator=accelerator.device_name())
    libc = _Libc() if on_cuda else None

    def shape_of(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[int, ...], Any, Any]:
        """(shape, dtype, tensor to copy from or None) of one pinning call."""
        if name == "pin_empty":
            size = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)) else args
            return tuple(int(n) for n in size), kwargs["dtype"], None
        t = args[0]
        if name == "pin_empty_like":
            return tuple(t.shape), kwargs.get("dtype") or t.dtype, None
        # 0.19.x: pin_memory(tensor, make_copy=True, match_shape=True); older: pin_memory(tensor, align_bytes=1)
        flags = [a for a in args[1:3] if isinstance(a, bool)]
        copy = kwargs.get("make_copy", flags[0] if flags else True)
        match_shape = kwargs.get("match_shape", flags[1] if len(flags) > 1 else True)
        shape = tuple(t.shape) if match_shape else (t.numel(),)
        return shape, t.dtype, t if copy else None

    def make(name: str, fn: Any) -> Any:
        @functools.wraps(fn)
        def registering(*args: Any, **kwargs: Any) -> Any:
            if libc is None:  # the CPU accelerator: nothing to register; marked, so the prediction is exact size
                effect["did_not_apply"] += 1
                out = fn(*args, **kwargs)
                if out is not None:
                    setattr(out, MARK, "register")
                return out
            shape, dtype, source = shape_of(name, args, kwargs)
            out = registered_empty(torch, libc, shape, dtype, effect)
            if source is not None:
                out.copy_(source.reshape(shape))
            return out
        return registering

    wrapped = []
    for name in ENTRIES:
        fn = getattr(accelerator, name, None)
        if callable(fn):
            setattr(accelerator, name, make(name, fn))
            wrapped.append(name)
    if not wrapped:
        raise Refused(f"{REGISTER}: this DeepSpeed's accelerator has no pinning method ({', '.join(ENTRIES)})")
    effect["entries"] = ",".join(wrapped)


APPLY = {REGISTER: apply_register}
