"""The CUDA path against a real device: known answers for pinned host memory, the CUDA caching allocator,
the census's host/device split, and PR #8132's float-scale on the GPU path (whose sync it is said to avoid).

Skipped with the reason "no CUDA device" where CUDA is absent (tests/gpu/conftest.py). Every figure the
asserts read is also written to the check's JSON (FIGURES), so a failure still says what was measured.
Written without a device to run it on: nothing here has been verified on real hardware yet.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from rssprobe.worker import procfs
from rssprobe.worker.cudaprobe import host_figures
from rssprobe.worker.memmap import Reader

from ..conftest import STEADY_GLIBC, rssprobe, summary

MiB = 1 << 20
STEPS = 12  # step-time ratio: mean of steps 2..STEPS (the first step allocates the Adam states)
# pinned by DeepSpeed when offload_optimizer.pin_memory (tiny: true), through tensor.pin_memory(), i.e. torch's
# caching host allocator (DeepSpeed's default DS_PIN_MEMORY_BACKEND=torch; 'native' registers memory instead)
ZERO_HOST_ROLES = ("fp32_master", "fp32_grad", "h2d_staging")
DEVICE_ROLES = ("bit16_params",)  # ZeRO-2 with CPU optimizer offload keeps the bit16 params on the GPU


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _host() -> dict[str, Any]:
    zeros = {"held": 0, "in_use": 0, "host_allocs": 0}
    return host_figures(torch.cuda.host_memory_stats()) or zeros


def _mapping_of(addr: int) -> str:
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= addr < hi:
                return " ".join(fields[1:2] + fields[5:]) or fields[1]
    return "not found"


def test_pinned_host_tensor_shows_in_pinned_figures_and_rss(figures: dict[str, Any]) -> None:
    torch.cuda.init()
    requested = 3 * MiB + 4097  # not a power of two: the caching host allocator rounds it up (pytorch #95823)
    before, rss0 = _host(), procfs.smaps_rollup()["rss"]
    t = torch.empty(requested, dtype=torch.uint8, pin_memory=True)
    t.fill_(1)
    after, rss1 = _host(), procfs.smaps_rollup()["rss"]
    reader = Reader()
    try:
        resident = reader.resident(t.data_ptr(), t.data_ptr() + requested)
    finally:
        reader.close()
    got = {"requested": requested, "rounded": _next_pow2(requested), "schema": after.get("schema"),
           "held_delta": after["held"] - before["held"], "in_use_delta": after["in_use"] - before["in_use"],
           "host_allocs_delta": after["host_allocs"] - before["host_allocs"], "rss_delta": rss1 - rss0,
           "pagemap_resident": resident, "mapping": _mapping_of(t.data_ptr()), "is_pinned": t.is_pinned()}
    figures["pinned_tensor"] = got
    assert got["is_pinned"]
    assert got["host_allocs_delta"] == 1, got  # a fresh block, not one reused from the cache
    # the rounding is visible: what the allocator holds is the next power of two, not what was asked
    assert got["held_delta"] == got["rounded"] > requested, got
    assert requested <= got["in_use_delta"] <= got["rounded"], got
    # and it is host RAM: the pages are in this process's RSS (smaps_rollup, exact)
    assert got["rss_delta"] >= requested - 64 * 1024, got


@pytest.fixture(scope="module")
def cuda_runs(runs_dir: Path, figures: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tiny scenario on CUDA, baseline then PR #8132, one fresh worker each."""
    out: dict[str, dict[str, Any]] = {}
    for label, flag in (("baseline", "--baseline"), ("pr8132", "--patched")):
        run = runs_dir / f"cuda-{label}"
        rssprobe("run", "tiny", flag, "--steps", str(STEPS), *STEADY_GLIBC, "--out", str(run), check=True,
                 env={"DS_ACCELERATOR": "cuda"})
        events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
        out[label] = {"dir": run, "events": events, "summary": summary(run)}
    figures["runs"] = {label: {
        "accelerator": r["summary"]["accelerator"], "cuda": r["summary"]["cuda"],
        "step_time_s": [e["time_s"] for e in r["events"] if e["event"] == "step"],
        "cuda_per_step": [e.get("cuda") for e in r["events"] if e["event"] == "step"],
        "budget": r["summary"]["budget"], "interventions": r["summary"]["interventions"],
        "census": [{k: e.get(k) for k in ("at", "roles", "pinned", "allocated", "resident", "device")}
                   for e in r["events"] if e["event"] == "census"],
    } for label, r in out.items()}
    return out


def test_runs_on_cuda_and_fills_the_cuda_columns_every_step(cuda_runs: dict[str, dict[str, Any]]) -> None:
    for label, r in cuda_runs.items():
        assert r["summary"]["accelerator"] == "cuda", label
        steps = [e for e in r["events"] if e["event"] == "step"]
        assert len(steps) == STEPS, label
        for e in steps:
            cuda = e["cuda"]
            assert cuda is not None, (label, e["step"])
            assert all(cuda[k] and cuda[k] > 0 for k in ("allocated", "allocated_peak", "reserved")), (label, cuda)
            assert cuda["reserved"] >= cuda["allocated"], (label, cuda)
            assert cuda["pinned_host"] is not None and cuda["pinned_host"]["schema"] != "unknown", (label, cuda)
            assert cuda["pinned_host"]["held"] > 0, (label, cuda)  # the offloaded buffers are pinned
        assert r["summary"]["cuda"] == "measured"
        table = pd.read_parquet(r["dir"] / "steps.parquet")  # the per-step table the reports read
        columns = ["cuda_allocated", "cuda_allocated_peak", "cuda_reserved", "pinned_held", "pinned_in_use"]
        assert len(table) == STEPS and table[columns].notna().all().all(), (label, table[columns])


def test_gpu_buffers_are_in_the_cuda_figures_not_the_host_budget(cuda_runs: dict[str, dict[str, Any]]) -> None:
    for label, r in cuda_runs.items():
        params = r["summary"]["params"]
        steps = [e for e in r["events"] if e["event"] == "step"]
        probe_before = {"after_init": next(e for e in r["events"] if e["event"] == "init"),
                        "after_first_step": steps[0], "end": steps[-1]}
        for census in (e for e in r["events"] if e["event"] == "census" and e["at"] != "pre_model"):
            device = census["device"]
            assert device is not None and device["devices"] == ["cuda:0"], (label, census["at"])
            for role in DEVICE_ROLES:
                assert abs(device["roles"][role]["allocated"] / params - 2.0) < 0.01, (label, census["at"], device)
                assert role not in census["roles"], (label, census["at"], role)  # never in the host budget
            if "buckets" in device["roles"]:  # gradient buckets, where alive at a census point
                assert "buckets" not in census["roles"], (label, census["at"])
            # every device byte the census found is inside the caching allocator's figure read just before it
            # (the init event, step 1's, the last step's): blocks are rounded up, never down
            allocator = probe_before[census["at"]]["cuda"]
            assert allocator["allocated"] >= device["allocated"], (label, census["at"], allocator, device)
        budget = r["summary"]["budget"]
        assert budget["device"]["roles"]["bit16_params"] == pytest.approx(2.0, abs=0.01)
        assert "bit16_params" not in budget["roles"]


def test_host_roles_are_pinned_cpu_tensors(cuda_runs: dict[str, dict[str, Any]]) -> None:
    for label, r in cuda_runs.items():
        end = next(e for e in r["events"] if e["event"] == "census" and e["at"] == "end")
        for role in ZERO_HOST_ROLES:
            got = end["roles"][role]
            assert got["pinned"] == got["allocated"] > 0, (label, role, got)
            assert got["resident"] >= got["allocated"] * 0.99, (label, role, got)  # pinned pages are RSS
        assert end["pinned"] > 0
        last = [e for e in r["events"] if e["event"] == "step"][-1]["cuda"]["pinned_host"]
        assert last["held"] >= end["pinned"], (label, last, end["pinned"])  # they came from the host allocator
        # fp32 master 4 + fp32 grad 4 + bit16 staging 2; the Adam states are pageable (CPU Adam allocates them)
        assert r["summary"]["budget"]["host_pinned_bytes_per_param"] >= 10.0 - 0.01


def test_pr8132_float_scale_fires_and_its_sync_is_timed(cuda_runs: dict[str, dict[str, Any]],
                                                        figures: dict[str, Any]) -> None:
    (float_scale,) = [i for i in cuda_runs["pr8132"]["summary"]["interventions"]
                      if i["name"] == "pr8132.float-scale"]
    assert float_scale["took_effect"] and float_scale["count"] == STEPS, float_scale
    mean = {label: r["summary"]["mean_step_time_s"] for label, r in cuda_runs.items()}
    ratio = mean["pr8132"] / mean["baseline"]
    devices = {k: v for k, v in float_scale["effects"].items() if k.startswith("scale_device.")}
    figures["float_scale"] = {"effects": float_scale["effects"], "mean_step_time_s": mean,
                              "step_time_ratio_pr8132_over_baseline": ratio,
                              "note": "one run each, measured; float() of a CUDA scale is a device sync"}
    print(f"\nPR #8132 float-scale on CUDA: {float_scale['count']} conversions, scale on {devices}; "
          f"mean step time pr8132/baseline = {ratio:.3f} ({mean['pr8132']:.4f} s / {mean['baseline']:.4f} s)")
    assert ratio > 0


def test_sync_of_a_cuda_scalar_costs_what_it_costs(figures: dict[str, Any]) -> None:
    """The .item()-like sync itself, apart from training: float() of a 0-dim CUDA tensor behind queued work
    waits for that work; a multiply by the tensor does not."""
    x = torch.randn(4096, 4096, device="cuda")
    scale = torch.tensor(0.5, device="cuda")
    (x @ x).mul_(scale)  # warm-up: cuBLAS handle and kernels loaded before anything is timed
    torch.cuda.synchronize()
    times = {}
    for how in ("tensor", "float"):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            y = x @ x
            y.mul_(scale if how == "tensor" else float(scale))
        enqueued = time.perf_counter() - t0
        torch.cuda.synchronize()
        times[how] = {"enqueue_s": enqueued, "total_s": time.perf_counter() - t0}
    figures["scalar_sync"] = times
    assert times["float"]["enqueue_s"] > times["tensor"]["enqueue_s"], times  # float() waited for the matmuls

