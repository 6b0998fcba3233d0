"""The fixes for DeepSpeed #7693's pinned slack (issue 30): the catalogue (rssprobe/data/fixes.toml), what each
would hold on CUDA for recorded pin requests (analysis/fixes.py), `show`'s line naming them, DeepSpeed's native
pinned backend as the ds.native-pin intervention with its exact-size known answer on the CPU accelerator (it
really mlocks: VmLck), the lock-limit refusal before any worker, and the device script's no-GPU exit.

Recorded runs read here: reports/cuda-pinned/runs.tar.gz (`fix-baseline`: the default scenario, DeepSpeed 0.19.8,
torch 2.13.0 CPU build, pin_memory true, 2 steps; its pin requests were recorded on this CPU machine).
"""

from __future__ import annotations

import functools
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from rssprobe.analysis import fixes, partition
from rssprobe.analysis.pinned import request_ops
from rssprobe.config import modelshape, scenario
from rssprobe.contract.interventions import INTERVENTIONS, NATIVE_PIN, parse
from rssprobe.errors import UserError
from rssprobe.run import preflight

from .conftest import STEADY_GLIBC, rssprobe
from .conftest import summary as _summary

summary = functools.lru_cache(maxsize=None)(_summary)
ROOT = Path(__file__).parents[1]
PINNED_RUNS = ROOT / "reports" / "cuda-pinned" / "runs.tar.gz"
PAGE = 4096
# tiny's four pin requests (fp32 master, bf16 staging, temp grad, fp32 grad): the H200's pinned tensors,
# reports/gpu-check.md (44,081,152 B; every one a whole number of pages)
TINY_PINNED = 44_081_152


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cuda-pinned")
    with tarfile.open(PINNED_RUNS) as archive:
        archive.extractall(root, filter="data")
    return next(root.rglob("fix-baseline"))


def test_every_fix_in_the_catalogue_is_a_runnable_option() -> None:
    cat = fixes.catalogue()
    assert cat[0].reference and sum(f.reference for f in cat) == 1 and sum(f.recommended for f in cat) == 1
    assert {f.name for f in cat} >= {"ds.native-pin", "ds.native-pin:register=off", "torch.cached-size",
                                     "pin.register", "pin_memory=false"}
    for fix in cat[1:]:
        kinds = [k for k in (fix.patch, fix.set, fix.alloc_conf) if k]
        assert len(kinds) == 1, fix.name  # each fix runs as exactly one option
        if fix.patch:  # a declared intervention, with options its declaration accepts
            name, options = parse(fix.patch)
            INTERVENTIONS[name].values(options)
        if fix.set:
            assert scenario.load("tiny", [fix.set]).zero.pin_memory is False
        if fix.alloc_conf:  # the safe form: the cached-size knob alone (pytorch PR #192722)
            assert "pinned_max_round_threshold_mb" not in fix.alloc_conf and fix.hazard
            preflight.check_alloc_conf(fix.alloc_conf)  # this torch (2.13) takes it
        assert fix.h2d_gbps[0] <= fix.h2d_gbps[1] and "#8283" in fix.h2d_source
    assert fixes.by_name("ds.native-pin").full_bandwidth and not fixes.by_name("pin_memory=false").full_bandwidth
    assert fixes.missing(fixes.by_name("ds.native-pin"), {"deepspeed": "0.19.5"}) == \
        "needs deepspeed >= 0.19.6 (deepspeed 0.19.5 here)"


def test_what_each_fix_holds_for_the_recorded_default_requests(recorded: Path) -> None:
    """The default scenario's four requests (fp32 master and grad 4 B/param each, bf16 staging 2, temp grad 0.5;
    each partition just above a power of two): torch's rule holds 20.49 B/param for 10.50; every fix brings the
    host memory back to the requests' own bytes (pages), so each saves the whole slack; none pinning keeps them
    pageable (the same bytes, nothing pinned)."""
    s = summary(recorded)
    view, params = s["pinned"], s["params"]
    requested, held = view["totals"]["requested_live"], view["totals"]["held_predicted"]
    assert round(requested / params, 2) == 10.50 and round(held / params, 2) == 20.49
    rows = {r["name"]: r for r in view["fixes"]}
    assert rows["baseline"]["saving_predicted"] == 0 and rows["baseline"]["host_predicted"] == held
    reqs = [r for e in _pins(recorded) for r in e["requests"]]
    pages = sum(-(-r["bytes"] // PAGE) * PAGE for r in reqs)
    for name in ("ds.native-pin", "ds.native-pin:register=off", "pin.register"):
        assert rows[name]["pinned_predicted"] == rows[name]["host_predicted"] == pages
        assert rows[name]["saving_predicted"] == held - pages
    # the cached-size knob at 1 MiB: every request is larger, so allocated at its exact size (not even pages)
    assert rows["torch.cached-size"]["host_predicted"] == requested
    assert rows["pin_memory=false"] == {**rows["pin_memory=false"], "pinned_predicted": 0, "host_predicted": requested}
    assert round(rows["ds.native-pin"]["saving_predicted_bytes_per_param"], 2) == 9.99
    # the same rows from the requests directly (what estimate and the answer page call)
    again = fixes.compare(request_ops(reqs, []), s["versions"]["torch"], None, params, held)
    assert [r["host_predicted"] for r in again] == [r["host_predicted"] for r in view["fixes"]]


def _pins(run: Path) -> list[dict[str, Any]]:
    return [e for line in (run / "events.jsonl").read_text().splitlines()
            if (e := json.loads(line))["event"] == "pins"]


def test_show_names_the_fixes_and_their_saving(recorded: Path) -> None:
    out = rssprobe("show", str(recorded), "--format", "markdown", check=True).stdout
    # as a reader sees it: GFM drops the backslash before an escaped character (tests/test_markdown.py renders it)
    line = re.sub(r"\\(.)", r"\1", next(x for x in out.splitlines() if "pinned slack" in x))
    assert line.startswith("pinned slack 9.99 B/param (predicted for CUDA): DS_PIN_MEMORY_BACKEND=native would "
                           "save ~9.99 B/param at full bandwidth (53-55 GB/s host-to-device on an H200 per DeepSpeed "
                           "PR #8283)")
    assert "offload_optimizer.pin_memory false ~9.99 at 10-17 GB/s" in line


def test_lock_limit_is_the_soft_rlimit_unless_cap_ipc_lock() -> None:
    with_cap = "CapEff:\t000001fffeffffff\n"  # root's default set: CAP_IPC_LOCK (bit 14) on
    without = "CapEff:\t000001fffeffbfff\n"
    assert preflight.lock_limit(with_cap, soft=65536) is None
    assert preflight.lock_limit(without, soft=65536) == 65536
    assert preflight.lock_limit(without, soft=resource.RLIM_INFINITY) is None
    # what tiny's ranks lock: its four requests, whole pages each (the H200's pinned tensors), halved at 2 ranks
    tiny = scenario.load("tiny")
    zero = partition.zero_of(tiny.zero.model_dump(), 2, 1, "cpu", {})
    assert partition.locked_peak(modelshape.of(tiny), zero) == TINY_PINNED
    two = partition.zero_of(tiny.zero.model_dump(), 2, 2, "cpu", {})
    assert partition.locked_peak(modelshape.of(tiny), two) < TINY_PINNED
    with pytest.raises(UserError, match=r"ulimit -l 43048\b"):
        preflight.check_native_pin(tiny, ["ds.native-pin"], {}, "0.19.8", limit=8 * 2**20)
    preflight.check_native_pin(tiny, ["ds.native-pin"], {}, "0.19.8", limit=TINY_PINNED)  # exactly enough
    preflight.check_native_pin(tiny, [], {}, "0.19.8", limit=0)  # not pinning natively: nothing to check
    with pytest.raises(UserError, match="both replace how DeepSpeed pins"):
        preflight.check_native_pin(tiny, ["pin.register"], {"DS_PIN_MEMORY_BACKEND": "native"}, "0.19.8", limit=None)
    with pytest.raises(UserError, match=r"DeepSpeed 0\.19\.5 has no native pinned backend"):
        preflight.check_native_pin(tiny, [], {"DS_PIN_MEMORY_BACKEND": "native"}, "0.19.5", limit=None)


def test_a_lock_limit_too_small_is_refused_before_any_worker(tmp_path: Path) -> None:
    """As a process without CAP_IPC_LOCK (dropped from the bounding set) under an 8 MiB lock limit (these
    machines' default), a native-pin run is refused in one line naming the `ulimit -l` it needs, exit 2."""
    if not (shutil.which("prlimit") and shutil.which("setpriv")):
        pytest.skip("prlimit and setpriv (util-linux) are needed to drop CAP_IPC_LOCK and lower the lock limit")
    drop = ["prlimit", "--memlock=8388608:8388608", "setpriv", "--bounding-set", "-ipc_lock", "--inh-caps",
            "-ipc_lock"]
    if subprocess.run([*drop, "true"], capture_output=True).returncode != 0:
        pytest.skip("this process cannot drop CAP_IPC_LOCK or lower its lock limit here")
    out = tmp_path / "run"
    proc = subprocess.run([*drop, sys.executable, "-m", "rssprobe", "run", "tiny", "--patch", "ds.native-pin",
                           "--out", str(out)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "run `ulimit -l 43048` (or more) first" in lines[0] and "CAP_IPC_LOCK" in lines[0]
    assert not out.exists() or not any(out.rglob("events.jsonl"))  # no worker started


@pytest.mark.integration
def test_the_device_script_exits_4_without_cuda(tmp_path: Path) -> None:
    """tests/gpu/check.sh EVIDENCE=fixes on this CPU machine: its CPU-side parts run, the device tests skip, and
    it exits 4 ("no CUDA device": nothing verified on a GPU); the bandwidth bench says the same on its own."""
    assert subprocess.run(["bash", "-n", str(ROOT / "tests" / "gpu" / "check.sh")]).returncode == 0
    proc = subprocess.run(["bash", str(ROOT / "tests" / "gpu" / "check.sh")], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHON": sys.executable, "EVIDENCE": "fixes",
                                            "OUT": str(tmp_path / "out"), "TMPRUNS": str(tmp_path / "runs"),
                                            "GPU_CHECK_TESTS": "tests/gpu/test_fixes_cuda.py"})
    assert proc.returncode == 4, proc.stdout[-3000:]
    assert "no CUDA device" in proc.stdout and "2 skipped" in proc.stdout
    bench = subprocess.run([sys.executable, str(ROOT / "tests" / "gpu" / "h2d_bench.py"), "--out",
                            str(tmp_path / "h2d.json")], capture_output=True, text=True, timeout=120)
    assert bench.returncode == 4 and "no CUDA device" in bench.stderr and not (tmp_path / "h2d.json").exists()


@pytest.mark.worker
def test_native_backend_locks_each_request_at_its_own_pages(tiny_baseline: Path, runs_dir: Path) -> None:
    """Known answer: with DS_PIN_MEMORY_BACKEND=native DeepSpeed mlocks each of tiny's four pin requests at its
    own page-aligned size, so VmLck above the baseline is exactly their pages (44,081,152 B: the H200's pinned
    tensors), at init, at every step and at the end; nothing is rounded. VmLck counts whole pages (kB in
    /proc/self/status), and the requests are page multiples here, so the tolerance is 0 B. The intervention says
    how often it took effect (4 native pins; registration does not apply on the CPU accelerator), and the run's
    buffers are those of the baseline."""
    need = TINY_PINNED
    limit = preflight.lock_limit()
    if limit is not None and limit < need:
        hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"the lock limit ({limit // 1024} KiB, hard {hard // 1024} KiB) is below the {need // 1024} "
                        "KiB tiny's native pins lock, and this process lacks CAP_IPC_LOCK: it cannot be raised")
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (hard, hard))  # the workers inherit it
    out = runs_dir / "native-pin"
    rssprobe("run", "tiny", "--steps", "2", "--patch", "ds.native-pin", "--out", str(out), *STEADY_GLIBC,
             check=True)
    s = summary(out)
    effect = next(i for i in s["interventions"] if i["name"] == NATIVE_PIN)
    assert effect["took_effect"] and effect["count"] == 4 == effect["effects"]["register_did_not_apply"]
    assert effect["effects"]["native_bytes"] == need and effect["effects"]["registered"] == 0
    view = s["pinned"]
    assert view["via_native"] == 4 and view["ds_pin_backend"] == "native"
    assert view["totals"]["locked_measured"] == need == view["totals"]["held_predicted"]
    assert view["locked_minus_native_pages"] == 0
    m = s["metrics"]
    for point in ("init", "first_step", "steady", "end"):
        assert m[f"{point}.locked"] * s["params"] == pytest.approx(need, abs=0.5)  # whole bytes, as counted
    # DeepSpeed's buffers are the baseline's: only how they are pinned changed
    base = summary(tiny_baseline)["metrics"]
    assert {k: v for k, v in m.items() if k.startswith("role.")} == \
        {k: v for k, v in base.items() if k.startswith("role.")}
    shown = rssprobe("show", str(out), check=True).stdout
    assert "DS_PIN_MEMORY_BACKEND native" in shown and f"MEASURED here: mlock holds {need:,} B" in shown


def _answer(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    """The answer page's generator (tools/evidence/issue7693_answer), run from the checkout as its page says."""
    return subprocess.run([sys.executable, "-m", "tools.evidence.issue7693_answer", *args], capture_output=True,
                          text=True, timeout=900, cwd=ROOT, **kw)


@pytest.mark.integration
def test_the_answer_page_is_generated_from_the_committed_runs(tmp_path: Path) -> None:
    """reports/issue7693-answer.md is what tools.evidence.issue7693_answer makes of the committed runs (H200,
    release sweep, the fixes' CPU sweeps), line for line but the generation date; the answer sentence comes first.
    A device call's fixes.json fills the "measured on CUDA" column only when it was measured on CUDA: a CPU
    collection is refused from that column, and the recorded H200 sweep (real CUDA runs, DeepSpeed's default
    pinning) fills the baseline's cell with its own slope."""
    out = tmp_path / "answer.md"
    cpu = tmp_path / "cpu-device"
    cpu.mkdir()
    (cpu / "fixes.json").write_text(json.dumps({"environment": {"accelerator": "cpu"}, "fixes": {}}))
    proc = _answer("page", "--out", str(out), "--device", str(cpu))
    assert proc.returncode == 0, proc.stderr[-2000:]
    committed = (ROOT / "reports" / "issue7693-answer.md").read_text().splitlines()
    made = out.read_text().splitlines()
    assert [x for x in made if "generated" not in x] == [x for x in committed if "generated" not in x]
    first = next(x for x in made[1:] if x.strip())
    assert first.startswith("**On CUDA, ZeRO-2 with the optimizer offloaded holds 28.34 ± 0.68 bytes")
    assert "not measured (no GPU lent)" in out.read_text()
    # a CUDA device's collection fills the column; the recorded H200 size sweep is one (baseline pinning)
    h200 = tmp_path / "h200"
    with tarfile.open(ROOT / "reports" / "gpu-check-h200" / "runs.tar.gz") as archive:
        archive.extractall(h200, filter="data")
    device = tmp_path / "device"
    device.mkdir()
    assert _answer("collect", str(h200 / "runs0" / "scale-default"), "--out",
                   str(device / "fixes.json")).returncode == 0
    assert _answer("page", "--out", str(out), "--device", str(device)).returncode == 0
    row = next(x for x in out.read_text().splitlines() if x.startswith("| torch's caching host allocator"))
    assert row.endswith("| 28.34 B/param |")


def test_estimate_names_the_fixes_for_a_cuda_target(tmp_path: Path) -> None:
    """estimate --accelerator cuda, calibrated on the recorded H200 sweep: the target's own pin requests (exact
    partitions) through each fix; the line names the native backend first, with the slack the estimate predicts."""
    with tarfile.open(ROOT / "reports" / "gpu-check-h200" / "runs.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    calibration = str(tmp_path / "runs0" / "scale-default")
    args = ("estimate", "default", "--params", "16785408", "--ranks-per-node", "1", "--accelerator", "cuda",
            "--calibration", calibration)
    data = json.loads(rssprobe(*args, "--format", "json", check=True).stdout)
    rows = {r["name"]: r for r in data["fixes"]}
    slack = data["rank"]["pinned_held_bytes"] - data["rank"]["pinned_requested_bytes"]
    assert rows["ds.native-pin"]["saving_predicted"] == slack - (rows["ds.native-pin"]["host_predicted"]
                                                                  - data["rank"]["pinned_requested_bytes"])
    assert round(slack / 16785408, 2) == 9.99  # the H200's measured slack, from the target's exact partitions
    line = next(x for x in rssprobe(*args, check=True).stdout.splitlines() if x.startswith("pinned slack"))
    assert line.startswith("pinned slack 9.99 B/param (predicted for CUDA): DS_PIN_MEMORY_BACKEND=native would save")
