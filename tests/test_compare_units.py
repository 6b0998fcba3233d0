"""analysis/compare.py on recorded fake runs (tests/fakes_rundir.py): no training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rssprobe.analysis.compare import Side, check_metrics
from rssprobe.errors import UserError

from .fakes_rundir import make_run


def test_a_stored_scenario_that_no_longer_validates_lends_no_other_scenarios_figure_names(tmp_path: Path) -> None:
    """Where a run's stored scenario no longer validates (a field a later rssprobe refuses), its figures are named
    from what was measured, never from the default scenario's (which once let a figure the runs never had pass)."""
    run = make_run(tmp_path / "r")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["scenario"]["model"]["width"] = -768  # no longer a valid scenario
    (run / "manifest.json").write_text(json.dumps(manifest))
    side = Side.load(str(run))
    assert side.scenario() is None
    check_metrics("--metric", ["budget.live"], [side])  # measured: accepted
    assert "budget.malloc_trim_released" not in side.measured()  # a figure the default scenario can have
    with pytest.raises(UserError, match=r"budget\.malloc_trim_released: no such figure"):
        check_metrics("--metric", ["budget.malloc_trim_released"], [side])
