"""Hostile input, fourth round (issue 33): one table per class of what a hostile user found, each case a test.

The classes: nothing is written over, into or through an input (store/outputs.py); nothing blocks on a FIFO or
reads a device or an unbounded file (a script too); readers scale (show of a run with 65,536 ranks, a model at
the layer bound); every check that can be made before a worker is made before any (a [script] table with a
sha256, a scenario beside --script, transformers activations, torch alloc conf values on a CPU build and torch
2.13's missing pytorch #192722, bisect --limits, a Unicode digit in --shard); stored runs are read right (a
stored alloc conf a newer check refuses, a sweep short of its repeat, a script with a byte-order mark); and a run
leaves nothing behind (a daemon of the user's script, a bisect's git state).

Same promises as every hostile class: one line, exit 2 (or the documented code), no traceback, no input changed
(its bytes and modification times are compared before and after). Nothing here starts a worker but the tests
marked `worker`: the cases are refused before one, and those that read a finished run read conftest's shared
tiny run (which trains once per session: they carry the marker).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rssprobe.analysis.summary import Summary
from rssprobe.campaign.bisect import git
from rssprobe.config import hfconfig, scenario
from rssprobe.errors import UserError
from rssprobe.store import claim, outputs
from rssprobe.store.rundir import RunDir

from .test_hostile_classes import _arguments, _roots, cli, copy, group, other_group, sub, sweep

worker = pytest.mark.worker  # reads conftest's shared tiny run, which trains once per session


def snapshot(path: Path) -> dict[str, tuple[str, int]]:
    """Every file under `path` (or `path` itself): its sha256 and modification time, to compare after a command."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    return {str(p.relative_to(path) if p != path else p.name): (hashlib.sha256(p.read_bytes()).hexdigest(),
                                                                p.stat().st_mtime_ns) for p in files}


@pytest.fixture(scope="module")
def original(tiny_baseline: Path) -> Path:
    return tiny_baseline


# ==== class: nothing is written over, into or through an input ================================================
# (id, arguments ({run}: a copy of the run, {g}: a group of copies, {w}: a work directory), fragment, what to set up
# in {w} first). Each: exit 2, one line; the run, the group and every file named stay byte for byte as they were.

def _link(name: str, target: str) -> Callable[[Path, Path, Path], None]:
    def make(w: Path, run: Path, g: Path) -> None:
        (w / "out").mkdir(exist_ok=True)
        (w / "out" / name).symlink_to(target.replace("{run}", str(run)).replace("{g}", str(g)))
    return make


OVER_INPUTS: list[tuple[str, list[str], str, Callable[[Path, Path, Path], None] | None]] = [
    ("report-html-over-manifest", ["report", "--html", "{run}/manifest.json", "{run}"], "an input of this command",
     None),
    ("report-html-over-events", ["report", "--html", "{run}/events.jsonl", "{run}"], "lies inside {run}, an input",
     None),
    ("report-html-over-steps", ["report", "--html", "{run}/steps.parquet", "{run}"], "lies inside", None),
    ("report-html-over-group-json", ["report", "--html", "{g}/group.json", "{g}"], "lies inside", None),
    ("report-html-new-file-in-run", ["report", "--html", "{run}/page.html", "{run}"], "lies inside", None),
    ("report-out-is-the-run", ["report", "--out", "{run}", "{run}"], "is {run}, an input", None),
    ("report-out-inside-a-member", ["report", "--out", "{g}/run-01/r", "{g}"], "lies inside", None),
    ("report-md-linked-to-an-input", ["report", "{run}", "--out", "{w}/out"], "lies inside",
     _link("report.md", "{run}/manifest.json")),
    ("report-html-linked-into-an-input", ["report", "{run}", "--out", "{w}/out"], "lies inside",
     _link("report.html", "{run}/events.jsonl")),
    ("report-by-latest", ["report", "--html", "{run}/manifest.json", "latest"], "an input of this command", None),
    ("gate-junit-over-manifest", ["gate", "--reference", "{run}", "--candidate", "{g}", "--junit",
                                  "{run}/manifest.json"], "an input of this command", None),
    ("gate-junit-over-a-member", ["gate", "--reference", "{run}", "--candidate", "{g}", "--junit",
                                  "{g}/run-02/events.jsonl"], "lies inside", None),
    ("gate-junit-over-limits", ["gate", "--candidate", "{run}", "--limits", "{w}/limits.toml", "--junit",
                                "{w}/limits.toml"], "an input of this command", None),
    ("merge-out-inside-a-shard", ["merge", "{w}/s", "--out", "{w}/s/merged"], "merge never writes into its inputs",
     None),
    ("verdict-out-over-the-plan", ["verdict", "{w}/limits.toml", "--runs", "{w}/s", "--out", "{w}/limits.toml"],
     "an input of this command", None),
    ("verdict-out-inside-the-runs", ["verdict", "{w}/limits.toml", "--runs", "{w}/s", "--out", "{w}/s/verdict.md"],
     "lies inside", None),
]


@worker
@pytest.mark.parametrize("args,fragment,setup", [c[1:] for c in OVER_INPUTS], ids=[c[0] for c in OVER_INPUTS])
def test_nothing_is_written_over_or_into_an_input(original: Path, tmp_path: Path, args: list[str], fragment: str,
                                                  setup: Callable[[Path, Path, Path], None] | None) -> None:
    w = tmp_path / "w"
    w.mkdir()
    runs = tmp_path / "runs"
    run, g = copy(original, runs / "run"), group(original, tmp_path / "g")
    (w / "limits.toml").write_text('[limits]\n"budget.live" = 1000.0\n')
    sweep(original, w / "s")
    if setup:
        setup(w, run, g)
    before = {p: snapshot(p) for p in (run, g, w / "limits.toml", w / "s")}
    argv = [a.replace("{run}", str(run)).replace("{g}", str(g)).replace("{w}", str(w)) for a in args]
    got = cli(*argv, env={"RSSPROBE_RUNS": str(runs)})
    assert got.code == 2, (got.code, got.stdout[-300:], got.stderr)
    assert fragment.replace("{run}", str(run)) in got.one_line(), got.stderr
    assert {p: snapshot(p) for p in before} == before


@worker
def test_a_link_at_an_output_name_is_replaced_never_written_through(original: Path, tmp_path: Path) -> None:
    """report.md inside --out, a symbolic link (and report.html a hard link) to another run's files that are not
    inputs of this command: the report replaces the names; the other run's manifest and events stay as they were."""
    other = copy(original, tmp_path / "other")
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").symlink_to(other / "manifest.json")
    os.link(other / "events.jsonl", out / "report.html")
    before = snapshot(other)
    got = cli("report", str(original), "--out", str(out))
    assert got.code == 0, got.stderr
    assert snapshot(other) == before
    assert not (out / "report.md").is_symlink() and (out / "report.md").read_text().startswith("# rssprobe report")
    assert (out / "report.html").stat().st_ino != (other / "events.jsonl").stat().st_ino


@worker
def test_a_step_summary_over_an_input_is_skipped_with_one_line_and_the_verdict_stands(original: Path,
                                                                                   tmp_path: Path) -> None:
    """$GITHUB_STEP_SUMMARY is an optional output CI sets, not the user: over or inside an input it is skipped
    with a warning (the verdict and its exit code stand); the run stays complete."""
    run = copy(original, tmp_path / "run")
    before = snapshot(run)
    got = cli("gate", "--reference", str(original), "--candidate", str(run),
              env={"GITHUB_STEP_SUMMARY": str(run / "events.jsonl")})
    assert got.code == 0 and "lies inside" in got.one_line() and "the verdict and its exit code stand" in got.stderr
    assert snapshot(run) == before
    assert cli("show", str(run), "--format", "json").stdout.count('"status": "ok"') >= 1


@worker
def test_fresh_never_deletes_the_plan_it_was_given(original: Path, tmp_path: Path) -> None:
    """`matrix --plan D/plan.toml --out D --fresh`: the campaign directory is emptied but for its inputs. Shard 2 of
    2 of a one-cell plan owns no cell, so nothing trains."""
    d = tmp_path / "D"
    d.mkdir()
    plan = d / "plan.toml"
    plan.write_text('[plan]\nscenario = "tiny"\nrepeat = 1\npatches = ["baseline"]\n')
    args = ["matrix", "--plan", str(plan), "--out", str(d), "--shard", "2/2"]
    assert cli(*args).code == 0  # a directory holding only the command's own plan counts as empty
    (d / "old-cell").mkdir()
    before = snapshot(plan)
    got = cli(*args, "--fresh")
    assert got.code == 0, got.stderr
    assert snapshot(plan) == before and not (d / "old-cell").exists() and (d / "matrix.json").is_file()
    assert f"{plan}: kept (an input of this command)" in got.stderr


def test_a_bisect_out_inside_the_checkout_is_refused(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo", 2)
    before = snapshot(repo / ".git")
    got = cli("bisect", "tiny", "--deepspeed-src", str(repo), "--good", "HEAD~1", "--bad", "HEAD", "--out",
              str(repo / "bisect"), env=_roots(tmp_path))
    assert got.code == 2 and "lies inside" in got.one_line(), got.stderr
    assert snapshot(repo / ".git") == before and not (repo / "bisect").exists()


def test_an_output_check_resolves_links_and_hard_links(tmp_path: Path) -> None:
    """The one check (store/outputs.py), apart from any command: a path through a directory link into an input,
    a hard link to an input file, a FIFO, a device, a directory. (A hard link to a file inside an input directory
    is replaced, not written through: test_a_link_at_an_output_name_is_replaced_never_written_through.)"""
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text("{}")
    (tmp_path / "limits.toml").write_text("")
    (tmp_path / "alias").symlink_to(run)
    os.link(tmp_path / "limits.toml", tmp_path / "hard.json")
    os.mkfifo(tmp_path / "fifo")
    outputs.reset()
    outputs.note(run)
    outputs.note(tmp_path / "limits.toml")
    try:
        for path, says in ((tmp_path / "alias" / "x.html", "lies inside"), (tmp_path / "hard.json", "same file as"),
                           (tmp_path / "fifo", "is a FIFO"), (Path("/dev/null"), "is a character device"),
                           (tmp_path, "is a directory")):
            with pytest.raises(UserError, match=says):
                outputs.check_file(path, "--x")
        outputs.check_file(tmp_path / "new.html", "--x")  # beside the input: fine
        assert outputs.kept(tmp_path) and outputs.kept(run) and not outputs.kept(tmp_path / "new.html")
    finally:
        outputs.reset()


# ==== class: nothing blocks or reads without end (FIFOs, devices, huge files; outputs too) ====================
# (id, what to make in {w} (name -> "fifo" | "dev-zero" | "big" | text), arguments, environment, exit code, fragment)

NO_HANG: list[tuple[str, dict[str, str], list[str], dict[str, str], int, str]] = [
    ("script-fifo", {"f.py": "fifo"}, ["run", "--script", "{w}/f.py"], {}, 2, "is a FIFO"),
    ("script-fifo-positional", {"f.py": "fifo"}, ["run", "{w}/f.py"], {}, 2, "is a FIFO"),
    ("script-fifo-gate-run", {"f.py": "fifo"}, ["gate", "--run", "--script", "{w}/f.py"], {}, 2, "is a FIFO"),
    ("script-fifo-in-a-table", {"f.py": "fifo", "s.toml": 'name = "s"\n[model]\nkind = "script"\n[script]\n'
                                'path = "{w}/f.py"\nsha256 = "' + "0" * 64 + '"\n'}, ["run", "{w}/s.toml"], {}, 2,
     "is a FIFO"),
    ("script-dev-zero", {"z.py": "dev-zero"}, ["run", "--script", "{w}/z.py"], {}, 2, "is a character device"),
    ("script-too-large", {"big.py": "big"}, ["run", "--script", "{w}/big.py"], {}, 2, "too large"),
    ("junit-fifo", {"j.xml": "fifo"}, ["gate", "--reference", "{g}", "--candidate", "{g}", "--junit", "{w}/j.xml"],
     {}, 2, "is a FIFO"),
    ("junit-a-device", {}, ["gate", "--reference", "{g}", "--candidate", "{g}", "--junit", "/dev/null"], {}, 2,
     "is a character device"),
    ("html-fifo", {"r.html": "fifo"}, ["report", "{g}", "--html", "{w}/r.html"], {}, 2, "is a FIFO"),
    ("report-md-fifo", {"out/report.md": "fifo"}, ["report", "{g}", "--out", "{w}/out"], {}, 2, "is a FIFO"),
    ("summary-fifo", {"sum.md": "fifo"}, ["gate", "--reference", "{g}", "--candidate", "{g2}"],
     {"GITHUB_STEP_SUMMARY": "{w}/sum.md"}, 0, "is a FIFO"),
    ("claim-fifo-run", {"D/.rssprobe-claim": "fifo"}, ["run", "tiny", "--out", "{w}/D"], {}, 2, "is a FIFO"),
    ("claim-fifo-report", {"D/.rssprobe-claim": "fifo"}, ["report", "{g}", "--out", "{w}/D"], {}, 2, "is a FIFO"),
]


def _make(w: Path, files: dict[str, str]) -> None:
    for name, what in files.items():
        path = w / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if what == "fifo":
            os.mkfifo(path)
        elif what == "dev-zero":
            path.symlink_to("/dev/zero")
        elif what == "big":
            path.write_bytes(b"# " + b"x" * (17 << 20) + b"\n")  # past the script bound (16 MiB)
        else:
            path.write_text(what.replace("{w}", str(w)))


@worker
@pytest.mark.parametrize("files,args,env,code,fragment", [c[1:] for c in NO_HANG], ids=[c[0] for c in NO_HANG])
def test_nothing_blocks_on_a_fifo_or_reads_a_device(original: Path, tmp_path: Path, files: dict[str, str],
                                                    args: list[str], env: dict[str, str], code: int,
                                                    fragment: str) -> None:
    w = tmp_path / "w"
    w.mkdir()
    g, g2 = group(original, tmp_path / "g"), other_group(original, tmp_path / "g2")
    _make(w, files)
    before = snapshot(g)
    got = sub(*[a.replace("{w}", str(w)).replace("{g2}", str(g2)).replace("{g}", str(g)) for a in args],
              env={**_roots(tmp_path), **{k: v.replace("{w}", str(w)) for k, v in env.items()}}, timeout=120)
    assert got.code == code and fragment in got.one_line(), (got.code, got.stderr)
    assert snapshot(g) == before
    assert not (tmp_path / "roots").exists()


@worker
def test_merge_never_leaves_a_half_written_out(original: Path, tmp_path: Path) -> None:
    """A FIFO inside a shard's group: merge refuses (one line) before writing --out; with the FIFO gone the same
    merge succeeds into the same --out (nothing half-written was left to refuse it)."""
    s = sweep(original, tmp_path / "s")
    fifo = s / "params-2000000" / "run-01" / "extra.log"
    os.mkfifo(fifo)
    out = tmp_path / "m"
    got = sub("merge", str(s), "--out", str(out), timeout=120)
    assert got.code == 2 and "is a FIFO" in got.one_line(), got.stderr
    assert not out.exists() or claim.contents(out) == []
    fifo.unlink()
    again = cli("merge", str(s), "--out", str(out))
    assert again.code == 0, again.stderr
    assert (out / "scale.json").is_file() and (out / "params-2000000" / "run-01" / "manifest.json").is_file()


def test_a_merge_that_fails_midway_empties_its_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writing itself failing (a full disk, here the index after every group was copied): --out is emptied."""
    from rssprobe.campaign import merge

    s = tmp_path / "s"
    s.mkdir()
    (s / "scale.json").write_text(json.dumps({"format": 1, "kind": "scale", "definition": {}, "scenario": "tiny",
                                              "repeat": 1, "groups": [{"params": 1, "dir": "params-1"},
                                                                      {"params": 2, "dir": "params-2"}]}))
    for name in ("params-1", "params-2"):
        (s / name / "run-01").mkdir(parents=True)
        (s / name / "group.json").write_text(json.dumps({"format": 1, "id": name, "label": "b", "scenario": "tiny",
                                                         "repeat": 1, "started": "2030-01-01T00:00:00+00:00"}))
        (s / name / "run-01" / "manifest.json").write_text("{}")
    def full(*_args: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(merge.index_file, "write_index", full)  # the groups are copied; the index cannot be
    out = tmp_path / "m"
    with pytest.raises(UserError, match="No space left on device"):
        merge.merge([s], out)
    claim.release_all()
    assert not out.exists() or claim.contents(out) == []


# ==== class: readers scale to the documented bounds ===========================================================

@worker
@pytest.mark.parametrize("world", [1024, 65_536])
def test_show_of_a_run_at_the_rank_bound_answers(original: Path, tmp_path: Path, world: int) -> None:
    """A manifest that says 65,536 ranks (the bound) whose ranks' files are not there: show answers with one reason
    naming a few ranks and the count of the others (the time it takes is measured in the issue's note, never
    asserted here; the subprocess's time-out only guards against a hang)."""
    run = copy(original, tmp_path / "run")
    m = json.loads((run / "manifest.json").read_text())
    m["world_size"] = world
    (run / "manifest.json").write_text(json.dumps(m))
    got = sub("show", str(run), "--format", "json", timeout=600)
    assert got.code == 0, got.stderr
    data = json.loads(got.stdout)
    assert data["status"] == "incomplete" and f"(and {world - 4:,} more ranks)" in data["error"]
    assert len(data["ranks"]) == world


@worker
def test_a_rank_summary_reads_each_rank_once(original: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cost is linear in the ranks: every rank's events are read once for the per-rank table, the node figures
    and the judgement together (it was once per rank per rank: 201 s for `show` at 1,024 ranks)."""
    run = copy(original, tmp_path / "run")
    m = json.loads((run / "manifest.json").read_text())
    m["world_size"] = 64
    (run / "manifest.json").write_text(json.dumps(m))
    reads: list[int] = []
    real = RunDir.read_events

    def counted(self: RunDir, rank: int = 0) -> Any:
        reads.append(rank)
        return real(self, rank)

    monkeypatch.setattr(RunDir, "read_events", counted)
    data = Summary(RunDir(run)).as_dict()
    assert len(data["ranks"]) == 64 and sorted(reads) == list(range(64))


def test_a_model_at_the_layer_bound_is_sized_without_building_it(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    """num_hidden_layers = 100,000 (the bound): sized from meta models of 1, 2 and 3 layers (a layer of the model
    built on the meta device costs ~10-15 ms here: the whole one took minutes before any answer). An empty cache
    root: what an earlier run kept (config/shapecache.py) would be read instead of built."""
    monkeypatch.setenv("RSSPROBE_CACHE", str(tmp_path / "cache"))
    built: list[int] = []
    real = hfconfig.meta_model

    def counted(config: Any) -> Any:
        built.append(int(getattr(config, hfconfig.layers_key(config))))
        return real(config)

    monkeypatch.setattr(hfconfig, "meta_model", counted)
    scen = scenario.load("llama-small", ["model.hf.num_hidden_layers=100000"])
    small = scenario.load("llama-small", ["model.hf.num_hidden_layers=3"])
    per_layer = (scenario.load("llama-small", ["model.hf.num_hidden_layers=4"]).model.n_params
                 - small.model.n_params)
    assert max(built) <= hfconfig.WHOLE_BUILD_LAYERS
    assert scen.model.n_layers == 100_000 and scen.model.n_params == small.model.n_params + 99_997 * per_layer
    got = cli("run", "llama-small", "--set", "model.hf.num_hidden_layers=100000")
    assert got.code == 2 and "parameters need about" in got.one_line()


# ==== class: every check before any worker ====================================================================

SCRIPT = "import deepspeed\nprint('never run')\n"
TABLE = 'name = "s"\n[model]\nkind = "script"\n[script]\npath = "{path}"\nsha256 = "{sha}"\n'
SHA = hashlib.sha256(SCRIPT.encode()).hexdigest()
PLAN = '[plan]\nscenario = "tiny"\nrepeat = 1\npatches = ["baseline"]\nsets = [{sets}]\n'
SHARD = {"format": 1, "kind": "scale", "definition": {}, "scenario": "tiny", "repeat": 1, "groups": [],
         "shard": "\u00b2/3"}

BEFORE_WORKER: list[tuple[str, list[str], dict[str, str | bytes], str]] = [
    # a [script] table with a sha256 gets every file check
    ("table-script-missing", ["run", "{s.toml}"], {"s.toml": TABLE.format(path="{w}/nope.py", sha=SHA)},
     "no such script"),
    ("table-script-a-directory", ["run", "{s.toml}"], {"s.toml": TABLE.format(path="{w}", sha=SHA)},
     "is a directory"),
    ("table-script-wrong-hash", ["run", "{s.toml}"], {"t.py": SCRIPT, "s.toml": TABLE.format(path="{w}/t.py",
                                                                                            sha="0" * 64)},
     "its sha256 is"),
    ("table-script-not-utf8", ["run", "{s.toml}"], {"t.py": b"x = '\xff'\n", "s.toml": TABLE.format(
        path="{w}/t.py", sha=hashlib.sha256(b"x = '\xff'\n").hexdigest())}, "not UTF-8"),
    # a scenario beside --script is refused, not the script's first argument
    ("scenario-beside-script", ["run", "tiny", "--script", "{t.py}"], {"t.py": SCRIPT}, "'tiny' beside the script"),
    ("word-beside-positional-script", ["run", "{t.py}", "tiny"], {"t.py": SCRIPT}, "'tiny' beside the script"),
    ("scenario-beside-script-gate", ["gate", "tiny", "--run", "--script", "{t.py}"], {"t.py": SCRIPT},
     "beside the script"),
    ("scenario-beside-script-prepare", ["prepare", "tiny", "--script", "{t.py}", "--world-size", "2", "--out",
                                        "{w}/p"], {"t.py": SCRIPT}, "beside the script"),
    # transformers models' activations
    ("hf-seq-len", ["run", "llama-small", "--set", "model.seq_len=1e9"], {}, "model.seq_len: 1 ranks need"),
    ("hf-micro-batch", ["run", "llama-small", "--set", "micro_batch=1e8"], {}, "micro_batch: 1 ranks need"),
    ("hf-seq-len-scale", ["scale", "llama-small", "--params", "2.5e7,3e7", "--set", "model.seq_len=1e9"], {},
     "model.seq_len"),
    # torch alloc conf values on a CPU build: CUDA-only keys by the table, every key's value, the #192722 rule
    ("alloc-threads-3", ["run", "tiny", "--torch-alloc-conf", "pinned_num_register_threads:3"], {},
     "not a power of 2"),
    ("alloc-threads-negative", ["run", "tiny", "--torch-alloc-conf", "pinned_num_register_threads:-5"], {},
     "2^64 minus it"),
    ("alloc-register-maybe", ["run", "tiny", "--torch-alloc-conf", "pinned_use_cuda_host_register:maybe"], {},
     "True or False"),
    ("alloc-backend-bogus", ["run", "tiny", "--torch-alloc-conf", "backend:bogus"], {}, "torch takes native"),
    ("alloc-round-negative", ["run", "tiny", "--torch-alloc-conf", "pinned_max_round_threshold_mb:-5"], {},
     "2^64 minus it"),
    ("alloc-round-below-cached", ["run", "tiny", "--torch-alloc-conf", "pinned_max_round_threshold_mb:4"], {},
     "pytorch PR #192722"),
    ("alloc-round-below-cached-both", ["run", "tiny", "--torch-alloc-conf",
                                       "pinned_max_round_threshold_mb:4,pinned_max_cached_size_mb:8"], {},
     "pytorch PR #192722"),
    ("alloc-estimate-misspelt", ["estimate", "tiny", "--ranks-per-node", "1", "--accelerator", "cpu",
                                 "--torch-alloc-conf", "pinned_max_round_thresold_mb:4"], {}, "does not accept"),
    ("estimate-patch-unknown", ["estimate", "tiny", "--ranks-per-node", "1", "--accelerator", "cpu", "--patch",
                                "nosuch"], {}, "unknown intervention"),
    ("alloc-matrix", ["matrix", "tiny", "--torch-alloc-conf", "backend:bogus"], {}, "torch takes native"),
    ("alloc-matrix-other-torch", ["matrix", "tiny", "--torch", "2.13.0,2.14.1", "--deepspeed", "0.19.8",
                                  "--torch-alloc-conf", "pinned_max_round_threshold_mb:4"], {}, "torch 2.13.0 can"),
    ("alloc-plan", ["matrix", "--plan", "{p.toml}"],
     {"p.toml": PLAN.format(sets='"torch_alloc_conf=\\"backend:bogus\\""')}, "torch takes native"),
    ("alloc-scale", ["scale", "tiny", "--params", "1e6,2e6", "--torch-alloc-conf",
                     "pinned_use_cuda_host_register:maybe"], {}, "True or False"),
    ("alloc-gate-run", ["gate", "tiny", "--run", "--torch-alloc-conf", "backend:bogus"], {}, "torch takes native"),
    ("alloc-bisect", ["bisect", "tiny", "--components", "pr8132", "--set", 'torch_alloc_conf="backend:bogus"'], {},
     "torch takes native"),
    ("alloc-prepare", ["prepare", "tiny", "--world-size", "2", "--out", "{w}/p", "--set",
                       'torch_alloc_conf="backend:bogus"'], {}, "torch takes native"),
    # bisect --limits read before the bisect starts
    ("bisect-limits-nan-components", ["bisect", "tiny", "--components", "pr8132", "--limits", "{l.toml}"],
     {"l.toml": '[limits]\n"budget.live" = nan\n'}, "--limits"),
    ("bisect-limits-nan-commits", ["bisect", "tiny", "--deepspeed-src", "{repo}", "--good", "HEAD~1", "--bad",
                                   "HEAD", "--limits", "{l.toml}"], {"l.toml": '[limits]\n"budget.live" = nan\n'},
     "finite"),
    ("bisect-limits-misspelt", ["bisect", "tiny", "--deepspeed-src", "{repo}", "--good", "HEAD~1", "--bad", "HEAD",
                                "--limits", "{l.toml}"], {"l.toml": '[limits]\n"budget.lvie" = 30.0\n'},
     "close: budget.live"),
    ("bisect-limits-fifo", ["bisect", "tiny", "--deepspeed-src", "{repo}", "--good", "HEAD~1", "--bad", "HEAD",
                            "--limits", "{w}/fifo.toml"], {}, "is a FIFO"),
    # a Unicode digit in a shard
    ("shard-superscript", ["matrix", "tiny", "--shard", "\u00b2/3"], {}, "expected K/N"),
    ("shard-superscript-scale", ["scale", "tiny", "--params", "1e6,2e6", "--shard", "1/\u00b3"], {}, "expected K/N"),
    ("merge-shard-superscript", ["merge", "{w}/shard", "--out", "{w}/m"], {}, "damaged scale index (its shard"),
]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _repo(tmp_path_factory.mktemp("repo") / "r", 2)


def _repo(path: Path, commits: int) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "-C", str(path), "init", "-q"], check=True)
    for i in range(commits):
        (path / "f").write_text(str(i))
        subprocess.run(["git", "-C", str(path), "add", "f"], check=True)
        subprocess.run(["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm",
                        f"c{i}"], check=True)
    return path


@pytest.mark.parametrize("args,files,fragment", [c[1:] for c in BEFORE_WORKER], ids=[c[0] for c in BEFORE_WORKER])
def test_every_check_is_made_before_any_worker(tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch,
                                               args: list[str], files: dict[str, str | bytes], fragment: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    os.mkfifo(work / "fifo.toml")
    (work / "shard").mkdir()
    (work / "shard" / "scale.json").write_text(json.dumps(SHARD))
    made = {k: v.replace("{w}", str(work)) if isinstance(v, str) else v for k, v in files.items()}
    before = {p.name: snapshot(p) for p in [*work.iterdir(), repo / ".git"] if not p.is_fifo()}
    argv = [a.replace("{repo}", str(repo)) for a in _arguments(args, work, made, work)]
    before |= {p.name: snapshot(p) for p in work.iterdir() if p.name in made}
    # in this process (milliseconds a command, not a Python start), but in a fresh one where a FIFO could block
    got = sub(*argv, env=_roots(tmp_path), cwd=work, timeout=300) if "fifo" in " ".join(argv) else \
        cli(*argv, env=_roots(tmp_path))
    assert got.code == 2 and fragment in got.one_line(), (got.code, got.stderr)
    assert not (tmp_path / "roots").exists() and not (work / "p").exists() and not (work / "m").exists()
    assert {name: snapshot(work / name if name != ".git" else repo / ".git") for name in before} == before


def test_a_campaign_refusing_an_alloc_conf_checks_once_and_writes_nothing(tmp_path: Path) -> None:
    """A matrix of four cells with a bad alloc conf: one line, before the first cell (it was one FAILED per cell,
    exit 1), and no directory. In this process: a worker any cell started would fail the test (conftest.py)."""
    got = cli("matrix", "tiny", "--patch", "baseline,pr8132", "--allocator", "glibc,jemalloc", "--torch-alloc-conf",
              "pinned_num_register_threads:3", env=_roots(tmp_path))
    assert got.code == 2 and "not a power of 2" in got.one_line() and "cell" not in got.stderr
    assert not (tmp_path / "roots").exists()


def test_an_alloc_conf_the_table_allows_passes_the_checks() -> None:
    """The controls: values torch takes as written, and the safe forms of the two pinned knobs on torch 2.13."""
    from rssprobe.config import torch_alloc_conf
    from rssprobe.run import preflight

    for conf in ("pinned_num_register_threads:8,pinned_use_cuda_host_register:True", "backend:native",
                 "pinned_max_cached_size_mb:4", "pinned_max_round_threshold_mb:4,pinned_max_cached_size_mb:4",
                 "per_process_memory_fraction:0.5"):
        torch_alloc_conf.check(conf, "2.13.0")
    torch_alloc_conf.check("pinned_max_round_threshold_mb:4", "2.14.1")  # the fix is in 2.14
    preflight.check_alloc_conf_for("pinned_max_round_threshold_mb:4", ["2.14.1"])
    with pytest.raises(UserError, match="#192722"):
        preflight.check_alloc_conf_for("pinned_max_round_threshold_mb:4", ["2.14.1", "2.13.0"])


# ==== class: stored runs are read right =======================================================================

@worker
def test_a_stored_run_a_newer_check_would_refuse_is_shown_with_the_problem(original: Path, tmp_path: Path) -> None:
    """A run made with `--torch-alloc-conf pinned_max_round_threshold_mb:-5` before values were checked: show and
    diff read it (the pinned prediction named as not made, no traceback)."""
    run = copy(original, tmp_path / "run")
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    for e in events:
        if e["event"] == "pins" and isinstance(e.get("config"), dict) and isinstance(e["config"].get("env"), dict):
            e["config"]["env"]["PYTORCH_CUDA_ALLOC_CONF"] = "pinned_max_round_threshold_mb:-5"
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    m = json.loads((run / "manifest.json").read_text())
    m["scenario"]["torch_alloc_conf"] = "pinned_max_round_threshold_mb:-5"
    (run / "manifest.json").write_text(json.dumps(m))
    shown = cli("show", str(run))
    assert shown.code == 0 and "WARNING: PYTORCH_CUDA_ALLOC_CONF pinned_max_round_threshold_mb:-5" in shown.stdout
    data = json.loads(cli("show", str(run), "--format", "json").stdout)
    assert data["pinned"]["problem"] and "pinned.held_predicted" not in data["metrics"]
    assert cli("diff", str(original), str(run)).code == 0


@worker
def test_a_sweep_short_of_its_repeat_is_undecided_never_pass(original: Path, tmp_path: Path) -> None:
    """scale.json says repeat 3 while each size holds 2 runs (and group.json says 2): not finished, never PASS."""
    a = sweep(original, tmp_path / "a")
    for g in ("params-1000000", "params-2000000"):
        shutil.copytree(a / g / "run-01", a / g / "run-02")
        info = json.loads((a / g / "group.json").read_text())
        (a / g / "group.json").write_text(json.dumps({**info, "repeat": 2}))
    index = json.loads((a / "scale.json").read_text())
    (a / "scale.json").write_text(json.dumps({**index, "repeat": 3}))
    data = json.loads(cli("show", str(a), "--format", "json").stdout)
    assert any("1 of 3 runs missing" in p for p in data["problems"]), data["problems"]
    for args in (["gate", "--reference", str(a), "--candidate", str(a)], ["diff", str(a), str(a)]):
        got = cli(*args, "--format", "json")
        assert got.code in (0, 125) and json.loads(got.stdout)["verdict"] == "undecided", (args, got.stdout[-300:])
    assert cli("gate", "--reference", str(a), "--candidate", str(a)).code == 125


@pytest.mark.parametrize("data", [b"\xef\xbb\xbfimport sys\nprint('bom')\n",
                                  "# -*- coding: latin-1 -*-\nname = 'caf\u00e9'\n".encode("latin-1")],
                         ids=["utf8-bom", "latin1-declared"])
def test_a_script_python_runs_is_taken(tmp_path: Path, data: bytes) -> None:
    """A UTF-8 script with a byte-order mark (and one that declares its encoding) is Python source: accepted as
    Python would run it (refused here only by the time-out asked for, before any worker)."""
    path = tmp_path / "t.py"
    path.write_bytes(data)
    scen = scenario.load(str(path))
    assert scen.script is not None and scen.script.sha256 == hashlib.sha256(data).hexdigest()
    got = cli("run", "--script", str(path), "--steps", "1", "--set", "timeout_s=1e-9", env=_roots(tmp_path))
    assert got.code == 2 and "timeout_s" in got.one_line() and "SyntaxError" not in got.stderr


# ==== class: nothing left behind ==============================================================================

DAEMON = """
import os, subprocess, sys
# a daemon in a session of its own, with an empty environment (no marker of rssprobe's), double-forked away
subprocess.run(["/bin/sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $! > " + sys.argv[1]], start_new_session=True,
               env={})
"""


@worker
def test_a_run_ends_every_process_it_caused(tmp_path: Path) -> None:
    script, pidfile = tmp_path / "daemon.py", tmp_path / "daemon.pid"
    script.write_text(DAEMON)
    got = sub("run", "--script", str(script), "--out", str(tmp_path / "run"), "--", str(pidfile), timeout=600)
    assert got.code == 1, got.stderr  # the script never called deepspeed.initialize: failed, as documented
    pid = int(pidfile.read_text())
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            stat = Path(f"/proc/{pid}/stat").read_text() if Path(f"/proc/{pid}").exists() else ""
            if stat and stat[stat.rindex(")") + 2] == "Z":
                break  # killed; its last parent has not reaped it yet
            time.sleep(0.05)
        alive = Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split(")")[-1][1] != "Z"
        assert not alive, f"the daemon {pid} outlived its run"
        manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
        assert pid in manifest["killed_after_exit"]
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_a_commit_bisect_leaves_nothing_in_the_checkout(tmp_path: Path) -> None:
    """git bisect run in a clone that borrows the checkout's objects: the user's .git (packed-refs included), its
    files and its worktree list stay as they were."""
    repo = _repo(tmp_path / "r", 5)
    step = tmp_path / "step.sh"
    step.write_text("#!/bin/sh\ntest $(cat f) -lt 3\n")
    step.chmod(0o755)
    log = subprocess.run(["git", "-C", str(repo), "log", "--format=%H"], capture_output=True, text=True,
                         check=True).stdout.split()
    before = snapshot(repo)
    got = git.run(repo, log[-1], log[0], [str(step)])
    assert got.culprit == log[1]  # the commit that wrote 3
    assert snapshot(repo) == before and not (repo / ".git" / "packed-refs").exists()
    assert subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True,
                          check=True).stdout.count("\n") == 1
