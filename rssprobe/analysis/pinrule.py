"""What torch's CUDA caching host allocator holds for a sequence of pinned requests: the rule, as torch's
source has it, so that a CPU run (where pinning is a no-op) predicts CUDA's pinned holding.

Read from the release wheels' own headers, torch/include/ATen/core/CachingHostAllocator.h (2.10.0+cu128,
2.11.0+cu130 git 70d99e99, 2.12.1+cu130, 2.13.0+cpu git cf30153c, 2.14.1 git 5c488690):

* `allocate` (2.11.0 l.282-345; 2.13.0 l.282-350; 2.14.1 l.317-395): torch <= 2.12 always rounds,
  `roundSize = c10::llvm::PowerOf2Ceil(size)` (2.10.0 l.251, 2.11.0/2.12.1 l.302); torch >= 2.13 rounds only
  when `size <= pinned_max_round_threshold() && size <= pinned_max_cached_size()`, else takes the exact size
  (2.13.0 l.302-309, 2.14.1 l.342-349). A request is served from the free list first, else a new block of
  roundSize is made (`allocate_host_memory`); blocks are never split (the header's design note, l.217).
* `get_free_block` (2.11.0 l.624, 2.13.0 l.621): the free list is bucketed by `Log2_64_Ceil(roundSize)`
  (l.472-475) and the last freed block of the bucket is taken, whatever its size: with exact (unrounded)
  sizes in a bucket, torch 2.13 can hand out a block smaller than the request (the prediction flags it).
  2.14.1 (l.695-715) scans the bucket for a block >= the request, else makes a new one.
* `free` -> `maybe_cache_block` (2.13.0 l.734-748, 2.14.1 l.818-850): a freed block larger than
  `pinned_max_cached_size` is given back (cudaFreeHost), else cached on its free list; torch <= 2.12 caches
  every freed block (2.11.0 l.388). Cached blocks stay counted.
* `add_allocated_block` / `destroy_block`: host_memory_stats' `allocated_bytes` (the "active" key set,
  torch >= 2.10; rssprobe's `held`) grows by each new block's size and drops only when a block is destroyed
  (too large to cache, or empty_cache). That is the figure the H200 runs measured (reports/gpu-check-h200).
* aten/src/ATen/cuda/CachingHostAllocator.cpp (pytorch main as stored, commit 03258ab2, not a release tag):
  `pinned_use_cuda_host_register:True` mallocs roundSize, touches every page and cudaHostRegisters the whole
  rounded block: the same rounding, anonymous private memory instead of a shared /dev/zero mapping;
  `pinned_reserve_segment_size_mb:N` pins one N MiB segment at the first allocation and serves blocks from it
  bump-allocated in 4 KiB steps (PinnedReserveSegment::allocate, header l.71-86), never returned; a block
  that does not fit goes the usual way. The segment itself is not in `allocated_bytes`.
* The keys: `pinned_max_round_threshold_mb` and `pinned_max_cached_size_mb` are first in torch 2.13.0 (in
  its libc10.so; absent from 2.12.1's); MiB = 2^20 bytes and the value is read with stoull (`1.5` is 1),
  checked by calling 2.13.0's AcceleratorAllocatorConfig::parseArgs from C++.

Not modelled: blocks freed while a stream still uses them wait for their CUDA event before reuse (here a
free is immediate), and torch's own small pinned blocks (non_blocking device-to-host copies: 3 blocks, 13 B
on the H200 tiny run), which are not DeepSpeed requests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..config.torch_alloc_conf import release, split

MIB = 1 << 20
PAGE = 4096
SEGMENT_STEP = 4096  # PinnedReserveSegment rounds every block to 4 KiB
KEYS_SINCE = {"pinned_max_round_threshold_mb": (2, 13), "pinned_max_cached_size_mb": (2, 13)}
EXACT_VIA = ("register", "native")  # pinned at their own size (pin.register; DeepSpeed's native backend)


def power_of_two_ceil(n: int) -> int:
    """c10::llvm::PowerOf2Ceil: the smallest power of two >= n (0 for 0)."""
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


def log2_ceil(n: int) -> int:
    """c10::llvm::Log2_64_Ceil: the free-list bucket of a block of n bytes."""
    return (n - 1).bit_length() if n > 1 else 0


def _mib(value: str) -> int:
    """A *_mb value as torch reads it (stoull: leading digits), in bytes."""
    m = re.match(r"\s*(\d+)", value)
    if not m:
        raise ValueError(f"{value!r} is not a number of MiB")
    return int(m.group(1)) * MIB


@dataclass(frozen=True)
class Rule:
    """The caching host allocator of one torch release under one PYTORCH_CUDA_ALLOC_CONF."""

    torch: str = "2.13.0"
    round_threshold: int | None = None  # bytes; None: no limit (the default: every size rounded)
    max_cached: int | None = None
    host_register: bool = False
    reserve_segment: int = 0

    @classmethod
    def of(cls, torch_version: str | None, conf: str | None) -> Rule:
        """The rule for a run's torch and the alloc conf its worker saw (keys the torch lacks are ignored:
        such a run was refused before it started)."""
        keys = split(conf) if conf else {}
        v = release(torch_version)[:2]

        def has(key: str) -> bool:
            return key in keys and v >= KEYS_SINCE.get(key, (0, 0))

        return cls(torch=torch_version or "unknown",
                   round_threshold=_mib(keys["pinned_max_round_threshold_mb"])
                   if has("pinned_max_round_threshold_mb") else None,
                   max_cached=_mib(keys["pinned_max_cached_size_mb"]) if has("pinned_max_cached_size_mb") else None,
                   host_register=keys.get("pinned_use_cuda_host_register") == "True",
                   reserve_segment=_mib(keys["pinned_reserve_segment_size_mb"])
                   if "pinned_reserve_segment_size_mb" in keys else 0)

    @property
    def reuse_checks_size(self) -> bool:
        return release(self.torch) >= (2, 14, 0)

    def block_size(self, size: int) -> int:
        """The block a request of `size` bytes gets when none is free to reuse."""
        limit = min(x for x in (self.round_threshold, self.max_cached, 1 << 64) if x is not None)
        return power_of_two_ceil(size) if size <= limit else size

    def cached(self, block: int) -> bool:
        return self.max_cached is None or block <= self.max_cached


@dataclass
class Prediction:
    """Per request: the bytes pinned for it (its block, or its own pages when registered) and whether a
    cached block served it; totals at the end of the sequence."""

    blocks: dict[int, int] = field(default_factory=dict)  # request id -> bytes of the block holding it
    new: dict[int, int] = field(default_factory=dict)  # request id -> bytes newly pinned for it
    reused: set[int] = field(default_factory=set)
    held: int = 0  # the allocator's allocated_bytes: blocks in use and cached
    held_peak: int = 0
    exact: int = 0  # registered / native buffers alive, at their own page-rounded size
    segment: int = 0  # a reserve segment pinned (once, whole)
    in_segment: int = 0  # block bytes served from the segment (in `held`, inside `segment`)
    undersized: list[dict[str, int]] = field(default_factory=list)  # torch 2.13: a reused block too small

    @property
    def pinned(self) -> int:
        """Host memory page-locked at the end: the allocator's blocks (those outside the reserve segment),
        the segment, and the exact-size buffers."""
        return self.held - self.in_segment + self.segment + self.exact


def predict(ops: list[tuple[Any, ...]], rule: Rule) -> Prediction:
    """Replay ('alloc', id, bytes, via) and ('free', id) in order through the allocator's rule."""
    p = Prediction()
    free_lists: dict[int, list[tuple[int, bool]]] = {}  # bucket -> cached (block size, in segment), last freed last
    seg_used = 0
    owner: dict[int, tuple[str, int, bool]] = {}  # id -> (kind, block bytes, from segment)
    for op in ops:
        if op[0] == "alloc":
            _kind, rid, size, via = op
            if via in EXACT_VIA:
                pages = -(-size // PAGE) * PAGE
                p.blocks[rid] = p.new[rid] = pages
                p.exact += pages
                owner[rid] = ("exact", pages, False)
                continue
            if size <= 0:
                p.blocks[rid] = p.new[rid] = 0
                continue
            want = rule.block_size(size)
            bucket = free_lists.get(log2_ceil(want), [])
            pick = next((i for i in range(len(bucket) - 1, -1, -1) if bucket[i][0] >= want), None) \
                if rule.reuse_checks_size else (len(bucket) - 1 if bucket else None)
            if pick is not None:
                block, in_segment = bucket.pop(pick)
                if block < size:
                    p.undersized.append({"id": rid, "request": size, "block": block})
                p.blocks[rid], p.new[rid] = block, 0
                p.reused.add(rid)
                owner[rid] = ("block", block, in_segment)
                continue
            from_segment = False
            if rule.reserve_segment:
                step = -(-want // SEGMENT_STEP) * SEGMENT_STEP
                p.segment = rule.reserve_segment  # pinned at the first allocation, whatever it serves
                if seg_used + step <= rule.reserve_segment:
                    seg_used += step
                    from_segment = True
                    p.in_segment += want
            p.blocks[rid], p.new[rid] = want, 0 if from_segment else want
            p.held += want
            p.held_peak = max(p.held_peak, p.held)
            owner[rid] = ("block", want, from_segment)
        else:
            gone = owner.pop(op[1], None)
            if gone is None:
                continue
            kind, block, from_segment = gone
            if kind == "exact":
                p.exact -= block
            elif rule.cached(block):
                free_lists.setdefault(log2_ceil(block), []).append((block, from_segment))
            else:  # destroyed: out of the stats; a segment block's bytes stay pinned inside the segment
                p.held -= block
                p.in_segment -= block if from_segment else 0
    return p
