"""Every resident byte of the process, named: a partition of RSS by memory mapping.

At a census point the worker reads /proc/self/smaps and names each mapping's resident
pages: live tensors (the census's storages, resident pages from pagemap), glibc's heaps
walked chunk by chunk (in use but not a tensor; free and still resident), glibc's mmapped
chunks (found by their headers), thread stacks, shared memory (and apart, the shared blocks that
hold pinned tensors: CUDA's pinned host memory), file-backed pages by file,
and what is left of anonymous memory. The parts add up to the mappings' RSS; the worker's
RSS counter minus their sum is reported apart as "not attributed", never hidden.

How free-but-retained bytes are measured: a glibc chunk is free when the PREV_INUSE bit
of the chunk after it is clear (the top chunk is free too); its resident bytes are the
bytes of it on pages that pagemap says are present, so pages a malloc_trim has returned
(MADV_DONTNEED) do not count, unlike mallinfo2's fordblks. Chunks cached in tcache and
fastbins keep PREV_INUSE set and count as in use, as glibc's own bins see them.

Memory is read through /proc/self/mem (an unmapped or protected address is an error,
never a crash) in small blocks, so the walk itself neither faults pages in nor moves
glibc's dynamic mmap threshold with large transient buffers.

What it costs grows with the mappings, the chunks and the pools, not with the pages one by
one: residency is read from pagemap a window at a time and counted with numpy (two
lookups per range), pages never touched are skipped, large chunks are stepped over by
their size, and a pool's header is read alone (a read of /proc/self/mem costs ~1 s per
GiB). On `default` at 256 M params (~6 GiB) a partition takes ~0.1 s per GiB here
(make bench), where reading pagemap a page at a time in Python took ~0.6.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import mmap
import os
import struct
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..contract.names import (  # part names: the vocabulary of the budget, the reports and the metrics (part.<key>)
    ANON_OTHER,
    FILE_CHECKPOINT,
    FILE_OPS,
    FILE_OTHER,
    FILE_PYTHON,
    FILE_TORCH,
    FILE_TORCH_CPU,
    GLIBC_FREE,
    GLIBC_IN_USE,
    GLIBC_UNWALKED,
    PINNED_SLACK,
    PYMALLOC,
    SHARED,
    STACKS,
    TENSORS,
)
from .procfs import PAGE_SIZE

HEAP_MAX_SIZE = 64 << 20  # glibc's non-main arena heaps are aligned to this (64-bit default)
_BLOCK = 64 << 10  # bytes per read: below glibc's initial mmap threshold (128 KiB)
_HEADER = 48  # bytes of a glibc chunk's or a pymalloc pool's header that the checks read
# pages of pagemap per read: the smallest that holds what is asked, so scattered small reads stay cheap; at most
# 256 MiB of address (512 KiB of entries)
_WINDOWS = (1 << 9, 1 << 12, 1 << 15, 1 << 16)
_WINDOW = _WINDOWS[-1]
_PRESENT = 1 << 63
_OWNED = (1 << 61) | (1 << 56)  # pagemap: file page or shared-anon | mapped exclusively
_MALLOC_STATE_SIZES = (2200, 2192, 2208, 2184, 2216)  # glibc 2.26-2.38 x86_64 and neighbours
_HEAP_INFO_SIZES = (48, 32, 64)


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    perms: str
    path: str
    rss: int

    @property
    def anonymous(self) -> bool:
        return self.path == "" or self.path.startswith("[anon")


def read_smaps(path: str = "/proc/self/smaps") -> list[Mapping]:
    """Every mapping with its Rss (bytes); read line by line through a small buffer."""
    out: list[Mapping] = []
    head: tuple[int, int, str, str] | None = None
    rss = 0
    with open(path, "rb", buffering=_BLOCK) as f:
        for line in f:
            if line[:4] == b"Rss:":
                rss = int(line.split()[1]) * 1024
            elif not line.split(b" ", 1)[0].endswith(b":"):  # a mapping's header line
                if head is not None:
                    out.append(Mapping(*head, rss))
                fields = line.split(maxsplit=5)
                lo, hi = fields[0].split(b"-")
                name = fields[5].strip().decode(errors="replace") if len(fields) > 5 else ""
                head, rss = (int(lo, 16), int(hi, 16), fields[1].decode(), name), 0
    if head is not None:
        out.append(Mapping(*head, rss))
    return out


def checkpoint_ranges() -> list[tuple[int, int]]:
    """Address ranges of this process's mappings of checkpoint files (safetensors, pytorch_model*.bin), sorted:
    the census names tensors whose storage lies there (a loaded model's weights used in place from disk)."""
    out = []
    with open("/proc/self/maps", "rb") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and file_part(fields[5].strip().decode(errors="replace"), None) == FILE_CHECKPOINT:
                lo, hi = fields[0].split(b"-")
                out.append((int(lo, 16), int(hi, 16)))
    return sorted(out)


def file_part(path: str, ops_dir: str | None) -> str:
    """Which named group a file-backed mapping belongs to."""
    name = os.path.basename(path.removesuffix(" (deleted)"))
    if (ops_dir and path.startswith(ops_dir)) or "torch_extensions" in path:
        return FILE_OPS
    if name.startswith("libtorch_cpu"):
        return FILE_TORCH_CPU
    if "/torch/lib/" in path:
        return FILE_TORCH
    if name.startswith(("python", "libpython")) or "/lib-dynload/" in path:
        return FILE_PYTHON
    if name.endswith(".safetensors") or (name.startswith("pytorch_model") and name.endswith(".bin")):
        return FILE_CHECKPOINT
    return FILE_OTHER


def _is_shared(path: str) -> bool:
    """POSIX and System V shared memory, memfds, and shared anonymous maps (shown as /dev/zero)."""
    return path.startswith(("/dev/shm/", "/run/shm/", "/memfd:", "/SYSV", "/dev/zero"))


def thread_stack_pointers() -> list[int]:
    """Stack pointers of the threads blocked in the kernel (/proc/self/task/*/syscall)."""
    out = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/syscall", "rb") as f:
                fields = f.read().split()
        except OSError:
            continue
        if len(fields) >= 3:  # "running" has no registers to read
            try:
                out.append(int(fields[-2], 16))
            except ValueError:
                continue
    return out


def _numpy() -> Any:
    """numpy, imported at the first census (torch has imported it by then), never when the worker starts."""
    import numpy

    return numpy


def _buffer(size: int) -> mmap.mmap:
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


class Reader:
    """Words of this process's memory and page residency, read into fixed buffers.

    The buffers are anonymous mmaps made once, so reading allocates nothing from glibc
    while its heaps are walked. A page is resident when pagemap says present and it is a
    file page or mapped by this process alone: the shared zero page that a read of
    untouched anonymous memory maps is present but not RSS. Untouched pages are never
    read (they read as zeros), so the walk does not map them.

    Residency is read for a window of pages at a time (one pread of pagemap, 512 to 65536 pages) and decoded
    with numpy into one flag and a running count per page, so the resident bytes of any range in the window
    are two lookups, not a Python step per page. Decoding makes no numpy temporaries (every operation writes
    into a buffer), and no numpy object outlives a read, so none holds glibc memory while a heap is walked.
    """

    def __init__(self) -> None:
        np = _numpy()
        self.mem = os.open("/proc/self/mem", os.O_RDONLY | os.O_CLOEXEC)
        self.pagemap = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
        self.buffer = _buffer(_BLOCK)
        self.words = memoryview(self.buffer).cast("Q")  # the block as 8-byte words (native order: x86-64's)
        self._np = np
        # pagemap entries, two scratch words per page, the running count (cum[i] = resident pages before i) and
        # one byte per page (1: resident), for the mmap's find()
        self._bufs = [_buffer(_WINDOW * 8) for _ in range(3)] + [_buffer((_WINDOW + 1) * 8), _buffer(_WINDOW)]
        self._res_buf = self._bufs[4]
        self._cum = memoryview(self._bufs[3]).cast("Q")
        # as 0-d arrays: a numpy scalar operand becomes a new array in each call
        self._consts = tuple([np.array(c, dtype=np.uint64) for c in (56, 7, _OWNED >> 56, 1, 0)])
        self.block_at, self.block_len = -1, 0
        self._pm_at, self._pm_len = -1, 0

    def close(self) -> None:
        os.close(self.mem)
        os.close(self.pagemap)
        self._cum.release()
        self.words.release()
        for buf in (self.buffer, *self._bufs):
            buf.close()

    def _load(self, page: int, want: int) -> None:
        """Read residency for pages [page, page + n), n the smallest window size that holds `want` pages."""
        np = self._np
        n = _WINDOW
        for w in _WINDOWS:  # a loop, not next() on a generator: that is a 640-byte malloc on glibc's heap
            if w >= want:
                n = w
                break
        self._pm_at, self._pm_len = -1, 0
        got = os.preadv(self.pagemap, [memoryview(self._bufs[0])[:n * 8]], page * 8) // 8
        # numpy views made for this read and dropped after it: none is alive while a heap is walked (their
        # shape and strides are malloc'd, from numpy's own cache once it is warm)
        entries = np.frombuffer(self._bufs[0], np.uint64, n)
        t, u = np.frombuffer(self._bufs[1], np.uint64, n), np.frombuffer(self._bufs[2], np.uint64, n)
        cum, flags = np.frombuffer(self._bufs[3], np.uint64, n, 8), np.frombuffer(self._res_buf, np.bool_, n)
        if got < n:  # past the end of the address space: nothing there
            entries[got:] = 0
        shift, top, owned, one, zero = self._consts
        np.right_shift(entries, shift, out=t)  # the flag byte: present 0x80, file/shared 0x20, exclusive 0x01
        np.right_shift(t, top, out=u)  # present
        np.bitwise_and(t, owned, out=t)
        np.minimum(t, one, out=t)  # file/shared or exclusive
        np.bitwise_and(t, u, out=t)  # 1 if resident
        np.add.accumulate(t, out=cum)
        np.greater(t, zero, out=flags)
        self._pm_at, self._pm_len = page, n

    def is_resident(self, page: int) -> bool:
        if not 0 <= page - self._pm_at < self._pm_len:
            self._load(page, 1)
        return bool(self._res_buf[page - self._pm_at])

    def next_resident(self, addr: int, end: int) -> int:
        """The start of the first resident page in [addr, end) (addr page-aligned), or end if none."""
        page, stop = addr // PAGE_SIZE, -(-end // PAGE_SIZE)
        while page < stop:
            if not 0 <= page - self._pm_at < self._pm_len:
                self._load(page, stop - page)
            hi = min(stop, self._pm_at + self._pm_len)
            i = self._res_buf.find(b"\x01", page - self._pm_at, hi - self._pm_at)
            if i >= 0:
                return (self._pm_at + i) * PAGE_SIZE
            page = hi
        return end

    def _resident_run(self, page: int) -> int:
        """How many pages from this resident one on are resident, up to a block's."""
        most = _BLOCK // PAGE_SIZE
        if page + most > self._pm_at + self._pm_len:
            self._load(page, 1)
        i = page - self._pm_at
        gap = self._res_buf.find(b"\x00", i, i + most)
        return most if gap < 0 else gap - i

    def word(self, addr: int) -> int:
        """The 8-byte word at addr (0 on a page never touched); OSError if it cannot be read."""
        off = addr - self.block_at
        if off < 0 or off + 8 > self.block_len:
            page = addr // PAGE_SIZE
            if not self.is_resident(page):
                return 0
            pages = self._resident_run(page)
            base = page * PAGE_SIZE
            self.block_at, self.block_len = -1, 0
            n = os.preadv(self.mem, [memoryview(self.buffer)[:pages * PAGE_SIZE]], base)
            self.block_at, self.block_len = base, n
            off = addr - base
            if off + 8 > n:
                raise OSError(f"short read at {addr:#x}")
        return struct.unpack_from("<Q", self.buffer, off)[0]

    def header(self, addr: int) -> None:
        """Make the _HEADER bytes from addr (8-aligned, within one page) the block, where a header is all that is
        read next: a pool's header, the header after a large chunk. A read costs ~1 s per GiB here (the kernel
        maps each page of /proc/self/mem), so a 64 KiB block for 48 bytes is ~20x what the header costs."""
        if 0 <= addr - self.block_at <= self.block_len - _HEADER or not self.is_resident(addr // PAGE_SIZE):
            return  # already read, or never touched (word() answers 0 there)
        self.block_at, self.block_len = -1, 0
        self.block_len = os.preadv(self.mem, [memoryview(self.buffer)[:_HEADER]], addr)
        self.block_at = addr

    def resident(self, start: int, end: int) -> int:
        """Bytes of [start, end) that lie on resident pages: the pages counted in the window, less the parts of
        the first and last page outside the range."""
        if end <= start:
            return 0
        first, last = start // PAGE_SIZE, (end - 1) // PAGE_SIZE
        if not (self._pm_at <= first and last < self._pm_at + self._pm_len):
            self._load(first, last + 1 - first)  # a range that fits one window is then read in one
        total, page, cum = 0, first, self._cum
        while True:
            at = self._pm_at
            hi = min(last + 1, at + self._pm_len)
            total += PAGE_SIZE * (cum[hi - at] - cum[page - at])
            if page == first and self._res_buf[first - at]:
                total -= start - first * PAGE_SIZE
            if hi > last:
                if self._res_buf[last - at]:
                    total -= hi * PAGE_SIZE - end
                return total
            page = hi
            self._load(page, last + 1 - page)


class _Ledger:
    """Accumulates resident bytes per part; tensor ranges inside any range go to TENSORS."""

    def __init__(self, reader: Reader, tensors: list[tuple[int, int]], pinned: list[int]) -> None:
        self.reader = reader
        self.tensors = tensors
        self.starts = [t[0] for t in tensors]
        self.parts: Counter[str] = Counter()
        self.pinned = pinned  # start addresses of pinned tensor storages, sorted

    def holds_pinned(self, m: Mapping) -> bool:
        i = bisect.bisect_left(self.pinned, m.start)
        return i < len(self.pinned) and self.pinned[i] < m.end

    def account(self, start: int, end: int, part: str) -> None:
        """A window of pages at a time: the range's residency and its tensors' are then read once."""
        step = _WINDOW * PAGE_SIZE
        while start < end:
            hi = min(end, start - start % PAGE_SIZE + step)
            self._account(start, hi, part)
            start = hi

    def _account(self, start: int, end: int, part: str) -> None:
        total = self.reader.resident(start, end)
        in_tensors = 0
        i = max(0, bisect.bisect_right(self.starts, start) - 1)
        while i < len(self.tensors) and self.tensors[i][0] < end:
            lo, hi = max(start, self.tensors[i][0]), min(end, self.tensors[i][1])
            if hi > lo:
                in_tensors += self.reader.resident(lo, hi)
            i += 1
        self.parts[TENSORS] += in_tensors
        self.parts[part] += total - in_tensors


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _walk_heap(ledger: _Ledger, first: int, top_end: int) -> bool:
    """Account the chunks of one glibc heap from `first` to the end of its top chunk.

    Streams the chain (no list of chunks: a large list would itself be a glibc
    allocation). Accounts nothing and returns False if the chain of chunk sizes does not
    land exactly on top_end: then this is not a heap laid out as assumed, or it changed
    while it was read. A run of chunks of one state (in use, free) is accounted at once,
    when the state changes; the headers inside the reader's block are read as words of it
    directly, the rest through the reader (a large chunk is skipped by its size).
    """
    reader = ledger.reader
    words = reader.words
    saved = ledger.parts.copy()
    p, run_start, run_used = first, first, None
    try:
        field = reader.word(p + 8)
        at, last = reader.block_at, reader.block_at + reader.block_len - 8
        while p < top_end:
            size = field & ~7
            nxt = p + size
            if size < 16 or nxt > top_end:
                raise OSError("broken chain")
            used = False  # the top chunk is free
            if nxt < top_end:  # each header is read once: its PREV_INUSE bit is the status of the chunk before
                q = nxt + 8
                if at <= q <= last:
                    field = words[(q - at) >> 3]
                else:
                    if size >= _BLOCK and nxt % PAGE_SIZE <= PAGE_SIZE - _HEADER:
                        reader.header(nxt)  # past a large chunk: the next header, not a block of the chunk's data
                    field = reader.word(q)
                    at, last = reader.block_at, reader.block_at + reader.block_len - 8
                used = field & 1 == 1
            if used is not run_used:
                if run_used is not None:
                    ledger.account(run_start, p, GLIBC_IN_USE if run_used else GLIBC_FREE)
                run_start, run_used = p, used
            p = nxt
    except OSError:
        ledger.parts = saved
        return False
    ledger.account(run_start, top_end, GLIBC_IN_USE if run_used else GLIBC_FREE)
    return True


@functools.cache
def _sbrk() -> Callable[[int], int | None] | None:
    """glibc's sbrk, looked up once: a CDLL made per census leaves a ctypes type behind each time (~1.8 KB
    of glibc heap until the cyclic collector runs), which moved the heap the next census walks."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.sbrk.restype = ctypes.c_void_p
        libc.sbrk.argtypes = [ctypes.c_ssize_t]
        return libc.sbrk
    except (OSError, AttributeError):
        return None


def _main_heap_end() -> int | None:
    sbrk = _sbrk()
    return None if sbrk is None else sbrk(0)


def _account_main_heap(ledger: _Ledger, m: Mapping, notes: list[str]) -> None:
    end = _main_heap_end()
    walked = end is not None and m.start < end <= m.end and (
        _walk_heap(ledger, m.start, end)
        or _walk_heap(ledger, m.start, end))  # once more: the heap moved while it was read
    if not walked:
        notes.append("[heap]: chunk walk failed; counted as not walked")
        ledger.account(m.start, m.end, GLIBC_UNWALKED)
        return
    ledger.account(end, m.end, GLIBC_FREE)  # the page tail past the break


def _arena_heap(reader: Reader, m: Mapping) -> tuple[int, int] | None:
    """(first chunk, top end) if m is a glibc non-main arena heap, else None."""
    if m.start % HEAP_MAX_SIZE or "rw" not in m.perms:
        return None
    try:
        ar_ptr, _prev, size = reader.word(m.start), reader.word(m.start + 8), reader.word(m.start + 16)
    except OSError:
        return None
    if not 0 < size <= HEAP_MAX_SIZE or size % PAGE_SIZE:
        return None
    top_end = m.start + size
    if ar_ptr - m.start in _HEAP_INFO_SIZES:  # the arena's first heap: its malloc_state follows heap_info
        candidates = [ar_ptr + s for s in _MALLOC_STATE_SIZES]
    else:
        candidates = [m.start + s for s in _HEAP_INFO_SIZES]
    for c in candidates:
        first = (c + 16 + 15) // 16 * 16 - 16  # chunk2mem(first) aligned to MALLOC_ALIGNMENT
        if _chain_ends_at(reader, first, top_end):
            return first, top_end
    return None


def _chain_ends_at(reader: Reader, first: int, end: int) -> bool:
    p = first
    try:
        while p < end:
            size = reader.word(p + 8) & ~7
            if size < 16:
                return False
            p += size
    except OSError:
        return False
    return p == end


def _mmapped_chunk(reader: Reader, p: int, end: int) -> int:
    """Size of the glibc mmapped chunk whose header starts at p, or 0.

    Its header has IS_MMAPPED (0x2) set, PREV_INUSE and NON_MAIN_ARENA clear, and a
    page-multiple size that fits what is left of the mapping.
    """
    field = reader.word(p + 8)
    size = field & ~0x7
    return size if field & 0x7 == 0x2 and size and not size % PAGE_SIZE and p + size <= end else 0


def _pymalloc_pool(reader: Reader, p: int) -> int:
    """Size of the CPython pymalloc pool whose header starts at p, or 0.

    The header ends with four uints: arenaindex, szidx, nextoffset, maxnextoffset; a
    pool of block size (szidx + 1) * 16 ends where maxnextoffset + block size says, so
    the header names its own pool size (4 KiB, or 16 KiB since CPython 3.10).
    """
    if not reader.word(p + 16) or not reader.word(p + 24):  # nextpool, prevpool
        return 0
    szidx = reader.word(p + 32) >> 32
    offsets = reader.word(p + 40)
    nextoffset, maxnext = offsets & 0xFFFFFFFF, offsets >> 32
    size = (szidx + 1) * 16
    pool = maxnext + size
    if szidx >= 64 or pool not in (4096, 16384) or p % pool or not 48 <= nextoffset <= pool:
        return 0
    return pool


def _account_anonymous(ledger: _Ledger, m: Mapping, glibc: bool) -> None:
    """An anonymous mapping: glibc mmapped chunks and pymalloc pools found by their headers.

    The kernel merges adjacent anonymous mappings into one line, so headers are looked
    for at every resident page that no chunk or pool already covers. Blocks of one part
    that follow each other (the pools of an arena) are accounted as one range.
    """
    reader = ledger.reader
    p, other_from = m.start, m.start
    run_start, run_part = m.start, ""
    while p < m.end:
        part, size = None, 0
        try:
            p = reader.next_resident(p, m.end)  # no header lies on a page never touched
            if p >= m.end:
                break
            reader.header(p)  # the checks read the header only
            if glibc and (size := _mmapped_chunk(reader, p, m.end)):
                part = GLIBC_IN_USE
            elif (size := _pymalloc_pool(reader, p)) and p + size <= m.end:
                part = PYMALLOC
        except OSError:
            part = None
        if part is None:
            p += PAGE_SIZE
            continue
        if part != run_part or p != other_from:  # not the next block of the run: the run ends
            ledger.account(run_start, other_from, run_part)
            ledger.account(other_from, p, ANON_OTHER)
            run_start, run_part = p, part
        p = other_from = p + size
    ledger.account(run_start, other_from, run_part)
    ledger.account(other_from, m.end, ANON_OTHER)


def partition(storages: list[tuple[int, int]], glibc: bool, ops_dir: str | None = None,
              pinned: Sequence[tuple[int, int]] = ()) -> dict[str, object]:
    """Resident bytes per named part; `storages` are the census's (data_ptr, nbytes) pairs, `pinned` those of
    them that are page-locked (is_pinned())."""
    t0 = time.perf_counter()
    _numpy()  # before the maps are read: a first import maps libraries and grows the heap
    maps = read_smaps()
    sps = thread_stack_pointers()
    reader = Reader()
    ledger = _Ledger(reader, _merge([(p, p + n) for p, n in storages if n > 0 and p]),
                     sorted(p for p, n in pinned if n > 0 and p))
    notes: list[str] = []
    if not glibc:
        notes.append("malloc is not glibc's: heaps and mmapped chunks are not walked (anonymous, other)")
    try:
        prev: Mapping | None = None
        for m in maps:
            if m.rss:
                _account_mapping(ledger, m, prev, sps, glibc, ops_dir, notes)
            prev = m
    finally:
        reader.close()
    rss_after = int(open("/proc/self/statm", "rb").read().split()[1]) * PAGE_SIZE
    return {"parts": {k: v for k, v in ledger.parts.items() if v}, "mappings_rss": sum(m.rss for m in maps),
            "rss_after": rss_after, "mappings": len(maps), "time_s": time.perf_counter() - t0, "notes": notes}


def _account_mapping(ledger: _Ledger, m: Mapping, prev: Mapping | None, sps: list[int], glibc: bool,
                     ops_dir: str | None, notes: list[str]) -> None:
    if m.path == "[heap]":
        if glibc:
            _account_main_heap(ledger, m, notes)
        else:
            ledger.account(m.start, m.end, ANON_OTHER)
    elif m.path == "[stack]":
        ledger.parts[STACKS] += m.rss
    elif _is_shared(m.path):
        ledger.account(m.start, m.end, PINNED_SLACK if ledger.holds_pinned(m) else SHARED)
    elif m.path.startswith("/"):
        ledger.account(m.start, m.end, file_part(m.path, ops_dir))
    elif not m.anonymous:  # [vdso], [vvar], [vsyscall]: the kernel's own pages
        ledger.parts[ANON_OTHER] += m.rss
    elif glibc and (heap := _arena_heap(ledger.reader, m)) is not None:
        first, top_end = heap
        if _walk_heap(ledger, first, top_end):
            ledger.account(m.start, first, GLIBC_IN_USE)  # heap_info and malloc_state: allocator metadata
            ledger.account(top_end, m.end, GLIBC_FREE)
        else:
            notes.append(f"arena heap at {m.start:#x}: chunk walk failed; counted as not walked")
            ledger.account(m.start, m.end, GLIBC_UNWALKED)
    elif _is_stack(m, prev, sps):
        ledger.account(m.start, m.end, STACKS)
    else:
        _account_anonymous(ledger, m, glibc)


def _is_stack(m: Mapping, prev: Mapping | None, sps: list[int]) -> bool:
    """A thread's stack: it holds a blocked thread's stack pointer, or sits on a guard page."""
    if any(m.start <= sp < m.end for sp in sps):
        return True
    return (prev is not None and prev.end == m.start and prev.anonymous and prev.perms.startswith("---")
            and prev.end - prev.start <= 1 << 20 and m.perms.startswith("rw"))
