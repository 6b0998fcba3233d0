"""The CUDA path's CPU-only parts: parsing torch's allocator dicts, the pinned/pageable and device split.

The dicts below are recorded input in the shape torch returns (the documented key sets of
`torch.cuda.host_memory_stats()` before and after torch 2.10, and `torch.cuda.memory_stats()`); their
values are chosen for the test, not read from a device. Nothing here pretends to be a GPU: the one
test that runs training runs it on the CPU accelerator and checks what a real run reads there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rssprobe.analysis.hostsplit import NO_DEVICE, split
from rssprobe.worker.cudaprobe import cuda_stats, device_figures, flatten, host_figures

from .conftest import summary

MiB = 1 << 20


def _stat(prefix: str, current: int, peak: int, allocated: int = 0, freed: int = 0) -> dict[str, int]:
    return {f"{prefix}.current": current, f"{prefix}.peak": peak, f"{prefix}.allocated": allocated,
            f"{prefix}.freed": freed}


# torch >= 2.10 docs: allocations/allocated_bytes = owned (active + cached); active_* = checked out.
# A request of 3 MiB pinned, freed, then 1 MiB pinned and kept: the pool holds the rounded 4 MiB block.
RECORDED_ACTIVE_SCHEMA = {
    **_stat("allocations", 1, 1, 1, 0), **_stat("allocated_bytes", 4 * MiB, 4 * MiB, 4 * MiB, 0),
    **_stat("active_requests", 1, 1, 2, 1), **_stat("active_bytes", 1 * MiB, 4 * MiB, 5 * MiB, 4 * MiB),
    "num_host_alloc": 1, "num_host_free": 0,
    "host_alloc_time.total": 120, "host_alloc_time.max": 120, "host_alloc_time.min": 120,
    "host_alloc_time.count": 1, "host_alloc_time.avg": 120,
}
# torch 2.7 - 2.9 docs: allocated_bytes = handed out to callers; segment/reserved_bytes = held.
RECORDED_SEGMENT_SCHEMA = {
    **_stat("allocated", 1, 1, 2, 1), **_stat("allocated_bytes", 1 * MiB, 4 * MiB, 5 * MiB, 4 * MiB),
    **_stat("segment", 1, 1, 1, 0), **_stat("reserved_bytes", 4 * MiB, 4 * MiB, 4 * MiB, 0),
    "num_host_alloc": 1, "num_host_free": 0,
}


def test_both_documented_host_key_sets_read_the_same_figures() -> None:
    new, old = host_figures(RECORDED_ACTIVE_SCHEMA), host_figures(RECORDED_SEGMENT_SCHEMA)
    assert new is not None and old is not None
    assert (new["schema"], old["schema"]) == ("active", "segment")
    for figures in (new, old):
        assert figures["in_use"] == 1 * MiB and figures["in_use_peak"] == 4 * MiB
        assert figures["held"] == 4 * MiB and figures["held_peak"] == 4 * MiB
        assert figures["in_use_blocks"] == 1 and figures["held_blocks"] == 1
        assert figures["host_allocs"] == 1 and figures["host_frees"] == 0


def test_nested_host_dict_is_flattened_like_torch_does() -> None:
    nested = {"allocated_bytes": {"current": 8, "peak": 8}, "active_bytes": {"current": 8, "peak": 8},
              "host_alloc_time": {"total": 1}}
    assert flatten(nested)["allocated_bytes.current"] == 8
    assert host_figures(nested)["held"] == 8


def test_empty_or_unknown_stats_are_not_zeros() -> None:
    assert host_figures({}) is None and device_figures({}) is None  # CUDA not initialised: not available
    unknown = host_figures({"pinned_bytes.current": 5, "num_host_alloc": 1})
    assert unknown == {"schema": "unknown", "raw": {"pinned_bytes.current": 5}}


def test_device_figures_read_the_documented_keys() -> None:
    recorded = {"allocated_bytes.all.current": 10, "allocated_bytes.all.peak": 12,
                "reserved_bytes.all.current": 20 * MiB, "reserved_bytes.all.peak": 20 * MiB,
                "requested_bytes.all.current": 9, "allocated_bytes.large_pool.current": 0}
    assert device_figures(recorded) == {"allocated": 10, "allocated_peak": 12, "reserved": 20 * MiB,
                                        "reserved_peak": 20 * MiB, "requested": 9}


def test_no_cuda_here_reads_none() -> None:
    if torch.cuda.is_available():  # on a GPU machine tests/gpu checks the measured figures instead
        return
    assert cuda_stats(torch) is None


def test_split_keeps_device_bytes_out_of_the_host_budget() -> None:
    base = {"allocated": 100, "pinned": 0, "device": {"roles": {"other": {"allocated": 50}}, "allocated": 50}}
    census = {"allocated": 1100, "pinned": 400,
              "device": {"devices": ["cuda:0"], "allocated": 650,
                         "roles": {"bit16_params": {"allocated": 200}, "buckets": {"allocated": 400},
                                   "other": {"allocated": 50}}}}
    out = split(census, base, lambda v: None if v is None else v / 100)
    assert out["host_pinned_bytes_per_param"] == 4.0 and out["host_pageable_bytes_per_param"] == 6.0
    assert out["device"]["roles"] == {"buckets": 4.0, "bit16_params": 2.0, "other": 0.0}
    assert out["device"]["allocated_bytes_per_param"] == 6.0
    no_device = split({**census, "device": None}, {**base, "device": None}, lambda v: v)
    assert no_device["device"] is None and no_device["device_note"] == NO_DEVICE
    old = split({"allocated": 1}, {"allocated": 0}, lambda v: v)
    assert old["host_pinned_bytes_per_param"] is None  # not recorded: never a 0 as if measured


@pytest.mark.skipif(torch.cuda.is_available(), reason="the shared tiny run is on the CUDA accelerator here: "
                    "tests/gpu checks its pinned and device figures")
@pytest.mark.worker
def test_cpu_accelerator_census_reads_zero_pinned_and_no_device(tiny_baseline: Path) -> None:
    """A real tiny run on the CPU accelerator: pin_memory is a no-op there, so every host byte is pageable
    (is_pinned() asked of each storage), and there is no device part."""
    events = [json.loads(line) for line in (tiny_baseline / "events.jsonl").read_text().splitlines()]
    censuses = [e for e in events if e["event"] == "census"]
    assert censuses and all(c["pinned"] == 0 for c in censuses)
    assert all(c["allocated"] > 0 for c in censuses if c["at"] != "pre_model")  # buffers that could be pinned
    assert all(c["device"] is None for c in censuses)
    assert all(e.get("cuda") is None for e in events if e["event"] == "step")
    budget = summary(tiny_baseline)["budget"]
    assert budget["host_pinned_bytes_per_param"] == 0.0
    # every allocated host byte is pageable: the roles' allocated bytes (20 B/param of ZeRO buffers + temp buffers)
    assert abs(budget["host_pageable_bytes_per_param"] - sum(budget["roles_allocated"].values())) < 1e-9
    assert budget["host_pageable_bytes_per_param"] >= 20.0
    assert budget["device"] is None and budget["device_note"] == NO_DEVICE


@pytest.mark.worker
def test_no_cuda_columns_read_missing_not_zero(tiny_baseline: Path) -> None:
    import pandas as pd

    steps = pd.read_parquet(tiny_baseline / "steps.parquet")
    columns = [c for c in steps.columns if c.startswith(("cuda_", "pinned_"))]
    assert "cuda_allocated" in columns and "pinned_held" in columns and len(steps) > 0
    if not torch.cuda.is_available():
        assert steps[columns].isna().all().all()  # not available: no CUDA device, never zeros


H200_RUNS = Path(__file__).parents[1] / "reports" / "gpu-check-h200" / "runs.tar.gz"


def test_a_run_recorded_on_an_h200_reads_back_with_its_cuda_figures(tmp_path: Path) -> None:
    """A real run of the GPU check on an NVIDIA H200 (reports/gpu-check.md), as its worker wrote it: summarised
    on a machine without CUDA, its device part and pinned host buffers read back as measured there."""
    import tarfile

    with tarfile.open(H200_RUNS) as archive:
        archive.extractall(tmp_path, filter="data")
    s = summary(tmp_path / "runs0" / "default-baseline")
    assert s["accelerator"] == "cuda" and s["cuda"] == "measured" and s["params"] == 16_785_408
    budget = s["budget"]
    assert budget["device"]["roles"]["bit16_params"] == pytest.approx(2.0, abs=0.01)
    assert "bit16_params" not in budget["roles"]  # on the device, never in the host budget
    # fp32 master 4 + fp32 grad 4 + bf16 staging 2 + temp grad buffer 0.5 pinned; the Adam states (8) pageable
    assert budget["host_pinned_bytes_per_param"] == pytest.approx(10.5, abs=0.01)
    assert budget["host_pageable_bytes_per_param"] == pytest.approx(8.0, abs=0.01)
