"""analysis/compare.py on recorded fake runs (tests/fakes_rundir.py): no training."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rssprobe.analysis import metrics
from rssprobe.analysis.compare import Side, check_metrics
from rssprobe.config import scenario
from rssprobe.errors import UserError

from .fakes_rundir import make_run


def test_a_stored_scenario_that_no_longer_validates_lends_no_other_scenarios_figure_names(tmp_path: Path) -> None:
    """Where a run's stored scenario no longer validates (a field a later rssprobe refuses), its figures are named
    from what was measured and what any scenario can have, never from the default scenario's own code sites (which
    once let a site figure the runs never had pass)."""
    run = make_run(tmp_path / "r")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["scenario"]["model"]["width"] = -768  # no longer a valid scenario
    (run / "manifest.json").write_text(json.dumps(manifest))
    side = Side.load(str(run))
    assert side.scenario() is None
    check_metrics("--metric", ["budget.live", "budget.malloc_trim_released"], [side])  # measured; any run's
    site = next(n for n in metrics.known(scenario.load("default")) if n.startswith("site.") and n not in
                side.measured())  # one of the default scenario's code sites that these runs never measured
    with pytest.raises(UserError, match=re.escape(f"{site}: no such figure")):
        check_metrics("--metric", [site], [side])
