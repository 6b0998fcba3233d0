"""End to end: real DeepSpeed ZeRO-2 CPU-offload runs through the CLI, in fresh processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pandas as pd
import pytest

from rssprobe.config import scenario

from . import noise
from .conftest import rssprobe, summary
from .noise import PAGE


@pytest.mark.worker
def test_tiny_run_produces_a_complete_plausible_run_directory(tiny_baseline: Path) -> None:
    manifest = json.loads((tiny_baseline / "manifest.json").read_text())
    assert manifest["status"] == "ok" and manifest["exit_code"] == 0
    assert manifest["versions"]["torch"] == version("torch")
    assert manifest["versions"]["deepspeed"] == version("deepspeed")
    assert manifest["scenario"]["name"] == "tiny" and manifest["malloc_env"] == {"MALLOC_MMAP_THRESHOLD_": "65536"}
    for key in ("command", "host", "started", "ended", "allocator", "patches"):
        assert key in manifest

    steps = pd.read_parquet(tiny_baseline / "steps.parquet")
    assert list(steps["step"]) == [1, 2, 3, 4]
    for column in ("rss", "peak", "glibc_uordblks", "glibc_fordblks", "glibc_hblkhd", "smaps_uss"):
        assert steps[column].notna().all(), column
    assert (steps["peak"] >= steps["rss"]).all()  # the exact peak is never below the end-of-step RSS
    assert steps["cuda_allocated"].isna().all()  # no GPU here: missing, not zero

    s = summary(tiny_baseline)
    assert s["params"] == scenario.load("tiny").model.n_params == 4 * (1024 * 1024 + 1024)
    # fp32 master + grad + two Adam states alone need 16 B/param: RSS above baseline must exceed it
    assert s["phases"]["steady"]["rss"] > 16
    assert s["cuda"].startswith("not available")
    assert s["status"] == "ok"


@pytest.mark.worker
def test_deepspeeds_shm_buffer_does_not_outlive_the_run(tiny_baseline: Path) -> None:
    """DeepSpeed's CPU shm_comm makes a /dev/shm buffer per process and never unlinks it (each run left 66 MiB of
    RAM in /dev/shm here, 20 GiB after a day of runs): the orchestrator removes the run's own, by its port."""
    removed = json.loads((tiny_baseline / "manifest.json").read_text())["shm_buffers_removed"]
    assert removed["files"] >= 1 and removed["bytes"] > 0, removed  # there was one: DeepSpeed made it
    assert not list(Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_*_{removed['port']}_*"))


@pytest.mark.worker
def test_show_latest_finds_the_newest_run(tiny_baseline: Path, tmp_path: Path) -> None:
    for name, started in (("newer", "2030-01-02T00:00:00+00:00"), ("older", "2030-01-01T00:00:00+00:00")):
        shutil.copytree(tiny_baseline, tmp_path / name)
        manifest = json.loads((tmp_path / name / "manifest.json").read_text())
        (tmp_path / name / "manifest.json").write_text(json.dumps({**manifest, "started": started}))
    env = {"RSSPROBE_RUNS": str(tmp_path)}
    out = json.loads(rssprobe("show", "latest", "--format", "json", env=env, check=True).stdout)
    assert out["run"] == "newer"
    assert json.loads(rssprobe("show", "older", "--format", "json", env=env, check=True).stdout)["run"] == "older"


def _as_from_a_terminal() -> None:
    """Ctrl-C's disposition as a terminal gives it. A non-interactive shell starts its background jobs with
    SIGINT ignored, and Python then installs no KeyboardInterrupt handler, so a suite started that way
    (seen: `bash .ci/run &`) would send a SIGINT that nothing hears."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_run(args: list[str], runs: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "RSSPROBE_RUNS": str(runs)}
    return subprocess.Popen([sys.executable, "-m", "rssprobe", "run", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_as_from_a_terminal)


def _wait_for_steps(out: Path, n: int, timeout: float = 600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = out / "events.jsonl"
        if events.exists():
            lines = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
            if sum(e["event"] == "step" for e in lines) >= n:
                return next(e for e in lines if e["event"] == "hello")
        time.sleep(0.2)
    raise AssertionError(f"no {n} steps within {timeout}s")


@pytest.mark.worker
def test_killed_worker_leaves_a_failed_run_with_its_finished_steps(tmp_path: Path) -> None:
    out = tmp_path / "killed"
    proc = _start_run(["tiny", "--steps", "100000", "--out", str(out)], tmp_path)
    hello = _wait_for_steps(out, 3)
    os.kill(hello["pid"], signal.SIGKILL)  # what the OOM killer does
    _stdout, _stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "SIGKILL" in manifest["error"]
    assert manifest["steps_done"] >= 3
    assert len(pd.read_parquet(out / "steps.parquet")) == manifest["steps_done"]
    shown = rssprobe("show", str(out))
    assert "FAILED" in shown.stdout  # never shown as a good run


@pytest.mark.worker
def test_ctrl_c_marks_the_run_interrupted_and_keeps_steps(tmp_path: Path) -> None:
    out = tmp_path / "interrupted"
    proc = _start_run(["tiny", "--steps", "100000", "--out", str(out)], tmp_path)
    _wait_for_steps(out, 2)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["steps_done"] >= 2


@pytest.mark.worker
def test_steady_site_probes_are_light_unless_asked_for_in_full(tiny_baseline: Path, runs_dir: Path) -> None:
    """probes.steady_sites = "light" (the default): the gradient path's sites called once per parameter tensor
    (data/sites.toml, per_parameter) are measured at every call of step 1 and pass through afterwards; from
    step 2 on the other sites read RSS and the exact peak but not glibc (n/a, never 0); the site table says
    so. "full" measures every call with every figure on every step."""
    from rssprobe.worker import glibc

    s = summary(tiny_baseline)
    assert s["sites_steady"] == "light"
    first_only = set(s["sites_first_step_only"])
    assert {p.rsplit(".", 1)[1] for p in first_only} >= {"setup_buckets", "copy_grads_in_partition",
                                                         "async_inplace_copy_grad_to_fp32_buffer_from_gpu"}
    events = [json.loads(line) for line in (tiny_baseline / "events.jsonl").read_text().splitlines()]
    steps = [e for e in events if e["event"] == "step"]
    assert len(steps) >= 3
    called = {p for p in first_only if p in steps[0]["sites"]}
    assert len(called) >= 3  # called, and measured, on step 1
    for e in steps[1:]:
        assert not called & set(e["sites"]), e["step"]  # passed through afterwards
        assert e["sites"] and all(w["inuse"] is None and w["free"] is None for w in e["sites"].values())
    rows = {(r["site"], r["phase"]): r for r in s["sites"]}
    assert all((p, "first_step") in rows and (p, "steady") not in rows for p in called)
    for (site, phase), row in rows.items():
        read = phase != "steady" and glibc.STATUS.available
        assert (row["glibc_in_use_bytes_per_param"] is not None) == read, (site, phase)
        assert row["retained_bytes_per_param"] is not None and row["peak_bytes_per_param"] is not None
    assert "steady rows read RSS and the peak only, glibc n/a; measured on the first step only" in " ".join(
        rssprobe("show", str(tiny_baseline), "--format", "markdown").stdout.split())

    full = runs_dir / "full-site-probes"
    rssprobe("run", "tiny", "--steps", "2", "--set", 'probes.steady_sites="full"', "--out", str(full), check=True)
    later = [json.loads(line) for line in (full / "events.jsonl").read_text().splitlines()]
    step2 = next(e for e in later if e["event"] == "step" and e["step"] == 2)
    assert called <= set(step2["sites"])
    if glibc.STATUS.available:
        assert all(w["inuse"] is not None for w in step2["sites"].values())
    got = summary(full)
    assert got["sites_steady"] == "full" and got["sites_first_step_only"] == []
    assert "steady rows read RSS" not in rssprobe("show", str(full), "--format", "markdown").stdout


@pytest.mark.worker
def test_a_sites_mapped_but_untouched_glibc_chunk_is_apart_from_its_heap(tiny_baseline: Path) -> None:
    """DeepSpeed's setup_buckets allocates the IPG bucket, `reduce_bucket_size` 16-bit elements (2 buffers with
    overlap_comm), at the first micro-step: glibc maps it whole (an mmapped chunk, mallinfo2's hblkhd) and only the
    part gradients fill is ever written. Known answer: the site's mapped change is that many bytes (up to a page
    and a 16-byte header per buffer), while the RSS it retains is ~0 (within two RSS reads: tests/noise.py)."""
    s = summary(tiny_baseline)
    z = json.loads((tiny_baseline / "manifest.json").read_text())["scenario"]["zero"]
    row = next(r for r in s["sites"] if r["name"].endswith("setup_buckets") and r["phase"] == "first_step")
    buffers = 2 if z["overlap_comm"] else 1
    expected = buffers * z["reduce_bucket_size"] * 2  # bf16 gradients: 2 bytes an element
    mapped = row["glibc_mmapped_bytes_per_param"] * s["params"]
    assert expected <= mapped <= expected + buffers * (PAGE + 16), (mapped, expected)
    assert abs(row["retained_bytes_per_param"]) <= noise.bound(2 * row["calls"], s["params"])
    shown = rssprobe("show", str(tiny_baseline), check=True).stdout
    assert "mapped]" in shown and "mmapped chunks" in " ".join(shown.split())
