"""Hostile input, fifth round (issue 40), the classes of outputs and readers: one table per class, each case a test.

* K2: no output is written through a link. The claim file is created exclusively and never adopted when it is not
  one of rssprobe's own claims; $GITHUB_STEP_SUMMARY is appended to only when it is a file of one name; a file
  rssprobe rewrites (collect's steps.parquet) is replaced, never written through; and no module but
  store/outputs.py (the one primitive) opens a file to write.
* H1: a lock file that is not a regular file of one name (a FIFO, a directory, a link) is one line, never a hang.
* R1: every JSON and TOML reader is depth-bounded: a document nested 100,000 deep is one line naming the file.
* L3: a scenario value of the wrong type is refused, naming the key (no "yes" read as true, no "4" as 4).
* V2: `verdict` on a plan without a measurable claim answers in one line and writes a page that says so.
* floor: the Python the package declares is the Python its code needs (a static check), and the Makefile stops
  below it before making anything.

Same promises as every hostile class: one line, exit 2 (or the documented code), no traceback, no input changed
(bytes and modification times compared before and after). Nothing here starts a worker: the runs read are
synthetic (tests/fakes_rundir.py), written in each test's own directory.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rssprobe.errors import UserError
from rssprobe.store import claim, reader

from .fakes_rundir import Step, make_run
from .test_hostile_classes import cli
from .test_hostile_trust import snapshot

ROOT = Path(__file__).resolve().parent.parent
DEEP = 100_000
DEEP_JSON = "[" * DEEP + "]" * DEEP
DEEP_TOML = "v = " + "[" * DEEP + "]" * DEEP + "\n"


def _runs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Two synthetic finished runs (RUN, RUN2) and a work directory."""
    runs = tmp_path / "runs"
    w = tmp_path / "w"
    w.mkdir()
    return make_run(runs, run_id="RUN"), make_run(runs, run_id="RUN2"), w


# ==== K2: no output is written through a link =================================================================
# (id, set-up in (RUN, RUN2, w), arguments, what the one line says). Each: exit 2, one line; RUN, RUN2 and every
# file the set-up made stay byte for byte as they were, and the claim file is left where it was.

def _claim_link(kind: str, content: str | None = None) -> Callable[[Path, Path, Path], None]:
    def make(run: Path, run2: Path, w: Path) -> None:
        (w / "D").mkdir()
        at = w / "D" / claim.CLAIM
        if kind == "hard":
            os.link(run / "manifest.json", at)
        elif kind == "symbolic":
            at.symlink_to(run / "manifest.json")
        elif kind == "fifo":
            os.mkfifo(at)
        else:
            at.write_text(content or "")
    return make


def _gone_orchestrator(run: Path, run2: Path, w: Path) -> None:
    """RUN's manifest names an orchestrator that is gone (as a killed run's does), then hard-linked as a claim."""
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["orchestrator"] = {"pid": 2**22 + 7, "start_ticks": 1, "boot_id": None}
    (run / "manifest.json").write_text(json.dumps(manifest))
    _claim_link("hard")(run, run2, w)


CLAIMS: list[tuple[str, Callable[[Path, Path, Path], None], str]] = [
    ("hard-link-to-a-manifest", _claim_link("hard"), "a hard link"),
    ("hard-link-to-a-manifest-whose-orchestrator-is-gone", _gone_orchestrator, "a hard link"),
    ("symbolic-link-to-a-manifest", _claim_link("symbolic"), "symbolic link"),
    ("a-fifo", _claim_link("fifo"), "a FIFO"),
    ("a-file-of-notes", _claim_link("text", "my notes, not a claim\n"), "not one of rssprobe's claims"),
    ("json-that-is-not-a-claim", _claim_link("text", '{"id": "mine", "status": "ok"}'), "not one of rssprobe's"),
    ("a-claim-with-more-keys", _claim_link("text", json.dumps({"orchestrator": {"pid": 1}, "command": [], "since": "x",
                                                                "data": "precious"})), "not one of rssprobe's"),
]


@pytest.mark.parametrize("setup,fragment", [c[1:] for c in CLAIMS], ids=[c[0] for c in CLAIMS])
def test_a_claim_file_that_is_not_rssprobes_own_is_refused_and_left_as_it_is(
        tmp_path: Path, setup: Callable[[Path, Path, Path], None], fragment: str) -> None:
    """`mkdir D && ln RUN/manifest.json D/.rssprobe-claim && rssprobe report --out D RUN2; rssprobe show RUN`."""
    run, run2, w = _runs(tmp_path)
    setup(run, run2, w)
    at = w / "D" / claim.CLAIM
    before = {p: snapshot(p) for p in (run, run2)}
    kept = at.lstat()
    got = cli("report", "--out", str(w / "D"), str(run2))
    assert got.code == 2 and fragment in got.one_line(), got.stderr
    assert {p: snapshot(p) for p in before} == before
    after = at.lstat()
    assert (after.st_ino, after.st_mode, after.st_size, after.st_mtime_ns) == (kept.st_ino, kept.st_mode,
                                                                               kept.st_size, kept.st_mtime_ns)
    assert cli("show", str(run), "--format", "json").code == 0


def test_a_claim_of_rssprobes_own_whose_holder_is_gone_is_still_taken_over(tmp_path: Path) -> None:
    """The control: a claim record left by a killed command is rssprobe's own and is taken over, as before."""
    run, run2, w = _runs(tmp_path)
    record = {"orchestrator": {"pid": 2**22 + 7, "start_ticks": 1, "boot_id": None}, "command": ["rssprobe"],
              "since": "2026-01-01T00:00:00+00:00"}
    _claim_link("text", json.dumps(record))(run, run2, w)
    got = cli("report", "--out", str(w / "D"), str(run2))
    assert got.code == 0 and "took over the claim" in got.stderr, got.stderr
    assert (w / "D" / "report.md").is_file() and not (w / "D" / claim.CLAIM).exists()


STEP_SUMMARIES: list[tuple[str, Callable[[Path, Path, Path], Path], str]] = [
    # $GITHUB_STEP_SUMMARY at a name that reaches a file inside the candidate run, or another run
    ("hard-link-into-the-candidate", lambda r, r2, w: _hard(r2 / "events.jsonl", w / "summary.md"), "hard link"),
    ("hard-link-into-another-run", lambda r, r2, w: _hard(r / "manifest.json", w / "summary.md"), "hard link"),
    ("symbolic-link-into-a-third-run", lambda r, r2, w: _sym(make_run(w, run_id="OTHER") / "events.jsonl",
                                                               w / "summary.md"), "symbolic link"),
]


def _hard(target: Path, at: Path) -> Path:
    os.link(target, at)
    return at


def _sym(target: Path, at: Path) -> Path:
    at.symlink_to(target)
    return at


@pytest.mark.parametrize("setup,fragment", [c[1:] for c in STEP_SUMMARIES], ids=[c[0] for c in STEP_SUMMARIES])
def test_a_step_summary_that_is_a_link_is_not_appended_to_and_the_verdict_stands(
        tmp_path: Path, setup: Callable[[Path, Path, Path], Path], fragment: str) -> None:
    """The gate's verdict and exit code are those of the same gate without the summary; one warning line; the
    runs are unchanged."""
    runs = tmp_path / "runs"
    run, w = make_run(runs, run_id="RUN"), tmp_path / "w"
    run2 = make_run(runs, run_id="RUN2")
    w.mkdir()
    control = cli("gate", "--reference", str(run), "--candidate", str(run2))
    target = setup(run, run2, w)
    before = {p: snapshot(p) for p in (run, run2, w)}
    got = cli("gate", "--reference", str(run), "--candidate", str(run2), env={"GITHUB_STEP_SUMMARY": str(target)})
    assert got.code == control.code, (got.code, control.code, got.stderr)
    warning = [ln for ln in got.stderr.splitlines() if "GITHUB_STEP_SUMMARY" in ln]
    assert len(warning) == 1 and fragment in warning[0] and "Traceback" not in got.stderr, got.stderr
    assert {p: snapshot(p) for p in before} == before


def test_collect_replaces_a_link_at_steps_parquet_never_writes_through_it(tmp_path: Path) -> None:
    """`collect RUN` where RUN/steps.parquet is a symbolic link into another run: the link is replaced by RUN's
    own table; the other run's table stays as it was (docs/guarantees.md)."""
    runs = tmp_path / "runs"
    run, other = make_run(runs, run_id="RUN"), make_run(runs, run_id="OTHER", steps=[Step(), Step()])
    (run / "steps.parquet").unlink()
    (run / "steps.parquet").symlink_to(other / "steps.parquet")
    before = snapshot(other)
    got = cli("collect", str(run))
    assert got.code == 0, got.stderr
    assert snapshot(other) == before
    assert not (run / "steps.parquet").is_symlink() and reader.read_table(run / "steps.parquet").num_rows == 3


# The one primitive: no module but store/outputs.py (the primitive itself, not scanned; and the claim, which is its
# own exclusive create) opens a file to write. The worker is the other side of the contract (it cannot import the
# store): its event and log files are opened with O_NOFOLLOW in the run directory this side made; left out here.
WRITERS = {"write_text", "write_bytes", "to_parquet", "to_csv", "to_json", "to_feather", "savefig", "write_table",
           "copy", "copy2", "copyfile", "copytree", "move", "symlink_to", "hardlink_to", "link_to", "mkfifo",
           "extractall", "extract", "touch"}
ALLOWED = {  # (module, call) -> why it is not a way around the primitive
    ("rssprobe/store/claim.py", "os.open"): "the claim file: created exclusively, O_NOFOLLOW, never adopted",
    ("rssprobe/reporters/plots.py", "savefig"): "into a BytesIO; the command writes the bytes through outputs",
    ("rssprobe/reporters/verdict.py", "savefig"): "into a BytesIO; the command writes the bytes through outputs",
    ("rssprobe/campaign/merge.py", "copytree"): "a shard's cell into a new directory of the claimed --out, "
                                                "links copied as links (symlinks=True), never followed",
    ("rssprobe/run/compilecache.py", "symlink_to"): "ccache's wrapper: a new link renamed over its own name",
    ("rssprobe/run/envs/build.py", "extractall"): "a git archive into a directory it just made, filter='data'",
}


def _writes(path: Path) -> list[tuple[str, int]]:
    """(call, line) of every call in a module that could open a file to write."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if name in WRITERS and not (isinstance(f, ast.Attribute) and ast.unparse(f.value) == "outputs"):
            found.append((name, node.lineno))
        elif name == "open" and isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "os":
            flags = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
            if any(w in flags for w in ("O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC")):
                found.append(("os.open", node.lineno))
        elif name == "open" and not isinstance(f, ast.Attribute):
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"),
                                                                 None)
            text = mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else "r"
            if any(c in text for c in "wax+"):
                found.append(("open", node.lineno))
    return found


def test_no_module_but_the_primitive_opens_a_file_to_write() -> None:
    offenders = []
    for path in sorted((ROOT / "rssprobe").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("rssprobe/worker/") or rel == "rssprobe/store/outputs.py":
            continue
        offenders += [f"{rel}:{line} {call}" for call, line in _writes(path) if (rel, call) not in ALLOWED]
    assert not offenders, "write through store/outputs.py (replace, write_file, append_file, create, lock):\n" + \
        "\n".join(offenders)


def test_the_structure_check_finds_a_write() -> None:
    """The check above can fail: it finds each way of writing it looks for."""
    src = ("import os\nfrom pathlib import Path\nopen('x', 'w')\nPath('x').write_text('')\n"
           "os.open('x', os.O_WRONLY | os.O_CREAT)\nframe.to_parquet('x')\nopen('x')\nos.open('x', os.O_RDONLY)\n")
    path = Path(__file__).with_name("_probe_writes.py")
    try:
        path.write_text(src)
        assert [c for c, _ in _writes(path)] == ["open", "write_text", "os.open", "to_parquet"]
    finally:
        path.unlink()


# ==== H1: a lock file that is not a file is one line, never a hang =============================================

LOCKS: list[tuple[str, Callable[[Path], None], str]] = [
    ("a-fifo", lambda p: os.mkfifo(p), "is a FIFO, not a lock file"),
    ("a-directory", lambda p: p.mkdir(), "is a directory, not a lock file"),
    ("a-symbolic-link", lambda p: p.symlink_to(p.with_name("elsewhere")), "is a symbolic link, not a lock file"),
    ("a-hard-link", lambda p: (p.with_name("precious").write_text("data"), os.link(p.with_name("precious"), p)),
     "is a hard link"),
]

@pytest.fixture(scope="module")
def checkpointed() -> Any:
    """A scenario that loads a checkpoint (model.load = "checkpoint"), loaded once."""
    from rssprobe.config import scenario

    return scenario.load("llama-small-zero3", ['model.load="checkpoint"'])


def _alarm(signum: int, frame: Any) -> None:
    raise TimeoutError("still waiting after 20 s (a hang)")


@pytest.mark.parametrize("make,fragment", [c[1:] for c in LOCKS], ids=[c[0] for c in LOCKS])
def test_the_checkpoint_caches_lock_file_is_checked_never_waited_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checkpointed: Any, make: Callable[[Path], None],
        fragment: str) -> None:
    """checkpoints.ensure, the first thing a run of a model.load = "checkpoint" scenario does with the cache (before
    any worker), with an alarm: a FIFO at the lock's name hung it forever, a directory was a traceback, a link was
    truncated through. One line (UserError), and the cache is left as it was."""
    from rssprobe.run import checkpoints

    monkeypatch.setenv("RSSPROBE_CHECKPOINTS", str(tmp_path / "ck"))
    out = checkpoints.directory(checkpointed, sys.executable)
    lock = out.parent / f".{out.name}.lock"
    lock.parent.mkdir(parents=True)
    make(lock)
    kept = snapshot(tmp_path / "ck")
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(20)
    try:
        with pytest.raises(UserError) as refused:
            checkpoints.ensure(checkpointed, sys.executable)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert fragment in str(refused.value) and "\n" not in str(refused.value)
    assert snapshot(tmp_path / "ck") == kept and not out.exists()


# ==== R1: every reader is depth-bounded ======================================================================
# (id, set-up in (RUN, w) that plants a document nested 100,000 deep, arguments, the file the line names)

def _deep(name: str, text: str = DEEP_JSON) -> Callable[[Path, Path], None]:
    def plant(run: Path, w: Path) -> None:
        target = Path(name.replace("{run}", str(run)).replace("{w}", str(w)))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return plant


def _deep_event(run: Path, w: Path) -> None:
    lines = (run / "events.jsonl").read_text().splitlines()
    lines.insert(3, DEEP_JSON)
    (run / "events.jsonl").write_text("\n".join(lines) + "\n")


def _deep_group(run: Path, w: Path) -> None:
    (w / "g").mkdir()
    os.rename(run, w / "g" / "run-01")
    (w / "g" / "group.json").write_text(DEEP_JSON)


def _deep_sweep(run: Path, w: Path) -> None:
    (w / "s").mkdir()
    (w / "s" / "scale.json").write_text(DEEP_JSON)


def _deep_index(run: Path, w: Path) -> None:
    (w / "m").mkdir()
    (w / "m" / "matrix.json").write_text(DEEP_JSON)


def _deep_latest(run: Path, w: Path) -> None:
    (w / "cache").mkdir()
    (w / "cache" / "latest.json").write_text(DEEP_JSON)


def _deep_marker(run: Path, w: Path) -> None:
    (w / "envs" / "e1").mkdir(parents=True)
    (w / "envs" / "e1" / ".rssprobe-env.json").write_text(DEEP_JSON)


CPU = ["--ranks-per-node", "1", "--accelerator", "cpu"]
READERS: list[tuple[str, Callable[[Path, Path], None], list[str], str, int]] = [
    # (id, plant, arguments, what the output names, exit code)
    ("manifest", _deep("{run}/manifest.json"), ["show", "{run}"], "manifest.json", 2),
    ("events", _deep_event, ["show", "{run}"], "events.jsonl line 4 is not an event: nested deeper", 0),
    ("group", _deep_group, ["show", "{w}/g"], "group.json", 2),
    ("scale", _deep_sweep, ["show", "{w}/s"], "scale.json", 2),
    ("index", _deep_index, ["show", "{w}/m"], "matrix.json", 2),
    ("latest-record", _deep_latest, ["show", "latest"], "RUN", 0),  # a damaged record is none: the newest run
    ("calibration", _deep("{w}/cal.json"), ["estimate", "tiny", *CPU, "--calibration", "{w}/cal.json"], "cal.json", 2),
    ("hf-config", _deep("{w}/config.json"), ["estimate", *CPU, "--hf-config", "{w}/config.json"], "config.json", 2),
    ("scenario", _deep("{w}/deep.toml", DEEP_TOML), ["run", "{w}/deep.toml", "--out", "{w}/r"], "deep.toml", 2),
    ("limits", _deep("{w}/limits.toml", DEEP_TOML), ["gate", "--candidate", "{run}", "--limits", "{w}/limits.toml"],
     "limits.toml", 2),
    ("plan", _deep("{w}/plan.toml", DEEP_TOML), ["matrix", "--plan", "{w}/plan.toml", "--out", "{w}/mo"],
     "plan.toml", 2),
    ("claim-file", _deep("{w}/D/" + claim.CLAIM), ["report", "--out", "{w}/D", "{run}"], claim.CLAIM, 2),
    ("set", lambda run, w: None, ["run", "tiny", "--set", "model.layers=" + "[" * DEEP + "]" * DEEP, "--out", "{w}/r"],
     "--set model.layers", 2),
    ("env-marker", _deep_marker, ["env", "list"], ".rssprobe-env.json", 2),
]


@pytest.mark.parametrize("plant,args,named,code", [c[1:] for c in READERS], ids=[c[0] for c in READERS])
def test_every_reader_is_bounded_in_depth(tmp_path: Path, plant: Callable[[Path, Path], None], args: list[str],
                                          named: str, code: int) -> None:
    """A document nested 100,000 deep (a RecursionError in json and tomllib) is one line naming the file, exit 2;
    an events line so nested is a line that is not an event (the run is incomplete, as for any damaged line)."""
    runs = tmp_path / "runs"
    run, w = make_run(runs, run_id="RUN"), tmp_path / "w"
    w.mkdir()
    plant(run, w)
    argv = [a.replace("{run}", str(run)).replace("{w}", str(w)) for a in args]
    env = {"RSSPROBE_CACHE": str(w / "cache"), "RSSPROBE_ENVS": str(w / "envs"), "RSSPROBE_RUNS": str(runs),
           "RSSPROBE_ESTIMATE": str(w / "estimate")}
    got = cli(*argv, env=env)
    assert got.code == code, (got.code, got.stdout[-500:], got.stderr[-500:])
    if code == 2:
        line = got.one_line()
        assert named in line and len(line) < 400, line
    else:
        assert named in got.stdout + got.stderr and "Traceback" not in got.stderr, got.stdout[-2000:]


def test_the_depth_bound_reads_strings_and_comments_as_text() -> None:
    """Brackets inside strings and comments are not levels: a legal document with many is read."""
    text = json.dumps({"a": "[" * 500 + "{" * 500, "b": [[["\\\"["] * 3]]})
    assert reader.loads_json(text, "x") == json.loads(text)
    toml = 'a = "[[[[' + "[" * 300 + '"\n# ' + "{" * 300 + "\nb = '''" + "[" * 300 + "'''\nc = [[1], [2]]\n"
    assert reader.loads_toml(toml, "x")["c"] == [[1], [2]]
    assert reader.depth("[" * 65 + "]" * 65) == 65


# ==== L3: a scenario value of the wrong type is refused, naming the key =========================================
# (id, a scenario file's text (`{tiny}`: the packaged tiny's tables, `{llama}`: llama-small-zero3's), --set words,
# the key the one line names)

TINY = '''name = "t"
steps = 4
micro_batch = 2
{top}
[model]
layers = 4
width = 1024
{model}
[zero]
pin_memory = true
gradient_clipping = 1.0
{zero}'''

LLAMA = '''name = "l"
steps = 2
micro_batch = 2

[model]
kind = "transformers"
seq_len = 32
load = "checkpoint"

[model.hf]
model_type = "llama"
vocab_size = 1024
hidden_size = 64
intermediate_size = 128
num_hidden_layers = 2
num_attention_heads = 4
num_key_value_heads = 2

[model.from_pretrained]
{fp}
'''


def _tiny(top: str = "", model: str = "", zero: str = "") -> str:
    return TINY.format(top=top, model=model, zero=zero)


TYPES: list[tuple[str, str, list[str], str]] = [
    ("low-cpu-mem-usage-yes", LLAMA.format(fp='low_cpu_mem_usage = "yes"'), [],
     "model.from_pretrained.low_cpu_mem_usage"),
    ("shards-a-string", LLAMA.format(fp='shards = "4"'), [], "model.from_pretrained.shards"),
    ("shards-true", LLAMA.format(fp="shards = true"), [], "model.from_pretrained.shards"),
    ("steps-a-string", _tiny(top='timeout_s = 60\nseed = 1'), ['steps="10"'], "steps"),
    ("steps-a-fraction", _tiny(), ["steps=2.5"], "steps"),
    ("seed-true", _tiny(top="seed = true"), [], "seed"),
    ("timeout-a-string", _tiny(top='timeout_s = "900"'), [], "timeout_s"),
    ("layers-a-string", _tiny(), ['model.layers="4"'], "model.layers"),
    ("pin-memory-a-string", _tiny(), ['zero.pin_memory="true"'], "zero.pin_memory"),
    ("clipping-a-string", _tiny(zero='overlap_comm = false'), ['zero.gradient_clipping="1.0"'],
     "zero.gradient_clipping"),
    ("census-one", _tiny(model="", zero="[probes]\ncensus = 1"), [], "probes.census"),
    ("beta-a-string", _tiny(zero='[optimizer]\nbetas = [0.9, "0.99"]'), [], "optimizer.betas.1"),
]


@pytest.mark.parametrize("text,sets,key", [c[1:] for c in TYPES], ids=[c[0] for c in TYPES])
def test_a_scenario_value_of_the_wrong_type_is_refused_naming_the_key(tmp_path: Path, text: str, sets: list[str],
                                                                      key: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text(text)
    before = snapshot(path)
    # --calibration names a file that is not there: whatever the scenario, nothing is calibrated (no worker starts)
    got = cli("estimate", str(path), *CPU, "--calibration", str(tmp_path / "none.json"),
              *[w for s in sets for w in ("--set", s)],
              env={"RSSPROBE_ESTIMATE": str(tmp_path / "est"), "RSSPROBE_CHECKPOINTS": str(tmp_path / "ck")})
    line = got.one_line()
    assert got.code == 2 and f"{path}: {key}: " in line, line
    assert snapshot(path) == before


def test_every_packaged_scenario_and_numbers_as_toml_writes_them_still_load() -> None:
    """The control: strictness refuses no scenario rssprobe ships; an int where a float is meant is a float
    (timeout_s = 900, lr = 1), and a whole float where an int is meant an int (micro_batch = 1e2, a bucket of 5e8
    bytes), as TOML writes numbers."""
    from rssprobe.config import scenario

    for name in scenario.packaged_names():
        scenario.load(name, [])
    loaded = scenario.load("tiny", ["timeout_s=900", "optimizer.lr=1", "zero.reduce_bucket_size=5e8", "micro_batch=1e2",
                                    "optimizer.betas=[0, 0.5]", "model.params=1e6"])
    assert loaded.timeout_s == 900.0 and loaded.optimizer.betas == (0.0, 0.5)
    assert loaded.zero.reduce_bucket_size == 500_000_000 and loaded.micro_batch == 100


# ==== V2: verdict on a plan without a measurable claim ========================================================

PLAN = '''[plan]
scenario = "tiny"
repeat = 1
patches = ["baseline"]
'''
UNMEASURABLE = '''
[[claims]]
what = "pinned rounding"
claimed = 8.0
cpu_unmeasurable = "CUDA's pinned allocator rounds; the CPU has none"
'''
VERDICTS = [("claims-that-the-cpu-cannot-measure", PLAN + UNMEASURABLE, "its 1 claim cannot be measured"),
            ("no-claim-at-all", PLAN, "it declares no claim")]


@pytest.mark.parametrize("text,says", [c[1:] for c in VERDICTS], ids=[c[0] for c in VERDICTS])
def test_verdict_without_a_measurable_claim_answers_in_one_line_and_writes_a_page_that_says_so(
        tmp_path: Path, text: str, says: str) -> None:
    """The plan's run directory made by shard 2 of 2 of its one cell (nothing trains): plt.subplots(0, 1) was a
    traceback."""
    plan = tmp_path / "plan.toml"
    plan.write_text(text)
    assert cli("matrix", "--plan", str(plan), "--out", str(tmp_path / "D"), "--shard", "2/2").code == 0
    out = tmp_path / "v" / "verdict.md"
    got = cli("verdict", str(plan), "--runs", str(tmp_path / "D"), "--out", str(out))
    assert got.code == 0 and says in got.one_line() and str(out) in got.one_line(), got.stderr
    page = out.read_text().splitlines()
    assert page[0].startswith("# ") and says in page[2] and page[2].startswith("**No claim of"), page[:4]


# ==== floor: the Python the package declares is the Python its code needs ====================================

def _floor() -> str:
    """pyproject.toml's requires-python floor: ">=3.11" -> "3.11"."""
    spec = reader.read_toml(ROOT / "pyproject.toml")["project"]["requires-python"]
    assert spec.startswith(">=") and "," not in spec, spec
    return spec[2:]


VERMIN = [sys.executable, "-c", "import sys, vermin; sys.exit(vermin.main())"]


def _vermin() -> None:
    """vermin is a dev dependency (make install installs it): missing, the floor would be unchecked, so it fails."""
    assert importlib.util.find_spec("vermin"), "vermin is not installed: pip install -e '.[dev]' (or make install)"


def test_the_code_needs_no_newer_python_than_it_declares() -> None:
    """vermin (a dev dependency) reads every module of the package, its tests and tools for the standard library
    and the syntax each needs: nothing may need a Python newer than requires-python (tomllib and typing.NotRequired
    are 3.11; the floor said 3.10 and `make demo` failed at import on Ubuntu 22.04's Python)."""
    _vermin()
    proc = subprocess.run([*VERMIN, "--no-tips", "--violations", "--no-parse-comments",
                           f"-t={_floor()}-", "rssprobe", "tests", "tools"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-1000:]


def test_the_floor_check_finds_what_a_lower_floor_lacks() -> None:
    """The check above can fail: against 3.10 it names tomllib and typing.NotRequired."""
    _vermin()
    proc = subprocess.run([*VERMIN, "--no-tips", "--violations", "-t=3.10-",
                           "rssprobe/store/reader.py", "rssprobe/contract/events.py"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0 and "'tomllib' module requires" in proc.stdout and "NotRequired" in proc.stdout


def test_the_makefile_floor_is_the_declared_one_and_a_lower_python_stops_make_before_anything(tmp_path: Path) -> None:
    """`make demo` (and install, test) with a Python below the floor: one line naming it, exit 2, nothing made (no
    .venv). The Python below the floor is a real one when the machine has one (pyenv's), else a stand-in that
    answers as a 3.10 would (what the Makefile asks is the version)."""
    makefile = (ROOT / "Makefile").read_text()
    assert f"PYTHON_FLOOR = {_floor()}\n" in makefile
    older = sorted(Path.home().glob(".pyenv/versions/3.10*/bin/python3.10"))
    if older:
        python = str(older[0])
    else:
        python = str(tmp_path / "python3.10")
        Path(python).write_text("#!/bin/sh\necho 'Python 3.10.12'\n")
        os.chmod(python, 0o755)
    work = tmp_path / "clone"
    work.mkdir()
    for name in ("Makefile", "pyproject.toml"):
        (work / name).write_text((ROOT / name).read_text())
    # as a person types it: not a sub-make of `make test` (whose MAKEFLAGS/MAKELEVEL add "Entering directory" lines)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    proc = subprocess.run(["make", "demo", f"PYTHON={python}"], cwd=work, capture_output=True, text=True, timeout=60,
                          env=env)
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stdout + proc.stderr
    assert f"needs Python {_floor()} or newer" in lines[0] and "3.10" in lines[0], lines[0]
    assert sorted(p.name for p in work.iterdir()) == ["Makefile", "pyproject.toml"]
