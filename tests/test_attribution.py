"""Known answers: allocations of known size at known sites must be reported there, with their size.

The test-only intervention testing.inject allocates bytes_per_param x params bytes (an
anonymous mmap, touched page by page, so its RSS cost is exact) inside a chosen site on
step 1. Runs fix glibc's mmap threshold so that the only difference from the baseline is
the injection (see conftest.STEADY_GLIBC).

Every tolerance is the worst case of the RSS counter's batching (tests/noise.py: 256 KiB a read
here) times the number of reads behind the figure compared, counted from the run's own events
(calls of the site, and of the sites nested directly in it), never a fixed number below that noise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import STEADY_GLIBC, rssprobe, summary
from .noise import bound

ZERO = "deepspeed.runtime.zero.stage_1_and_2.DeepSpeedZeroOptimizer"
# The known answer (B/param). Large enough that the loosest derived tolerance here is well below it:
# measured at 2 CPUs, copy_grads_in_partition's exclusive figure (8 calls + 8 nested, two runs: 64 reads)
# may be off by 4.0 B/param in the worst case (its actual difference between runs: 0.006).
RETAINED_K = 12


def reads(run_dir: Path, step: int = 1) -> dict[str, dict[str, int]]:
    """Per site, in one step's window: calls, and calls of directly nested sites (from events.jsonl)."""
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    return next(e for e in events if e["event"] == "step" and e["step"] == step)["sites"]


def retained_reads(window: dict[str, int]) -> int:
    return 2 * window["calls"]  # entry and exit RSS per call


def exclusive_reads(window: dict[str, int]) -> int:
    return 2 * (window["calls"] + window["child_calls"])  # its own calls' and its direct children's


def site_rows(s: dict[str, Any], phase: str) -> dict[str, dict[str, Any]]:
    return {r["site"]: r for r in s["sites"] if r["phase"] == phase}


def injected_run(runs_dir: Path, name: str, site: str, mode: str, k: float = 3) -> tuple[dict[str, Any], Path]:
    out = runs_dir / name
    spec = f"testing.inject:site={site},bytes_per_param={k},step=1,mode={mode}"
    rssprobe("run", "tiny", "--patch", spec, "--out", str(out), *STEADY_GLIBC, check=True)
    return summary(out), out


@pytest.fixture(scope="module")
def base(tiny_baseline: Path) -> dict[str, Any]:
    return summary(tiny_baseline)


@pytest.mark.worker
def test_retained_allocation_is_reported_at_its_site_with_its_size(runs_dir: Path, base: dict[str, Any],
                                                                    tiny_baseline: Path) -> None:
    target = f"{ZERO}._update_model_bit16_weights"
    k = RETAINED_K
    s, out = injected_run(runs_dir, "inject-retained", target, "retained", k)
    params = s["params"]
    assert s["interventions"][0]["count"] == 1
    got, ref = site_rows(s, "first_step"), site_rows(base, "first_step")
    n_got, n_ref = reads(out), reads(tiny_baseline)
    one = bound(retained_reads(n_got[target]), params)  # one run's figure
    two = bound(retained_reads(n_got[target]) + retained_reads(n_ref[target]), params)  # a difference of two runs
    assert two < k / 4, f"RSS counter noise ({two:.2f} B/param) too large for the known answer on this machine"
    # the absolute figure: the injection plus what the site itself retains in the baseline (within its noise)
    assert abs(got[target]["retained_bytes_per_param"] - k) <= one + abs(ref[target]["retained_bytes_per_param"])
    assert abs(got[target]["exclusive_bytes_per_param"] - k) \
        <= bound(exclusive_reads(n_got[target]), params) + abs(ref[target]["exclusive_bytes_per_param"])
    assert abs(got[target]["retained_bytes_per_param"] - ref[target]["retained_bytes_per_param"] - k) <= two
    # ... and no other site's own (exclusive) figure moves
    for site, row in got.items():
        if site != target:
            delta = row["exclusive_bytes_per_param"] - ref[site]["exclusive_bytes_per_param"]
            tol = bound(exclusive_reads(n_got[site]) + exclusive_reads(n_ref[site]), params)
            assert tol < k / 2, (site, tol)  # the check still tells k at this site from none
            assert abs(delta) <= tol, (site, delta, tol)
    # the enclosing step() includes it inclusively: nesting adds up
    step = f"{ZERO}.step"
    tol = bound(retained_reads(n_got[step]) + retained_reads(n_ref[step]), params)
    assert abs(got[step]["retained_bytes_per_param"] - ref[step]["retained_bytes_per_param"] - k) <= tol
    # later steps and init are untouched (a phase figure is a mean over windows: 2 reads per call per window)
    for phase in ("init", "steady"):
        a, b = site_rows(s, phase)[target], site_rows(base, phase)[target]
        tol = bound(2 * a["calls"] + 2 * b["calls"], params)
        assert abs(a["retained_bytes_per_param"] - b["retained_bytes_per_param"]) <= tol, (phase, tol)


@pytest.mark.worker
def test_transient_allocation_shows_in_peak_not_in_retained(runs_dir: Path, base: dict[str, Any],
                                                           tiny_baseline: Path) -> None:
    target = f"{ZERO}.unscale_and_clip_grads"
    s, out = injected_run(runs_dir, "inject-transient", target, "transient")
    params = s["params"]
    got, ref = site_rows(s, "first_step")[target], site_rows(base, "first_step")[target]
    calls = reads(out)[target]["calls"] + reads(tiny_baseline)[target]["calls"]
    peak_tol = bound(2, params)  # a peak: the interval's VmHWM against its entry RSS
    assert abs(got["peak_bytes_per_param"] - 3) <= peak_tol + ref["peak_bytes_per_param"]
    assert got["peak_bytes_per_param"] >= 3 - peak_tol
    assert abs(got["retained_bytes_per_param"] - ref["retained_bytes_per_param"]) <= bound(2 * calls, params)


@pytest.mark.worker
def test_census_accounts_for_deepspeeds_known_buffers(runs_dir: Path) -> None:
    """Default scenario, bf16 on the CPU accelerator: 20 B/param of live buffers, 8 of them Adam's."""
    out = runs_dir / "default-census"
    rssprobe("run", "default", "--steps", "2", "--out", str(out), check=True)
    budgets = {b["at"]: b["roles"] for b in summary(out)["budgets"]}
    known = {"bit16_params": 2, "h2d_staging": 2, "fp32_master": 4, "fp32_grad": 4,
             "adam_exp_avg": 4, "adam_exp_avg_sq": 4}
    for role, expected in known.items():
        assert abs(budgets["end"][role] - expected) < 0.01, role
    assert abs(sum(budgets["end"][r] for r in known) - 20) < 0.05
    # the Adam states do not exist after init and appear with the first step
    assert "adam_exp_avg" not in budgets["after_init"] and "adam_exp_avg_sq" not in budgets["after_init"]
    assert abs(budgets["after_first_step"]["adam_exp_avg"] + budgets["after_first_step"]["adam_exp_avg_sq"] - 8) < 0.01


def test_a_misspelt_user_site_fails_up_front_with_close_names(tmp_path: Path) -> None:
    typo = f"{ZERO}.unscale_and_clip_grad"
    proc = rssprobe("run", "tiny", "--set", f'probes.extra_sites=["{typo}"]', "--out", str(tmp_path / "r"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert "does not exist" in error and f"{ZERO}.unscale_and_clip_grads" in error
