"""The memory-map partition's residency as it was read before it was read in bulk (rssprobe 001a022): a page at
a time, in Python. Kept here, never in the package, as the reference the bulk reader must agree with.

`OldReader` is that commit's Reader, method for method (its word() is the package's, whose only step that
changed, the run of resident pages a block read takes, is `_resident_run` below, as it was); `next_resident`
skips nothing, which makes the anonymous scan step a page at a time again, as it did. `OldLedger.account` takes a
range in one piece, as it did (the package's `_account` is that body, unchanged). Everything else the partition
does (the walks, the mapping rules) is shared and unchanged, so `partition` below is the old algorithm.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rssprobe.worker import memmap
from rssprobe.worker.procfs import PAGE_SIZE

_BLOCK = memmap._BLOCK


class OldReader(memmap.Reader):
    def __init__(self) -> None:  # two 64 KiB buffers, no numpy
        self.mem = os.open("/proc/self/mem", os.O_RDONLY | os.O_CLOEXEC)
        self.pagemap = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
        self.buffer = mmap.mmap(-1, _BLOCK, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._pm_buf = mmap.mmap(-1, _BLOCK, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.block_at, self.block_len = -1, 0
        self._pm_at, self._pm_len = -1, 0

    def close(self) -> None:
        os.close(self.mem)
        os.close(self.pagemap)
        self.buffer.close()
        self._pm_buf.close()

    def is_resident(self, page: int) -> bool:
        per_block = _BLOCK // 8
        if not 0 <= page - self._pm_at < self._pm_len:
            base = page - page % per_block
            self._pm_at, self._pm_len = base, os.preadv(self.pagemap, [self._pm_buf], base * 8) // 8
            if page - base >= self._pm_len:
                return False
        entry = struct.unpack_from("<Q", self._pm_buf, (page - self._pm_at) * 8)[0]
        return bool(entry & memmap._PRESENT) and bool(entry & memmap._OWNED)

    def _resident_run(self, page: int) -> int:
        pages = 1
        while pages < _BLOCK // PAGE_SIZE and self.is_resident(page + pages):
            pages += 1
        return pages

    def next_resident(self, addr: int, end: int) -> int:
        return addr

    def resident(self, start: int, end: int) -> int:
        if end <= start:
            return 0
        total = 0
        for page in range(start // PAGE_SIZE, (end - 1) // PAGE_SIZE + 1):
            if self.is_resident(page):
                total += min(end, (page + 1) * PAGE_SIZE) - max(start, page * PAGE_SIZE)
        return total


class OldLedger(memmap._Ledger):
    account = memmap._Ledger._account


@contextmanager
def _old() -> Iterator[None]:
    saved = memmap.Reader, memmap._Ledger
    memmap.Reader, memmap._Ledger = OldReader, OldLedger  # type: ignore[misc]
    try:
        yield
    finally:
        memmap.Reader, memmap._Ledger = saved  # type: ignore[misc]


def partition(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """memmap.partition as it was: the old reader and ledger in place for one call."""
    with _old():
        return memmap.partition(*args, **kwargs)
