"""The memory-map partition as it was before residency was read in bulk (rssprobe 001a022): pagemap a page at a
time in Python, every page of an anonymous mapping probed for a header. Kept here, never in the package, as the
reference the bulk reader must agree with.

What changed is here as it was, verbatim: the Reader (`OldReader`, method for method; its word() is the package's,
whose one changed step, the run of resident pages a block read takes, is `_resident_run` below), the ledger's
account (a range in one piece: the package's `_account` is that body), the heap walk and the anonymous scan.
Everything else (the mapping rules, the arena and chunk and pool checks) is shared and unchanged since, so
`partition` below, the package's with these swapped in, is the old algorithm.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rssprobe.worker import memmap
from rssprobe.worker.memmap import (
    ANON_OTHER,
    GLIBC_FREE,
    GLIBC_IN_USE,
    PYMALLOC,
    Mapping,
    _Ledger,
    _mmapped_chunk,
    _pymalloc_pool,
)
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


# ---- verbatim from 001a022 (the names they use come from the package, unchanged) ----------------------------
def _walk_heap(ledger: _Ledger, first: int, top_end: int) -> bool:
    """Account the chunks of one glibc heap from `first` to the end of its top chunk.

    Streams the chain (no list of chunks: a large list would itself be a glibc
    allocation). Accounts nothing and returns False if the chain of chunk sizes does not
    land exactly on top_end: then this is not a heap laid out as assumed, or it changed
    while it was read.
    """
    reader = ledger.reader
    unpack, buf = struct.unpack_from, reader.buffer
    saved = ledger.parts.copy()
    p, run_start, run_used = first, first, None
    try:
        field = reader.word(p + 8)
        while p < top_end:
            size = field & ~7
            nxt = p + size
            if size < 16 or nxt > top_end:
                raise OSError("broken chain")
            used = False  # the top chunk is free
            if nxt < top_end:  # each header is read once: its PREV_INUSE bit is the status of the chunk before
                off = nxt + 8 - reader.block_at
                field = unpack("<Q", buf, off)[0] if 0 <= off <= reader.block_len - 8 else reader.word(nxt + 8)
                used = bool(field & 1)
            if used != run_used:
                if run_used is not None:
                    ledger.account(run_start, p, GLIBC_IN_USE if run_used else GLIBC_FREE)
                run_start, run_used = p, used
            p = nxt
    except OSError:
        ledger.parts = saved
        return False
    ledger.account(run_start, top_end, GLIBC_IN_USE if run_used else GLIBC_FREE)
    return True


def _account_anonymous(ledger: _Ledger, m: Mapping, glibc: bool) -> None:
    """An anonymous mapping: glibc mmapped chunks and pymalloc pools found by their headers.

    The kernel merges adjacent anonymous mappings into one line, so headers are looked
    for at every page that no chunk or pool already covers.
    """
    reader = ledger.reader
    p, other_from = m.start, m.start
    while p < m.end:
        part, size = None, 0
        try:
            if glibc and (size := _mmapped_chunk(reader, p, m.end)):
                part = GLIBC_IN_USE
            elif (size := _pymalloc_pool(reader, p)) and p + size <= m.end:
                part = PYMALLOC
        except OSError:
            part = None
        if part is None:
            p += PAGE_SIZE
            continue
        ledger.account(other_from, p, ANON_OTHER)
        ledger.account(p, p + size, part)
        p = other_from = p + size
    ledger.account(other_from, m.end, ANON_OTHER)



_OLD = {"Reader": OldReader, "_Ledger": OldLedger, "_walk_heap": _walk_heap, "_account_anonymous": _account_anonymous}


@contextmanager
def _old() -> Iterator[None]:
    saved = {name: getattr(memmap, name) for name in _OLD}
    for name, old in _OLD.items():
        setattr(memmap, name, old)
    try:
        yield
    finally:
        for name, new in saved.items():
            setattr(memmap, name, new)


def partition(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """memmap.partition as it was: the old reader and ledger in place for one call."""
    with _old():
        return memmap.partition(*args, **kwargs)
