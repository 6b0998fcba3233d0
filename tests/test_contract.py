"""The contract between the worker and the orchestrator, and the format version every file carries.

* A run directory written before format versions existed (tests/data/format-0/tiny-run, by landed main at
  b85abcc; never regenerated) reads back with exactly the figures `show` gave for it then.
* A file of a newer format than this rssprobe reads is refused with one line (exit 2), before anything.
* Every file a new run writes carries the current format (the shared tiny_baseline run).
* The worker's writer refuses an event its kind does not declare; option checks need no worker code.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rssprobe.contract.files import EVENTS, FORMAT_VERSION, MANIFEST, WORKER_SPEC
from rssprobe.contract.interventions import INTERVENTIONS, SETS
from rssprobe.contract.names import FILE_TORCH_CPU, PART_KEYS
from rssprobe.store import upgrade
from rssprobe.store.rundir import GroupDir

from .conftest import rssprobe

DATA = Path(__file__).parent / "data" / "format-0"
NEWER = FORMAT_VERSION + 1


@pytest.fixture
def old_run(tmp_path: Path) -> Path:
    """A copy of the format-0 run (the original stays untouched whatever a test does)."""
    return Path(shutil.copytree(DATA / "tiny-run", tmp_path / "tiny-run"))


def test_a_run_written_before_format_versions_reads_back_with_the_same_figures(old_run: Path) -> None:
    data = json.loads(rssprobe("show", str(old_run), "--format", "json", check=True).stdout)
    expected = json.loads((DATA / "tiny-run.metrics.json").read_text())
    assert data["status"] == "ok"
    assert sorted(data["metrics"]) == sorted(expected)  # the same names ...
    assert data["metrics"] == expected  # ... and the same numbers, to the last bit
    assert "format" not in json.loads((old_run / MANIFEST).read_text())  # it is a format-0 run


def _one_line_exit_2(*args: str) -> str:
    proc = rssprobe(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_a_manifest_of_a_newer_format_is_refused_with_one_line(old_run: Path) -> None:
    manifest = json.loads((old_run / MANIFEST).read_text())
    (old_run / MANIFEST).write_text(json.dumps({**manifest, "format": NEWER}))
    for args in (["show", str(old_run)], ["diff", str(old_run), str(old_run)]):
        line = _one_line_exit_2(*args)
        assert f"manifest.json: format {NEWER} is newer than this rssprobe reads" in line, line


def test_events_of_a_newer_format_are_refused_with_one_line(old_run: Path) -> None:
    lines = (old_run / EVENTS).read_text().splitlines()
    first = json.loads(lines[0])
    (old_run / EVENTS).write_text("\n".join([json.dumps({**first, "format": NEWER}), *lines[1:]]) + "\n")
    assert f"events.jsonl: format {NEWER} is newer" in _one_line_exit_2("show", str(old_run))


def test_a_group_and_a_campaign_index_of_a_newer_format_are_refused(tmp_path: Path, old_run: Path) -> None:
    group = GroupDir.create(tmp_path / "g", "tiny", "baseline", 1)
    shutil.copytree(old_run, group.member(1))
    info = json.loads((group.path / "group.json").read_text())
    (group.path / "group.json").write_text(json.dumps({**info, "format": NEWER}))
    assert f"group.json: format {NEWER} is newer" in _one_line_exit_2("show", str(group.path))
    scale = tmp_path / "s"
    scale.mkdir()
    (scale / "scale.json").write_text(json.dumps({"format": NEWER, "groups": [], "repeat": 1}))
    assert f"scale.json: format {NEWER} is newer" in _one_line_exit_2("show", str(scale))


@pytest.mark.worker
def test_every_file_a_new_run_writes_carries_the_current_format(tiny_baseline: Path, tmp_path: Path) -> None:
    for name in (MANIFEST, WORKER_SPEC):
        assert json.loads((tiny_baseline / name).read_text())["format"] == FORMAT_VERSION, name
    first = json.loads((tiny_baseline / EVENTS).read_text().splitlines()[0])
    assert first["format"] == FORMAT_VERSION and first["event"] == "phase"
    later = [json.loads(line) for line in (tiny_baseline / EVENTS).read_text().splitlines()[1:]]
    assert all("format" not in e for e in later)  # the first line says it for the file
    group = GroupDir.create(tmp_path / "g", "tiny", "baseline", 1)  # what run --repeat and every campaign make
    assert json.loads((group.path / "group.json").read_text())["format"] == FORMAT_VERSION


def test_format_0_events_are_upgraded_by_an_explicit_step_and_current_ones_are_not() -> None:
    trim = {"event": "trim_at_end", "t": 1.0, "returned": 1, "before": {"rss": 2}, "after": {"rss": 1}}
    step = {"event": "step", "sites": {"a.b": {"peak": 7, "retained": 1}}}
    sites = {"event": "sites", "installed": {}}
    assert upgrade.event(dict(trim), 0)["released_any"] == 1 and "returned" not in upgrade.event(dict(trim), 0)
    assert upgrade.event(json.loads(json.dumps(step)), 0)["sites"]["a.b"] == {"peak_above_entry": 7, "retained": 1}
    assert upgrade.event(dict(sites), 0)["steady"] == "full"
    assert upgrade.event(dict(trim), FORMAT_VERSION) == trim  # a current file is read as written


def test_the_worker_refuses_to_write_an_event_its_kind_does_not_declare(tmp_path: Path) -> None:
    from rssprobe.worker.events import EventWriter

    writer = EventWriter(tmp_path / "events.jsonl")
    writer.emit("end", status="ok")
    with pytest.raises(ValueError, match="a step event without 'rss'"):
        writer.emit("step", step=1, time_s=0.1, peak=1, entry_rss=1, mallinfo=None, sites={})
    with pytest.raises(ValueError, match="undeclared event kind 'surprise'"):
        writer.emit("surprise", x=1)
    writer.close()
    written = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in written] == ["end"] and written[0]["format"] == FORMAT_VERSION


def test_part_keys_are_the_names_users_gate_on() -> None:
    """The declared keys equal the names rssprobe derived from the labels before they were declared, so a
    ceiling or --metric written then still names the same figure."""
    for label, key in PART_KEYS.items():
        assert key == "part." + re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_"), label
    assert PART_KEYS[FILE_TORCH_CPU] == "part.file_libtorch_cpu_so"


def test_intervention_options_are_checked_without_importing_the_worker() -> None:
    code = ("import sys\nfrom rssprobe.config import patchsets, scenario\nfrom rssprobe.errors import UserError\n"
            "scen = scenario.load('tiny')\n"
            "try:\n    patchsets.resolve(scen, False, False, ['testing.inject:site=x,bytes_per_param=abc'])\n"
            "except UserError as e:\n    print(e)\n"
            "print(patchsets.resolve(scen, False, True, []))\n"
            "print(sorted(m for m in sys.modules if m.startswith('rssprobe.worker')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == ("--patch testing.inject:site=x,bytes_per_param=abc: testing.inject: bytes_per_param=abc "
                      "is not a number")
    assert out[1] == "('patched', ['pr8132.float-scale', 'pr8132.malloc-trim'])"
    assert out[2] == "[]"


def test_every_declared_intervention_has_a_worker_implementation_and_nothing_else_does() -> None:
    from rssprobe.worker.interventions import REGISTRY

    assert set(REGISTRY) == set(INTERVENTIONS)
    assert all(c in INTERVENTIONS for members in SETS.values() for c in members)
