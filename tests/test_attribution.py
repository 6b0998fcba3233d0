"""Known answers: allocations of known size at known sites must be reported there, with their size.

The test-only intervention testing.inject allocates bytes_per_param x params bytes (an
anonymous mmap, touched page by page, so its RSS cost is exact) inside a chosen site on
step 1. Runs fix glibc's mmap threshold so that the only difference from the baseline is
the injection (see conftest.STEADY_GLIBC).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import STEADY_GLIBC, rssprobe, summary

ZERO = "deepspeed.runtime.zero.stage_1_and_2.DeepSpeedZeroOptimizer"
TOL = 0.1  # B/param; the kernel's per-CPU RSS counter batching (<= 256 KB here) is 0.06 of it at 4.2 M params


def site_rows(s: dict[str, Any], phase: str) -> dict[str, dict[str, Any]]:
    return {r["site"]: r for r in s["sites"] if r["phase"] == phase}


def injected_run(runs_dir: Path, name: str, site: str, mode: str, k: float = 3) -> dict[str, Any]:
    out = runs_dir / name
    spec = f"testing.inject:site={site},bytes_per_param={k},step=1,mode={mode}"
    rssprobe("run", "tiny", "--patch", spec, "--out", str(out), *STEADY_GLIBC, check=True)
    return summary(out)


@pytest.fixture(scope="module")
def base(tiny_baseline: Path) -> dict[str, Any]:
    return summary(tiny_baseline)


def test_retained_allocation_is_reported_at_its_site_with_its_size(runs_dir: Path, base: dict[str, Any]) -> None:
    target = f"{ZERO}._update_model_bit16_weights"
    s = injected_run(runs_dir, "inject-retained", target, "retained")
    assert s["interventions"][0]["count"] == 1
    got, ref = site_rows(s, "first_step"), site_rows(base, "first_step")
    assert abs(got[target]["retained_bytes_per_param"] - 3) <= TOL  # the absolute figure ...
    assert abs(got[target]["exclusive_bytes_per_param"] - 3) <= TOL
    assert abs(got[target]["retained_bytes_per_param"] - ref[target]["retained_bytes_per_param"] - 3) <= TOL
    # ... and no other site's own (exclusive) figure moves
    for site, row in got.items():
        if site != target:
            delta = row["exclusive_bytes_per_param"] - ref[site]["exclusive_bytes_per_param"]
            assert abs(delta) <= TOL, (site, delta)
    # the enclosing step() includes it inclusively: nesting adds up
    step = f"{ZERO}.step"
    assert abs(got[step]["retained_bytes_per_param"] - ref[step]["retained_bytes_per_param"] - 3) <= TOL
    # later steps and init are untouched
    for phase in ("init", "steady"):
        assert abs(site_rows(s, phase)[target]["retained_bytes_per_param"]
                   - site_rows(base, phase)[target]["retained_bytes_per_param"]) <= TOL


def test_transient_allocation_shows_in_peak_not_in_retained(runs_dir: Path, base: dict[str, Any]) -> None:
    target = f"{ZERO}.unscale_and_clip_grads"
    s = injected_run(runs_dir, "inject-transient", target, "transient")
    got, ref = site_rows(s, "first_step")[target], site_rows(base, "first_step")[target]
    assert abs(got["peak_bytes_per_param"] - 3) <= TOL + ref["peak_bytes_per_param"]
    assert got["peak_bytes_per_param"] >= 3 - TOL
    assert abs(got["retained_bytes_per_param"] - ref["retained_bytes_per_param"]) <= TOL


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
