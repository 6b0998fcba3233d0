"""The optional memray view attributes native allocations to the DeepSpeed site that made them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from .conftest import rssprobe, summary

pytestmark = [pytest.mark.worker, pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("memray") is None, reason="memray is not installed")]


def test_adam_states_are_found_under_cpu_adam_step(runs_dir: Path) -> None:
    """DeepSpeedCPUAdam.step creates exp_avg and exp_avg_sq (4 + 4 B/param) on the first step
    and keeps them: memray's leaked records of that phase must put 8 B/param under that site."""
    out = runs_dir / "memray"
    rssprobe("run", "tiny", "--steps", "2", "--memray", "--out", str(out), check=True)
    s = summary(out)
    assert s["memray"] is True and (out / "memray-first_step.bin").exists()
    leaked = {row["where"]: row for row in s["native"]["first_step"]["leaked"]}
    assert abs(leaked["DeepSpeedCPUAdam.step"]["bytes_per_param"] - 8) < 0.1
    assert leaked["DeepSpeedCPUAdam.step"]["allocations"] >= 2
    init = {row["where"]: row for row in s["native"]["init"]["leaked"]}
    # the fp32 grad partition (4 B/param) is allocated in initialize_optimizer_states
    assert abs(init["DeepSpeedZeroOptimizer.initialize_optimizer_states"]["bytes_per_param"] - 4) < 0.1
    assert "Native allocations" in rssprobe("show", str(out)).stdout
