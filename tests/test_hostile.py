"""Bad input, as a hostile user would give it: every damaged file, incomplete run, out-of-range
option and impossible request is one line on stderr with exit 2, or, for a run whose data does not
back its manifest, "incomplete" (never ok, never compared: gate exit 125). No input is modified.

Every case works on a copy of one real tiny run (conftest's tiny_baseline); nothing here trains.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from rssprobe.campaign import engine as groups
from rssprobe.store.rundir import GroupDir

from .conftest import rssprobe

pytestmark = pytest.mark.worker  # every test here trains (or reads a run trained for it)

Damage = Callable[[Path], None]


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _events(run: Path) -> list[str]:
    return (run / "events.jsonl").read_text().splitlines()


def _write_events(run: Path, lines: list[str]) -> None:
    (run / "events.jsonl").write_text("".join(line + "\n" for line in lines))


def _edit_manifest(change: Callable[[dict], object]) -> Damage:
    """The manifest, changed in place by `change`."""
    def damage(run: Path) -> None:
        manifest = json.loads((run / "manifest.json").read_text())
        change(manifest)
        (run / "manifest.json").write_text(json.dumps(manifest))
    return damage


def _file(name: str, data: bytes) -> Damage:
    return lambda run: (run / name).write_bytes(data)


def _events_dir(run: Path) -> None:
    (run / "events.jsonl").unlink()
    (run / "events.jsonl").mkdir()


def _append_line(line: str) -> Damage:
    return lambda run: _write_events(run, [*_events(run), line])


def _without_steps(run: Path) -> None:
    _write_events(run, [ln for ln in _events(run) if json.loads(ln)["event"] != "step"])


def _truncated(run: Path) -> None:
    data = (run / "events.jsonl").read_bytes()
    (run / "events.jsonl").write_bytes(data[: len(data) // 3])


def _step_without_rss(run: Path) -> None:
    lines = []
    for ln in _events(run):
        e = json.loads(ln)
        if e["event"] == "step" and e["step"] == 2:
            del e["rss"]
        lines.append(json.dumps(e))
    _write_events(run, lines)


def _two_ranks(rank1: Callable[[Path], None]) -> Damage:
    """A 2-rank run whose rank 1 events are damaged by rank1 (copied from rank 0, then changed)."""
    def damage(run: Path) -> None:
        manifest = json.loads((run / "manifest.json").read_text())
        manifest["world_size"] = 2
        steps = manifest["scenario"]["steps"]
        manifest["ranks"] = {r: {"status": "ok", "error": None, "steps_done": steps} for r in ("0", "1")}
        (run / "manifest.json").write_text(json.dumps(manifest))
        shutil.copy(run / "events.jsonl", run / "events.rank1.jsonl")
        rank1(run / "events.rank1.jsonl")
    return damage


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:2000])


# (id, damage, why the run is incomplete)
INCOMPLETE = [
    ("events-truncated", _truncated, "step events"),
    ("events-empty", _file("events.jsonl", b""), "0 of"),
    ("events-missing", lambda run: (run / "events.jsonl").unlink(), "events.jsonl is missing"),
    ("events-no-steps", _without_steps, "0 of"),
    ("events-line-a-list", _append_line("[1,2,3]"), "not an event: a JSON list"),
    ("events-line-not-an-event", _append_line('{"foo": 1}'), "no 'event' kind"),
    ("events-step-without-rss", _step_without_rss, "a step event without 'rss'"),
    ("events-no-end", lambda run: _write_events(run, [ln for ln in _events(run) if '"event":"end"' not in ln]),
     "no end event"),
    ("rank1-missing", _two_ranks(lambda p: p.unlink()), "events.rank1.jsonl is missing"),
    ("rank1-truncated", _two_ranks(_cut), "events.rank1.jsonl has"),
]

# (id, damage, one-line message fragment) for `show`: exit 2
DAMAGED = [
    ("events-not-utf8", _file("events.jsonl", b"\xff\xfe\x00garbage\n"), "events.jsonl: damaged (not UTF-8"),
    ("events-a-directory", _events_dir, "events.jsonl: is a directory"),
    ("manifest-not-utf8", _file("manifest.json", b"\xff\xfe{}"), "manifest.json: damaged (not UTF-8"),
    ("manifest-not-json", _file("manifest.json", b"{nope"), "corrupt manifest (not JSON"),
    ("manifest-a-list", _file("manifest.json", b"[1, 2]"), "corrupt manifest (a JSON list"),
    ("manifest-no-status", _edit_manifest(lambda m: m.pop("status")), "status is missing"),
    ("manifest-scenario-null", _edit_manifest(lambda m: m.update(scenario=None)), "scenario is null"),
    ("manifest-steps-text", _edit_manifest(lambda m: m["scenario"].update(steps="four")), "scenario.steps"),
    ("native-garbage", _file("native.json", b"\x00\x01garbage"), "native.json: corrupt native view"),
    ("native-wrong-shape", _file("native.json", b'{"init": [1]}'), "native.json: corrupt native view"),
]


@pytest.fixture(scope="module")
def original(tiny_baseline: Path) -> Path:
    return tiny_baseline


@pytest.fixture(scope="module", autouse=True)
def untouched(original: Path):  # type: ignore[no-untyped-def]
    """No command here may modify its input: the original run is byte-identical afterwards."""
    before = _digest(original)
    yield
    assert _digest(original) == before


def _copy(original: Path, dest: Path, damage: Damage | None = None) -> Path:
    shutil.copytree(original, dest)
    if damage:
        damage(dest)
    return dest


def _one_line(proc) -> str:  # type: ignore[no-untyped-def]
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize("damage,fragment", [c[1:] for c in DAMAGED], ids=[c[0] for c in DAMAGED])
def test_a_damaged_file_is_one_line_exit_2(original: Path, tmp_path: Path, damage: Damage, fragment: str) -> None:
    run = _copy(original, tmp_path / "run", damage)
    snapshot = _digest(run)
    gate = ["gate", "--reference", str(original), "--candidate", str(run)]
    for args in (["show", str(run), "--format", "json"], gate):
        proc = rssprobe(*args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert fragment in _one_line(proc), (args, proc.stderr)
    assert _digest(run) == snapshot


@pytest.mark.parametrize("damage,reason", [c[1:] for c in INCOMPLETE], ids=[c[0] for c in INCOMPLETE])
def test_a_run_its_events_do_not_back_is_incomplete(original: Path, tmp_path: Path, damage: Damage,
                                                    reason: str) -> None:
    run = _copy(original, tmp_path / "run", damage)
    snapshot = _digest(run)
    shown = rssprobe("show", str(run), "--format", "json")
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    data = json.loads(shown.stdout)
    assert data["status"] == "incomplete" and reason in data["error"], data["error"]
    terminal = rssprobe("show", str(run))
    assert "status INCOMPLETE: " in terminal.stdout and reason in terminal.stdout
    csv = rssprobe("show", str(run), "--format", "csv")
    assert f"Status,run,incomplete,{data['error']}" in csv.stdout.replace('"', "")
    # never compared as if finished: undecided, exit 125 (also against ceilings)
    gate = rssprobe("gate", "--reference", str(original), "--candidate", str(run), "--format", "json")
    assert gate.returncode == 125 and json.loads(gate.stdout)["verdict"] == "undecided", gate.stdout + gate.stderr
    diff = rssprobe("diff", str(original), str(run), "--format", "json")
    assert diff.returncode == 125 and json.loads(diff.stdout)["verdict"] == "undecided", diff.stdout + diff.stderr
    limits = tmp_path / "limits.toml"
    limits.write_text('[limits]\n"budget.live" = 1000.0\n')
    against = rssprobe("gate", "--candidate", str(run), "--limits", str(limits))
    assert against.returncode == 125, against.stdout + against.stderr
    assert _digest(run) == snapshot


def test_the_undamaged_copy_is_ok_and_passes(original: Path, tmp_path: Path) -> None:
    """The control: the same checks on an untouched copy say ok and pass."""
    run = _copy(original, tmp_path / "run")
    assert json.loads(rssprobe("show", str(run), "--format", "json", check=True).stdout)["status"] == "ok"
    assert "Status,run,ok,," in rssprobe("show", str(run), "--format", "csv", check=True).stdout
    assert rssprobe("diff", str(original), str(run)).returncode == 0
    limits = tmp_path / "limits.toml"
    limits.write_text('[limits]\n"budget.live" = 1000.0\n')
    assert rssprobe("gate", "--candidate", str(run), "--limits", str(limits)).returncode == 0


def test_a_group_with_an_incomplete_member_is_not_finished(original: Path, tmp_path: Path) -> None:
    group = tmp_path / "g"
    group.mkdir()
    (group / "group.json").write_text(json.dumps({"id": "g", "label": "baseline", "scenario": "tiny", "repeat": 3,
                                                  "started": "2030-01-01T00:00:00+00:00"}))
    for i in (1, 2, 3):
        _copy(original, group / f"run-0{i}", _truncated if i == 2 else None)
    shown = rssprobe("show", str(group))
    assert "2 of 3 runs finished" in shown.stdout and "INCOMPLETE" in shown.stdout, shown.stdout
    csv = rssprobe("show", str(group), "--format", "csv").stdout
    assert "Status,run-02,incomplete," in csv and "Status,run-01,ok," in csv
    gate = rssprobe("gate", "--reference", str(group), "--candidate", str(group))
    assert gate.returncode == 125 and "did not finish" in gate.stdout
    # a matrix's index judges its runs the same way: never "ok" for an incomplete one
    assert GroupDir(group).statuses() == ["ok", "incomplete", "ok"]
    # a resumed matrix, scale or bisect runs such a group again instead of reusing it
    assert not groups.finished(group, 3)
    shutil.rmtree(group / "run-02")
    _copy(original, group / "run-02")
    assert groups.finished(group, 3)


def test_a_corrupt_group_does_not_break_show_latest(original: Path, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _copy(original, root / "good")
    for name, data in (("not-json", b"{nope"), ("a-list", b"[1]"), ("not-utf8", b"\xff\xfe")):
        (root / name).mkdir()
        (root / name / "group.json").write_bytes(data)
    (root / "bad-run").mkdir()
    (root / "bad-run" / "manifest.json").write_bytes(b"[]")
    latest = rssprobe("show", "latest", env={"RSSPROBE_RUNS": str(root)})
    assert latest.returncode == 0 and "run good" in latest.stdout, latest.stderr
    for name, fragment in (("not-json", "corrupt group file (not JSON"), ("a-list", "corrupt group file (a JSON list"),
                           ("not-utf8", "not UTF-8")):
        proc = rssprobe("show", str(root / name))
        assert proc.returncode == 2 and fragment in _one_line(proc)


# (id, arguments after the command, file contents by name, message fragment): exit 2, one line, nothing run
OPTIONS = [
    ("threshold-nan", ["diff", "{run}", "{run}", "--threshold", "nan"], {}, "not a finite number"),
    ("threshold-negative", ["gate", "--reference", "{run}", "--candidate", "{run}", "--threshold", "-1"], {},
     "--threshold"),
    ("alpha-zero", ["gate", "--reference", "{run}", "--candidate", "{run}", "--alpha", "0"], {}, "--alpha"),
    ("alpha-two", ["diff", "{run}", "{run}", "--alpha", "2"], {}, "--alpha"),
    ("limits-empty", ["gate", "--candidate", "{run}", "--limits", "{l.toml}"], {"l.toml": b"[limits]\n"}, "limits"),
    ("limits-nan", ["gate", "--candidate", "{run}", "--limits", "{l.toml}"],
     {"l.toml": b'[limits]\n"budget.live" = nan\n'}, "finite"),
    ("limits-misspelt", ["gate", "--candidate", "{run}", "--limits", "{l.toml}"],
     {"l.toml": b'[limits]\n"budget.lvie" = 30.0\n'}, "budget.lvie: no such figure (close: budget.live"),
    ("limits-not-utf8", ["gate", "--candidate", "{run}", "--limits", "{l.toml}"], {"l.toml": b"\xff\xfe"}, "not UTF-8"),
    ("limits-a-directory", ["gate", "--candidate", "{run}", "--limits", "{dir}"], {}, "is a directory"),
    ("junit-a-directory", ["gate", "--reference", "{run}", "--candidate", "{run}", "--junit", "{dir}"], {},
     "--junit"),
    ("usage-unknown-option", ["show", "--bogus"], {}, "No such option"),
    ("usage-missing-argument", ["diff"], {}, "Missing argument"),
    ("usage-unknown-command", ["bogus"], {}, "No such command"),
    # refused before any worker starts (1e11: within the 100,000-layer bound at tiny's width, beyond any memory)
    ("params-too-big", ["run", "tiny", "--set", "model.params=1e11"], {}, "need about"),
    ("matrix-params-too-big", ["matrix", "tiny", "--set", "model.params=1e11"], {}, "need about"),
    ("bisect-params-too-big", ["bisect", "tiny", "--components", "pr8132", "--set", "model.params=1e11"], {},
     "need about"),
    ("extra-site-absent", ["run", "tiny", "--set",
                           'probes.extra_sites=["deepspeed.runtime.zero.stage_1_and_2.not_a_function"]'], {},
     "does not exist"),
    ("inject-bad-number", ["run", "tiny", "--patch", "testing.inject:site=deepspeed.initialize,bytes_per_param=abc"],
     {}, "bytes_per_param=abc is not a number"),
    ("inject-bad-mode", ["run", "tiny", "--patch", "testing.inject:site=deepspeed.initialize,mode=sometimes"], {},
     "mode must be retained or transient"),
    ("inject-no-site", ["run", "tiny", "--patch", "testing.inject:bytes_per_param=1"], {}, "site=DOTTED.PATH"),
    ("malloc-env-not-a-number", ["run", "tiny", "--malloc-env", "MALLOC_ARENA_MAX=lots"], {}, "non-negative integer"),
    ("patch-file-not-utf8", ["run", "tiny", "--patch-file", "{p.diff}"], {"p.diff": b"\xff\xfe\x00"}, "not UTF-8"),
    ("patch-file-garbage", ["run", "tiny", "--patch-file", "{p.diff}"], {"p.diff": b"hello\n"}, "not a unified diff"),
    ("gate-patch-file-garbage", ["gate", "tiny", "--run", "--patch-file", "{p.diff}"], {"p.diff": b"hello\n"},
     "not a unified diff"),
    ("scenario-not-utf8", ["run", "{s.toml}"], {"s.toml": b'name = "x"\xff\n'}, "not UTF-8"),
    ("out-is-a-file", ["run", "tiny", "--out", "{s.toml}"], {"s.toml": b""}, "exists and is not a directory"),
]


@pytest.mark.parametrize("args,files,fragment", [c[1:] for c in OPTIONS], ids=[c[0] for c in OPTIONS])
def test_bad_options_and_requests_are_one_line_exit_2(original: Path, tmp_path: Path, args: list[str],
                                                      files: dict[str, bytes], fragment: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "dir").mkdir()
    names = {"run": str(original), "dir": str(tmp_path / "dir")}
    for name, data in files.items():
        (work / name).write_bytes(data)
        names[name] = str(work / name)
    argv = [names.get(a[1:-1], a) if a.startswith("{") and a.endswith("}") else a for a in args]
    runs = tmp_path / "runs"
    proc = rssprobe(*argv, cwd=work, env={"RSSPROBE_RUNS": str(runs), "RSSPROBE_SCALE": str(runs),
                                          "RSSPROBE_MATRIX": str(runs), "RSSPROBE_BISECT": str(runs)})
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert fragment in _one_line(proc), proc.stderr
    assert "verdict" not in proc.stdout.lower()  # refused before deciding, not after
    assert not runs.exists()  # nothing ran, no run directory left behind
    assert sorted(p.name for p in work.iterdir()) == sorted(files)


def test_every_event_a_real_run_writes_passes_the_check(original: Path) -> None:
    """The event checker refuses nothing a real worker writes (or every real run would read incomplete)."""
    from rssprobe.contract.events import event_problem

    events = [json.loads(line) for line in _events(original)]
    assert {e["event"] for e in events} >= {"phase", "model", "partition", "init", "step", "census", "end"}
    assert [event_problem(e) for e in events if event_problem(e)] == []
    assert event_problem({"event": "partition", "params": None}) is None
