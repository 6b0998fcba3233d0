"""A node's rank count (issue 41, item 5): held out at 4 and 8 CPU ranks per node (reports/estimate.md, "A node's
rank count"), a 2-rank calibration under glibc's own mmap threshold was 15-20% high on the node and a 1-rank one
within 3%; with the threshold fixed both within 3%. The estimate says so where it applies, and only there.

Truth is the recorded runs of reports/estimate/ranks.tar.gz (no training here): the published page regenerates
from them byte for byte (tests/test_evidence.py); these tests hold the note that page's finding put in the output,
on the packaged H200 calibration made to look like each kind of CPU calibration (its figures are not used).
"""

from __future__ import annotations

import dataclasses
import json
import tarfile
from pathlib import Path

import pytest

from rssprobe.analysis import calibration, estimate
from rssprobe.analysis.calibration import Calibration
from rssprobe.analysis.partition import Zero
from rssprobe.config import modelshape

RANKS = Path(__file__).parents[1] / "reports" / "estimate" / "ranks.tar.gz"


@pytest.fixture(scope="module")
def packaged() -> Calibration:
    return calibration.load(calibration.packaged("h200-default"), {})


def _like(cal: Calibration, ranks: int, accelerator: str = "cpu", fixed: bool = False) -> Calibration:
    """The calibration as if measured at `ranks` ranks on `accelerator`, glibc's threshold its own or fixed."""
    points = [dataclasses.replace(p, zero=dataclasses.replace(p.zero, world=ranks)) for p in cal.points]
    return dataclasses.replace(cal, points=points, accelerator=accelerator,
                               malloc_env={"MALLOC_MMAP_THRESHOLD_": "65536"} if fixed else {})


def test_more_ranks_than_a_two_rank_cpu_calibration_under_glibcs_own_threshold_say_likely_high(
        packaged: Calibration) -> None:
    """4 and 8 ranks from a 2-rank CPU calibration under glibc's own threshold: the note, with the command that
    calibrates at the target's ranks. None at the calibration's own rank count or fewer, with the threshold fixed
    (within 3% there), for a 1-rank calibration (its own note, workflows/estimate.ranks_note) or on CUDA (not
    measured)."""
    two = _like(packaged, 2)
    for k in (4, 8):
        note = estimate.more_ranks_note(k, two)
        assert note is not None and note.startswith(f"{k} ranks per node from a 2-rank calibration")
        assert "likely high" in note and f"--calibration-ranks {k}" in note
    assert estimate.more_ranks_note(2, two) is None
    assert estimate.more_ranks_note(8, _like(packaged, 2, fixed=True)) is None
    assert estimate.more_ranks_note(8, _like(packaged, 1)) is None
    assert estimate.more_ranks_note(8, _like(packaged, 2, accelerator="cuda")) is None


def test_the_estimate_carries_the_note(packaged: Calibration) -> None:
    """estimate() puts the note among its notes for 8 ranks from a 2-rank CPU calibration, and not for 2 ranks."""
    two = _like(packaged, 2)

    def notes(k: int) -> list[str]:
        target = estimate.Target(modelshape.linear(8, 2048, 1), Zero(2, k, 2, accelerator="cpu"), k, 1,
                                 two.points[0].rule)
        return estimate.estimate(target, two)["notes"]

    assert any(n.startswith("8 ranks per node from a 2-rank calibration") for n in notes(8))
    assert not any("ranks per node from a" in n for n in notes(2))


def test_the_recorded_finding_holds(tmp_path: Path) -> None:
    """The note's claim, read from the recorded estimates and runs: under glibc's own threshold the 2-rank
    calibration's node figures at 4 and 8 ranks are all above the measured mean by more than the 5% goal, the
    1-rank one's within it; with the threshold fixed both within 3% (issue 29's goals)."""
    from tools.evidence import estimate as evidence

    with tarfile.open(RANKS) as tar:
        tar.extractall(tmp_path, filter="data")
    _lines, node = evidence.rank_rows(tmp_path)
    assert {(r["ranks"], r["kind"], r["cal"]) for r in node} == {(k, kind, c) for k in (4, 8)
                                                                  for kind in ("fixed", "own") for c in (1, 2)}
    for r in node:
        if r["kind"] == "own" and r["cal"] == 2:
            assert r["err"] > evidence.GLIBC_GOAL, r
        else:
            assert abs(r["err"]) <= evidence.RANK_GOALS[r["kind"]], r
    assert all(json.loads(p.read_text())["target"]["ranks_per_node"] in (4, 8)
               for p in (tmp_path / "estimates").glob("*.json"))
