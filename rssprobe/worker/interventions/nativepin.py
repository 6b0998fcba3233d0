"""ds.native-pin: DeepSpeed's own native pinned backend instead of torch's caching host allocator.

DeepSpeed 0.19.6 (PR #8211) added `DS_PIN_MEMORY_BACKEND=native`: every pin request of its accelerator
(`pin_memory`, `pin_empty`, `pin_empty_like`) is answered by its `pin_memory` op with page-aligned
`posix_memalign` memory of the request's exact size, `mlock`ed, freed when the tensor dies; PR #8283 (also
0.19.6) registers those pages with the device (`cudaHostRegister`) unless `DS_PIN_MEMORY_REGISTER_DEVICE` is
off, so that copies run at pinned bandwidth (53-55 GB/s on an H200 against 10-17 without, its authors'
figures). Both are environment variables DeepSpeed reads at every pin call; this intervention sets them in
the worker before `deepspeed.initialize` and counts what DeepSpeed did with them:

* `native_pins` / `native_bytes`: requests the native backend answered (its `_new_locked`), and their bytes;
* `registered`: those it registered with the device; `register_did_not_apply`: those it did not, although
  register=on (the CPU accelerator has nothing to register with: DeepSpeed's hook returns False there).

On the CPU accelerator the backend really mlocks, so its bytes are measurable here: the worker reads VmLck
(/proc/self/status) per step and at census points, and the pages must be the requests' own, page-rounded.
The op is loaded before the pre-model baseline (worker start), as cpu_adam is. A DeepSpeed without the
backend is refused (one line) before training; a lock limit too small is refused before the worker starts
(run/preflight.py: mlock failing inside DeepSpeed aborts the process).
Declared in rssprobe.contract (NATIVE_PIN: option register on|off, counter `native_pins`).
"""

from __future__ import annotations

import functools
import os
from typing import Any

from ...contract.interventions import DS_PIN_BACKEND_ENV, DS_PIN_REGISTER_ENV, INTERVENTIONS
from ...contract.interventions import NATIVE_PIN as NATIVE
from .base import Context, Refused


def apply_native(ctx: Context, options: dict[str, str]) -> None:
    register = INTERVENTIONS[NATIVE].values(options)["register"] == "on"
    import deepspeed

    try:
        from deepspeed.utils import pin_memory as native
    except ImportError:
        raise Refused(f"{NATIVE}: DeepSpeed {deepspeed.__version__} has no native pinned backend "
                      "(DS_PIN_MEMORY_BACKEND, PR #8211, first in 0.19.6)") from None
    manager = getattr(native, "NativePinnedMemory", None)
    if manager is None or not callable(getattr(manager, "_new_locked", None)) \
            or not callable(getattr(native, "get_native_pinned_memory", None)):
        raise Refused(f"{NATIVE}: DeepSpeed {deepspeed.__version__}'s deepspeed.utils.pin_memory has a different "
                      "shape (no NativePinnedMemory._new_locked); refusing to guess")
    os.environ[DS_PIN_BACKEND_ENV] = "native"
    os.environ[DS_PIN_REGISTER_ENV] = "1" if register else "0"
    from deepspeed.accelerator import get_accelerator

    effect = ctx.effect(NATIVE)
    effect.update(native_pins=0, native_bytes=0, registered=0, register_did_not_apply=0,
                  register="on" if register else "off", accelerator=get_accelerator().device_name())
    native.get_native_pinned_memory()  # the op, loaded now: its failure is DeepSpeed's own message, before init
    new_locked = manager._new_locked

    @functools.wraps(new_locked)
    def counting(self: Any, example: Any, out_shape: Any) -> Any:
        before = len(getattr(self, "_device_registered", ()))
        out = new_locked(self, example, out_shape)
        effect["native_pins"] += 1
        effect["native_bytes"] += out.numel() * out.element_size()
        if register:
            took = len(getattr(self, "_device_registered", ())) > before
            effect["registered" if took else "register_did_not_apply"] += 1
        return out

    manager._new_locked = counting


APPLY = {NATIVE: apply_native}
