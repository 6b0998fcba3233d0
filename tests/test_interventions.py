"""Interventions and source patches on tiny real runs: each must really run, and say how often."""

from __future__ import annotations

import difflib
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import deepspeed
import pandas as pd
import pytest

from rssprobe.errors import UserError
from rssprobe.run import host
from rssprobe.worker.interventions.base import Refused, rewrite_method

from .conftest import STEADY_GLIBC, rssprobe, summary

ZERO = "deepspeed.runtime.zero.stage_1_and_2.DeepSpeedZeroOptimizer"
ADAM_STEP = "deepspeed.ops.adam.cpu_adam.DeepSpeedCPUAdam.step"
MiB = 2**20


def events(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]


@pytest.mark.worker
def test_float_scale_makes_the_multiply_receive_a_python_float(runs_dir: Path) -> None:
    out = runs_dir / "float-scale"
    rssprobe("run", "tiny", "--patch", "pr8132.float-scale", "--out", str(out), check=True)
    s = summary(out)
    (i,) = s["interventions"]
    assert i["took_effect"] and i["count"] == 4  # one conversion per step (4 steps, clipping on)
    assert i["effects"]["scale_type.float"] == 4 and "scale_type.Tensor" not in i["effects"]
    assert i["effects"]["scale_device.cpu"] == 4  # before conversion: a CPU tensor here, so float() syncs nothing
    assert s["never_took_effect"] == []


@pytest.mark.worker
def test_float_scale_that_never_fires_is_flagged(runs_dir: Path) -> None:
    """Without clipping (and bf16's loss scale 1.0) unscale_and_clip_grads returns early: no effect."""
    out = runs_dir / "float-scale-idle"
    rssprobe("run", "tiny", "--steps", "2", "--set", "zero.gradient_clipping=0", "--patch", "pr8132.float-scale",
             "--out", str(out), check=True)
    s = summary(out)
    assert s["never_took_effect"] == ["pr8132.float-scale"]
    assert "never took effect" in rssprobe("show", str(out)).stdout


def _trim_drops(run: Path, threshold: int) -> int:
    """Calls of DeepSpeedCPUAdam.step whose RSS fell by more than threshold: seen by the probes alone."""
    return sum(1 for e in events(run) if e["event"] == "step" for c in e["calls"]
               if c["site"] == ADAM_STEP and c["retained"] < -threshold)


@pytest.mark.worker
def test_per_group_trim_fires_once_under_zero2_and_the_probes_see_it(runs_dir: Path) -> None:
    """3 param groups. ZeRO-2 hands CPU Adam one group at a time, so the PR's per-group index
    is always 0 and the trim fires once, not three times. Before each group's optimizer step,
    testing.litter leaves 96 MiB free-but-retained in glibc's heap, so every trim that runs
    shows as a >32 MiB RSS drop in the traced Adam step calls, independent of the counter
    (the group's Adam states, 16 MiB, may be carved out of that free memory first)."""
    common = ["tiny", "--set", "model.layers=6", "--set", "model.param_groups=3", "--steps", "3",
              "--set", f'probes.trace_sites=["{ADAM_STEP}"]', "--patch", "testing.litter:mib=96"]
    patched, baseline = runs_dir / "trim-3-groups", runs_dir / "litter-3-groups"
    rssprobe("run", *common, "--patch", "pr8132.malloc-trim", "--out", str(patched), check=True)
    rssprobe("run", *common, "--out", str(baseline), check=True)
    s = summary(patched)
    trim = next(i for i in s["interventions"] if i["name"] == "pr8132.malloc-trim")
    adam_calls = sum(1 for e in events(patched) if e["event"] == "step" for c in e["calls"] if c["site"] == ADAM_STEP)
    assert adam_calls == 3 * 3  # three groups stepped on each of three steps ...
    assert trim["count"] == 1  # ... yet the per-group trim fired once
    assert [entry["step"] for entry in trim["effects"]["log"]] == [1]
    assert _trim_drops(patched, 32 * MiB) == 1  # the probes see exactly one trim ...
    assert _trim_drops(baseline, 32 * MiB) == 0  # ... and none without the patch
    assert trim["effects"]["log"][0]["rss_released"] > 64 * MiB


@pytest.mark.worker
def test_patch_file_is_applied_to_an_overlay_and_found_where_it_should_be(runs_dir: Path, tmp_path: Path,
                                                                           tiny_baseline: Path) -> None:
    """A diff written now against the installed DeepSpeed keeps a 2 B/param tensor, allocated in
    unscale_and_clip_grads on its first call. A torch tensor comes from glibc, which may place it
    in already-resident free heap, so the known answer is glibc's in-use figure at that site and
    the census, not raw RSS."""
    source = Path(deepspeed.__file__).parent / "runtime/zero/stage_1_and_2.py"
    before = hashlib.sha256(source.read_bytes()).hexdigest()
    old = source.read_text().splitlines(keepends=True)
    anchor = "def unscale_and_clip_grads(self, grad_groups_flat, total_norm):"
    new: list[str] = []
    for line in old:
        new.append(line)
        if line.strip() == anchor:
            new += ["        if not hasattr(self, '_kept_by_test'):\n",
                    "            n = 2 * sum(p.numel() for p in self.single_partition_of_fp32_groups)\n",
                    "            self._kept_by_test = torch.ones(n, dtype=torch.uint8)\n"]
    assert len(new) == len(old) + 3
    rel = "deepspeed/runtime/zero/stage_1_and_2.py"
    diff = tmp_path / "keep.diff"
    diff.write_text("".join(difflib.unified_diff(old, new, f"a/{rel}", f"b/{rel}")))
    out = runs_dir / "patch-file"
    rssprobe("run", "tiny", "--patch-file", str(diff), "--out", str(out), *STEADY_GLIBC,
             "--set", 'probes.steady_sites="full"', check=True)  # glibc read at the steady calls too
    s, base = summary(out), summary(tiny_baseline)
    target = f"{ZERO}.unscale_and_clip_grads"

    def row(summary_: dict[str, Any], phase: str) -> dict[str, Any]:
        return next(r for r in summary_["sites"] if r["site"] == target and r["phase"] == phase)

    in_use = "glibc_in_use_bytes_per_param"
    delta = row(s, "first_step")[in_use] - row(base, "first_step")[in_use]
    assert abs(delta - 2) <= 0.1
    assert abs(row(s, "steady")["glibc_in_use_bytes_per_param"]) <= 0.1  # only the first call keeps it
    assert abs(s["budget"]["roles"]["other"] - 2) <= 0.05  # the census finds the kept tensor
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["patch_files"][0]["sha256"] == hashlib.sha256(diff.read_bytes()).hexdigest()
    assert hashlib.sha256(source.read_bytes()).hexdigest() == before  # the installed package is untouched
    assert (out / "overlay" / rel).is_file()
    assert any(e["event"] == "overlay" and "deepspeed.runtime.zero.stage_1_and_2" in e["modules"] for e in events(out))


def _diff(tmp_path: Path, header_path: str, body: str = "@@ -1,1 +1,1 @@\n-x\n+y\n") -> Path:
    path = tmp_path / "bad.diff"
    path.write_text(f"--- {header_path}\n+++ {header_path}\n{body}")
    return path


@pytest.mark.parametrize("header,message", [
    ("/etc/passwd", "is absolute"),
    ("a/deepspeed/../../evil.py", "contains '..'"),
    ("a/deepspeed/ops/csrc/adam/cpu_adam.cpp", "not a Python file"),
    ("a/numpy/__init__.py", "not inside an installed package"),
])
def test_bad_patch_files_are_refused_before_any_run(tmp_path: Path, header: str, message: str) -> None:
    proc = rssprobe("run", "tiny", "--patch-file", str(_diff(tmp_path, header)), "--out", str(tmp_path / "r"))
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()


def test_diff_that_does_not_apply_names_the_file_and_hunk(tmp_path: Path) -> None:
    rel = "a/deepspeed/runtime/zero/stage_1_and_2.py"
    body = "@@ -10,3 +10,3 @@\n this line is not there\n-nor this\n+replacement\n also missing\n"
    proc = rssprobe("run", "tiny", "--patch-file", str(_diff(tmp_path, rel, body)), "--out", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert "bad.diff: does not apply" in proc.stderr and "stage_1_and_2.py:10" in proc.stderr


def test_rewrite_refuses_a_method_of_another_shape() -> None:
    class Other:
        def unscale_and_clip_grads(self, grads: list, norm: float) -> None:
            for g in grads:
                g.mul_(norm)

    with pytest.raises(Refused, match="different shape"):
        rewrite_method(Other, "unscale_and_clip_grads", [("for grad in grad_groups_flat:", ["pass"])], "t", {})


def test_missing_allocator_library_names_the_debian_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(host.ALLOCATORS, "jemalloc", ("libjemalloc2", "libjemalloc-not-here.so.9"))
    with pytest.raises(UserError, match="apt-get install libjemalloc2"):
        host.allocator_library("jemalloc")


def _installed(allocator: str) -> pytest.MarkDecorator:
    package, filename = host.ALLOCATORS[allocator]
    return pytest.mark.skipif(host.find_library(filename) is None,
                              reason=f"{filename} not found by the dynamic loader: Debian's {package} is not installed "
                                     f"(.ci/run installs it when it runs as root with apt)")


# every glibc figure the summary carries; under another allocator each must be None ("not available"), never 0
GLIBC_PHASE_FIGURES = ("glibc_in_use", "glibc_free")
GLIBC_SITE_FIGURES = ("glibc_in_use_bytes_per_param", "glibc_free_bytes_per_param")
GLIBC_BUDGET_FIGURES = ("glibc_free_retained_bytes_per_param", "malloc_trim_released_bytes_per_param")


@pytest.mark.parametrize("allocator", [pytest.param(a, marks=_installed(a)) for a in ("jemalloc", "tcmalloc")])
@pytest.mark.worker
def test_another_allocator_reports_glibc_figures_as_not_available(runs_dir: Path, allocator: str) -> None:
    out = runs_dir / allocator
    rssprobe("run", "tiny", "--steps", "2", "--allocator", allocator, "--trim-at-end", "--out", str(out), check=True)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["ld_preload"] == host.allocator_library(allocator)
    s = summary(out)
    assert s["allocator"] == allocator and s["glibc_malloc"]["available"] is False
    assert s["phases"]["steady"]["glibc_free"] is None and s["phases"]["steady"]["rss"] is not None
    for phase, figures in s["phases"].items():
        for key in GLIBC_PHASE_FIGURES:
            assert figures[key] is None, (phase, key)
        assert figures["rss"] > 0 and figures["peak"] >= figures["rss"], phase  # the rest is measured
    for row in s["sites"]:
        for key in GLIBC_SITE_FIGURES:
            assert row[key] is None, (row["site"], row["phase"], key)
    assert any(row["retained_bytes_per_param"] not in (None, 0) for row in s["sites"])
    for budget in s["budgets"]:
        for key in GLIBC_BUDGET_FIGURES:
            assert budget.get(key) is None, (budget["at"], key)
    # the census does not depend on the allocator: DeepSpeed's 20 B/param (+ temp grad buffers)
    assert s["budget"]["live_bytes_per_param"] == pytest.approx(21.0, abs=0.01)
    assert s["budget"]["rss_above_baseline_bytes_per_param"] > 16
    steps = pd.read_parquet(out / "steps.parquet")
    assert steps[["glibc_uordblks", "glibc_fordblks", "glibc_hblkhd"]].isna().all().all()
    assert steps["rss"].notna().all() and (steps["rss"] > 0).all()
    assert "not available" in rssprobe("show", str(out)).stdout


def test_allocators_are_found_where_the_dynamic_loader_finds_them(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    libc = host.find_library("libc.so.6")  # present wherever this test runs
    assert libc is not None and Path(libc).is_file()
    # LD_LIBRARY_PATH comes first, as for ld.so; a library of another machine type is passed over
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    header = bytearray(Path(libc).read_bytes()[:64])
    header[18:20] = (183 if header[18:20] != (183).to_bytes(2, "little") else 62).to_bytes(2, "little")
    (foreign / "libc.so.6").write_bytes(bytes(header))  # an ELF file for aarch64 (or x86-64 on aarch64)
    own = tmp_path / "own"
    own.mkdir()
    shutil.copy(libc, own / "libc.so.6")
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{foreign}:{own}")
    assert host.find_library("libc.so.6") == str(own / "libc.so.6")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(foreign))
    assert host.find_library("libc.so.6") == libc
