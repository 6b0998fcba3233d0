"""torch's caching host allocator rule (rssprobe.analysis.pinrule), pure: sizes chosen from the rule itself,
and the one pinned tensor the H200 check measured as the known answer of the rounding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rssprobe.analysis.pinrule import MIB, PAGE, Rule, log2_ceil, power_of_two_ceil, predict
from rssprobe.config import torch_alloc_conf as allocconf

H200 = Path(__file__).parents[1] / "reports" / "gpu-check-h200" / "gpu-check.json"


def allocs(*sizes: int, via: str = "torch") -> list[tuple[object, ...]]:
    return [("alloc", i, size, via) for i, size in enumerate(sizes)]


def test_the_h200s_measured_pinned_tensor_is_the_rules_answer() -> None:
    """3 MiB + 4097 B pinned on the H200 (torch 2.11) grew the allocator's held bytes by exactly its block."""
    measured = json.loads(H200.read_text())["pinned_tensor"]
    rule = Rule.of(json.loads(H200.read_text())["environment"]["torch"], None)
    p = predict(allocs(measured["requested"]), rule)
    assert p.held == measured["held_delta"] == p.blocks[0]


@pytest.mark.parametrize("k", range(14, 35, 4))
def test_just_below_a_power_of_two_holds_its_size_just_above_nearly_twice(k: int) -> None:
    """Partitions chosen from the rule: a page below 2^k is held in 2^k (slack < one page), a page above in
    2^(k+1) (slack 2^k less a page: ~1x the request)."""
    below, above = (1 << k) - PAGE, (1 << k) + PAGE
    rule = Rule.of("2.11.0", None)
    assert predict(allocs(below), rule).held - below == PAGE
    assert predict(allocs(above), rule).held - above == (1 << k) - PAGE


def test_a_round_threshold_below_a_buffer_leaves_it_exact_on_torch_2_13_only() -> None:
    buffer, small = 16 * MIB + 1, 2 * MIB + 1
    conf = "pinned_max_round_threshold_mb:8"
    p = predict(allocs(buffer, small), Rule.of("2.13.0", conf))
    assert p.blocks == {0: buffer, 1: 4 * MIB}  # above the threshold: its size; below: still rounded
    # torch 2.12 has no such key (such a run is refused before it starts): the rule ignores it
    assert predict(allocs(buffer), Rule.of("2.12.1", conf)).blocks[0] == 32 * MIB


def test_the_cache_threshold_frees_large_blocks_and_keeps_small_ones() -> None:
    conf = "pinned_max_cached_size_mb:4"
    ops = [*allocs(8 * MIB, 2 * MIB), ("free", 0), ("free", 1)]
    p = predict(ops, Rule.of("2.13.0", conf))
    assert p.blocks[0] == 8 * MIB  # above the cache threshold: not rounded either
    assert p.held == 2 * MIB  # the large one given back, the small one cached (still held)
    assert predict(ops, Rule.of("2.11.0", conf)).held == 10 * MIB  # torch 2.11 caches everything


def test_a_freed_block_is_reused_by_a_request_of_its_size_class() -> None:
    ops = [("alloc", 0, 3 * MIB, "torch"), ("free", 0), ("alloc", 1, 3 * MIB + 5, "torch"),
           ("alloc", 2, 5 * MIB, "torch")]
    p = predict(ops, Rule.of("2.11.0", None))
    assert 1 in p.reused and p.new[1] == 0 and p.blocks[1] == 4 * MIB
    assert p.held == 4 * MIB + 8 * MIB  # never split, never merged: the 5 MiB request gets its own 8 MiB


def test_torch_2_13_hands_out_a_too_small_exact_block_and_2_14_does_not() -> None:
    """Above the round threshold sizes stay exact but share a Log2 bucket: 2.13 takes the last freed block of
    the bucket whatever its size (flagged), 2.14 looks for one large enough."""
    conf = "pinned_max_round_threshold_mb:1"
    ops = [("alloc", 0, 5 * MIB, "torch"), ("free", 0), ("alloc", 1, 7 * MIB, "torch")]
    assert log2_ceil(5 * MIB) == log2_ceil(7 * MIB)
    old = predict(ops, Rule.of("2.13.0", conf))
    assert old.undersized == [{"id": 1, "request": 7 * MIB, "block": 5 * MIB}] and old.held == 5 * MIB
    new = predict(ops, Rule.of("2.14.1", conf))
    assert not new.undersized and new.blocks[1] == 7 * MIB and new.held == 12 * MIB


def test_registered_buffers_are_held_at_their_own_pages() -> None:
    p = predict([*allocs(3 * MIB + 4097, via="register"), ("free", 0)], Rule.of("2.11.0", None))
    assert p.blocks[0] == 3 * MIB + 2 * PAGE and p.held == 0 and p.pinned == 0  # released on free


def test_a_reserve_segment_is_pinned_once_and_serves_what_fits() -> None:
    conf = "pinned_reserve_segment_size_mb:16"
    p = predict(allocs(3 * MIB, 5 * MIB, 20 * MIB), Rule.of("2.11.0", conf))
    assert p.blocks == {0: 4 * MIB, 1: 8 * MIB, 2: 32 * MIB}  # rounded as ever
    assert p.segment == 16 * MIB and p.in_segment == 12 * MIB and p.held == 44 * MIB
    assert p.pinned == 16 * MIB + 32 * MIB  # the segment whole, the block that did not fit outside it


def test_host_register_keeps_the_rounding() -> None:
    rule = Rule.of("2.11.0", "pinned_use_cuda_host_register:True")
    assert rule.host_register and predict(allocs(3 * MIB + 1), rule).held == 4 * MIB


def test_power_of_two_ceil_is_llvms() -> None:
    assert [power_of_two_ceil(n) for n in (0, 1, 2, 3, 4, 5, 4096, 4097)] == [0, 1, 2, 4, 4, 8, 4096, 8192]


def test_alloc_conf_syntax() -> None:
    assert allocconf.split("a:1, roundup_power2_divisions:[64:8,>:1],b_2:True") == {
        "a": "1", "roundup_power2_divisions": "[64:8,>:1]", "b_2": "True"}
    for bad in ("a", "a:", ":1", "A:1", "a:1,,b:2"):
        with pytest.raises(ValueError):
            allocconf.split(bad)


def test_cuda_only_keys_are_judged_by_the_release() -> None:
    assert allocconf.cuda_only_verdict("pinned_use_cuda_host_register", "2.13.0") is None
    assert allocconf.cuda_only_verdict("pinned_free_catch_all", "2.12.1") is None
    assert "does not accept" in (allocconf.cuda_only_verdict("pinned_free_catch_all", "2.11.0") or "")
    assert "does not accept" in (allocconf.cuda_only_verdict("pinned_max_round_thresold_mb", "2.13.0") or "")
    assert "cannot tell" in (allocconf.cuda_only_verdict("pinned_use_cuda_host_register", "2.8.0") or "")
