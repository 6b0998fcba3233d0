"""Old DeepSpeed releases' quirks, absorbed rather than reported (issue 13): no 0.15.4 install needed.

* 0.15.4's CPU accelerator runs `numactl` (absent here) to count devices unless LOCAL_SIZE is set:
  the launcher exports it for the worker and, through torchrun, every rank, as DeepSpeed's launcher does.
* 0.15.4's rank 0 aborts at exit after its last step ("terminate called without an active exception"):
  a real worker that does the same (testing.abort_at_exit) is judged by its steps and its end event,
  with the exit status reported beside them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rssprobe.config import scenario
from rssprobe.run import launch as launcher

from .conftest import rssprobe


def test_the_worker_and_every_rank_get_local_size() -> None:
    for world in (1, 2):
        req = launcher.RunRequest(scenario=scenario.load("tiny", [f"world_size={world}"]), scenario_ref="tiny",
                                  python=sys.executable)
        assert launcher._worker_env(req, "t", "d")["LOCAL_SIZE"] == str(world)


@pytest.mark.worker
def test_a_worker_that_aborts_after_its_end_event_is_ok_with_its_exit_status_beside(runs_dir: Path) -> None:
    out = runs_dir / "tiny-abort-at-exit"
    proc = rssprobe("run", "tiny", "--steps", "2", "--patch", "testing.abort_at_exit", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["exit_code"] == -6  # SIGABRT, really: the process did abort
    assert "terminate called without an active exception" in (out / "worker.log").read_text()
    assert manifest["status"] == "ok" and manifest["steps_done"] == 2
    assert manifest["exit_after_end"] == "process exited with SIGABRT after its end event"
    shown = json.loads(rssprobe("show", str(out), "--format", "json", check=True).stdout)
    assert shown["status"] == "ok" and shown["exit_after_end"] == manifest["exit_after_end"]
    terminal = rssprobe("show", str(out), check=True).stdout
    assert "status ok (process exited with SIGABRT after its end event)" in terminal


def test_an_abort_before_the_end_event_is_still_a_failure() -> None:
    """The control, on the orchestrator's judgement alone: no end event, the same exit status: failed."""
    events = [{"event": "step", "step": 1}]
    assert launcher._rank_status(events, -6, False, False) == ("failed", "the worker was killed by SIGABRT")
    assert launcher._rank_status([*events, {"event": "end", "status": "ok"}], -6, False, False) == ("ok", None)
