"""Every pin request made inside the run, recorded where it is made: which DeepSpeed code asked, for how
many bytes, for which storage, and (on CUDA) the host block that holds it.

DeepSpeed pins through its accelerator (0.19.8: `pin_memory`, `pin_empty`, `pin_empty_like`; older
releases `pin_memory` only) and, in a few places, `Tensor.pin_memory()` directly (offload_states,
partition_parameters' secondary tensor, the fast checkpoint writer). Both are wrapped here. The CUDA
accelerator's own path ends in `Tensor.pin_memory()` or `new_empty(..., pin_memory=True)` inside those
methods: the outermost call is counted once. `pin_memory=True` factory calls elsewhere (torch.empty & co.,
called millions of times a run) are not wrapped: DeepSpeed's ZeRO paths make none outside its accelerator.

On the CPU accelerator pinning is a no-op (the tensor itself comes back, or a pageable one) but the request
still happens, with the size CUDA would allocate: the span of the returned tensor (torch's
`_pin_memory` allocates computeStorageNbytes(sizes, strides)), so CUDA's holding can be predicted from a
CPU run (rssprobe.analysis.pinrule). A request's storage is watched (weakref.finalize on its storage,
whose Python object torch keeps alive as long as the storage) so that frees, and their order, are known:
the caching host allocator reuses freed blocks.

The probe runs on every pin call (ZeRO-3 pins once per parameter): a frame walk to the nearest DeepSpeed
frame, the span, one finalizer. Roles (the census's, read from DeepSpeed's attributes) and, on CUDA, the
mapping that holds each block are looked up when requests are emitted (after init and after a step that
made any), once for the batch.
"""

from __future__ import annotations

import bisect
import itertools
import os
import sys
import threading
import weakref
from typing import Any

from ..contract.environment import TORCH_ALLOC_CONF_ENV, TORCH_ALLOC_CONF_NEWER_ENV
from . import census

# the accelerator's public pinning methods (those this DeepSpeed has)
ACCELERATOR_ENTRIES = ("pin_memory", "pin_empty", "pin_empty_like")
# frames that are the pinning mechanism, not the code that asked
MECHANISM = ("rssprobe.", "deepspeed.accelerator", "deepspeed.utils.pin_memory", "torch.")
ENV_KEYS = (TORCH_ALLOC_CONF_ENV, TORCH_ALLOC_CONF_NEWER_ENV, "DS_PIN_MEMORY_BACKEND")
MARK = "_rssprobe_pin"  # an intervention that pins by other means marks the tensor it returns (e.g. "register")


def start(torch_module: Any, accelerator_name: str) -> PinRecorder:
    """A recorder wrapping this process's pinning entry points (DeepSpeed's accelerator, Tensor.pin_memory)."""
    from deepspeed.accelerator import get_accelerator

    recorder = PinRecorder(torch_module, get_accelerator(), accelerator_name)
    recorder.install()
    return recorder


def span(t: Any) -> int:
    """Bytes a pinned copy of `t` takes: its storage span (what torch's _pin_memory allocates)."""
    if t.numel() == 0:
        return 0
    return t.element_size() * (1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True)))


def asking_site(frame: Any) -> tuple[str, str, int]:
    """(module.qualname, qualname, line) of the nearest DeepSpeed frame that is not the pinning mechanism
    itself; else the nearest frame outside the mechanism, else 'unknown'."""
    outside: tuple[str, str, int] | None = None
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(MECHANISM):
            qualname = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
            where = (f"{module}.{qualname}", qualname, frame.f_lineno or 0)  # None while a line is unknown
            if module.startswith("deepspeed."):
                return where
            outside = outside or where
        frame = frame.f_back
    return outside or ("unknown", "unknown", 0)


class PinRecorder:
    """Wraps the pinning entry points; `emit` writes what was recorded since the last emission."""

    def __init__(self, torch_module: Any, accelerator: Any, accelerator_name: str) -> None:
        self.torch, self.accelerator, self.accelerator_name = torch_module, accelerator, accelerator_name
        self.step = 0  # set by the worker: 0 during deepspeed.initialize, then the step number
        self.installed: list[str] = []
        self._new: list[dict[str, Any]] = []
        self._live: dict[int, Any] = {}  # request id -> its tensor's data pointer, for the block lookup
        self._freed: list[dict[str, int]] = []
        self._seq = itertools.count()
        self._local = threading.local()
        self._emitted_config = False

    def install(self) -> None:
        for name in ACCELERATOR_ENTRIES:
            fn = getattr(self.accelerator, name, None)
            if callable(fn):
                setattr(self.accelerator, name, self._wrap(f"accelerator.{name}", fn))
                self.installed.append(f"accelerator.{name}")
        # a plain function on the class is a method: the tensor comes as the first argument
        self.torch.Tensor.pin_memory = self._wrap("Tensor.pin_memory", self.torch.Tensor.pin_memory)
        self.installed.append("Tensor.pin_memory")

    def _wrap(self, entry: str, fn: Any) -> Any:
        local, record = self._local, self._record

        def pinning(*args: Any, **kwargs: Any) -> Any:
            if getattr(local, "depth", 0):  # inside another entry (CUDA's accelerator -> Tensor.pin_memory)
                return fn(*args, **kwargs)
            local.depth = 1
            try:
                out = fn(*args, **kwargs)
            except Exception as e:  # a CPU-only torch cannot pin: the request happened all the same
                source = args[0] if args and isinstance(args[0], self.torch.Tensor) else None
                record(entry, source, sys._getframe(1), raised=f"{type(e).__name__}: {str(e).splitlines()[0]}"[:200])
                raise
            finally:
                local.depth = 0
            record(entry, out, sys._getframe(1))
            return out

        pinning.__wrapped__ = fn  # type: ignore[attr-defined]
        pinning.__name__ = getattr(fn, "__name__", entry)
        return pinning

    def _record(self, entry: str, out: Any, frame: Any, raised: str | None = None) -> None:
        site, function, line = asking_site(frame)
        rid = next(self._seq)
        request: dict[str, Any] = {"id": rid, "entry": entry, "site": site, "function": function, "line": line,
                                   "step": self.step,
                                   "bytes": span(out) if out is not None else None, "storage_ptr": None,
                                   "via": "torch"}
        if raised:
            request["raised"] = raised
        elif out is not None:
            storage = out.untyped_storage()
            request["storage_ptr"] = storage.data_ptr()
            request["via"] = getattr(out, MARK, None) or ("native" if getattr(out, "ds_pinned", False) else "torch")
            self._live[rid] = out.data_ptr()
            weakref.finalize(storage, self._on_free, rid).atexit = False
        self._new.append(request)

    def _on_free(self, rid: int) -> None:
        self._live.pop(rid, None)
        self._freed.append({"id": rid, "seq": next(self._seq)})

    def pending(self) -> bool:
        return bool(self._new or self._freed)

    def emit(self, events: Any, at: str, zero_optimizer: Any, stage: int, force: bool = False) -> None:
        """One `pins` event (rssprobe.contract.events.Pins) with the requests and frees since the last one (roles read
        now); the first one also carries what pinning was configured with."""
        if not (force or self.pending()):
            return
        new, freed = self._new, self._freed
        self._new, self._freed = [], []
        roles = {key[0]: role for role, _t, key in census.role_tensors(zero_optimizer, self.torch.Tensor, stage)}
        for request in new:
            request["role"] = roles.get(request["storage_ptr"]) if request["storage_ptr"] else None
        if self.accelerator_name == "cuda":
            _blocks(new, self._live)
        extra = {} if self._emitted_config else {"config": self.config(zero_optimizer)}
        self._emitted_config = True
        events.emit("pins", at=at, requests=new, freed=freed, **extra)

    def config(self, zero_optimizer: Any) -> dict[str, Any]:
        """What pinning was told: DeepSpeed's effective pin_memory, the environment the allocators read,
        torch's own record of the allocator settings it parsed, and the entry points wrapped."""
        settings = getattr(self.torch._C, "_accelerator_getAllocatorSettings", None)
        effective = {
            "offload_optimizer": _flag(zero_optimizer, "cpu_offload_pin_memory", "offload_optimizer_pin_memory"),
            "offload_param": _flag(zero_optimizer, "offload_param_pin_memory"),
        }
        return {"accelerator": self.accelerator_name, "entries": self.installed, "pin_memory_effective": effective,
                "env": {k: os.environ.get(k) for k in ENV_KEYS},
                "torch_allocator_settings": settings() if settings is not None else None}


def _flag(obj: Any, *names: str) -> bool | None:
    for name in names:
        value = getattr(obj, name, None)
        if isinstance(value, bool):
            return value
    return None


def _blocks(requests: list[dict[str, Any]], live: dict[int, int]) -> None:
    """CUDA only (UNVERIFIED on a device): the mapping that holds each live request's data, from one read of
    /proc/self/maps. cudaHostAlloc gives every caching-host-allocator block its own shared /dev/zero mapping,
    so its size is the block's; a registered or pageable buffer sits in an anonymous private mapping."""
    try:
        with open("/proc/self/maps") as f:
            maps = [line.split(maxsplit=5) for line in f]
    except OSError:
        return
    spans = sorted((int(a, 16), int(b, 16), m[1], m[5].strip() if len(m) > 5 else "")
                   for m in maps for a, b in [m[0].split("-")])
    starts = [s[0] for s in spans]
    for request in requests:
        ptr = live.get(request["id"])
        i = bisect.bisect_right(starts, ptr) - 1 if ptr else -1
        if i >= 0 and spans[i][0] <= ptr < spans[i][1]:
            start, end, perms, name = spans[i]
            request["block"] = {"bytes": end - start, "perms": perms, "mapping": name,
                                "shared": perms.endswith("s")}
