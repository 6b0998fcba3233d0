"""DeepSpeed's native pinned backend on a real device (issue 30, reports/issue7693-answer.md): a buffer of
3 MiB + 4097 B pinned natively is locked at its own pages (VmLck grows by exactly ceil(N / page) pages), takes
nothing from torch's caching host allocator (which would hold a 4 MiB block for it), and is registered with CUDA
(torch sees it pinned) unless DS_PIN_MEMORY_REGISTER_DEVICE is off.

Skipped with "no CUDA device" elsewhere (tests/gpu/conftest.py); the same known answer on the CPU accelerator,
without the registration, is tests/test_fixes.py. WRITTEN WITHOUT A DEVICE: not yet run on a GPU; one call of
tests/gpu/check.sh with EVIDENCE=fixes runs it.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from rssprobe.worker import procfs
from rssprobe.worker.cudaprobe import host_figures

REQUEST = 3 * 2**20 + 4097
PAGE = 4096


def _held() -> int:
    return (host_figures(torch.cuda.host_memory_stats()) or {}).get("held") or 0


@pytest.mark.parametrize("register", ["1", "0"])
def test_native_backend_locks_the_requests_own_pages(register: str, figures: dict[str, Any],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_PIN_MEMORY_BACKEND", "native")
    monkeypatch.setenv("DS_PIN_MEMORY_REGISTER_DEVICE", register)
    from deepspeed.accelerator import get_accelerator

    torch.cuda.init()
    held0, locked0 = _held(), procfs.locked_bytes() or 0
    t = get_accelerator().pin_memory(torch.ones(REQUEST, dtype=torch.uint8))
    locked, held = (procfs.locked_bytes() or 0) - locked0, _held() - held0
    figures.setdefault("native_pin", {})[f"register={register}"] = {
        "locked_delta": locked, "allocator_held_delta": held, "torch_is_pinned": bool(t.is_pinned()),
        "ds_pinned": bool(getattr(t, "ds_pinned", False)), "env": os.environ.get("DS_PIN_MEMORY_REGISTER_DEVICE")}
    assert locked == -(-REQUEST // PAGE) * PAGE  # its own pages, exactly (VmLck counts pages)
    assert held == 0  # nothing from torch's caching host allocator
    assert bool(t.is_pinned()) is (register == "1")  # registered memory is pinned to CUDA (PR #8283)
    del t
