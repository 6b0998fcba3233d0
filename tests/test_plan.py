"""Run plans (`rssprobe matrix --plan`), the verdict report over them, and ccache behind op builds.

Bad plan files are one line naming the file, the key and the reason, exit 2, before anything runs.
One small real plan (tiny scenario, base + one allocator value, baseline only, 1 run each: 2 runs,
~40-60 s here) is run once, rerun to show it resumes without running anything, and reported on:
the census's fp32 master partition is exactly 4 B/param (a known answer: one fp32 copy of every
parameter), so that claim reads "reproduced" in both configurations; the unscale site's +4 is not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rssprobe.config import plan as planmod
from rssprobe.run import compilecache, host
from rssprobe.store import layout

from .conftest import rssprobe

GOOD = """
[plan]
scenario = "tiny"
repeat = 1
patches = ["baseline"]

[base]
allocator = "glibc"

[[axes]]
name = "allocator"
values = ["glibc+MALLOC_ARENA_MAX=2"]

[[claims]]
what = "fp32 master"
claimed = 4
metrics = ["role.fp32_master"]

[[claims]]
what = "unscale +4"
claimed = 4
metrics = ["site.DeepSpeedZeroOptimizer.unscale_and_clip_grads.first_step.retained"]

[[claims]]
what = "pinned"
claimed = 2
cpu_unmeasurable = "no pinning on the CPU accelerator"
"""


@pytest.mark.parametrize(("text", "expected"), [
    (GOOD.replace('repeat = 1', 'repeats = 1'), "plan.repeats: unknown key"),
    (GOOD.replace('"glibc+MALLOC_ARENA_MAX=2"', '"glibc+ARENAS=2"'), "'ARENAS=2' is not KNOB=INTEGER"),
    (GOOD.replace('"glibc+MALLOC_ARENA_MAX=2"', '"mimalloc"'), "unknown allocator 'mimalloc'"),
    (GOOD.replace('name = "allocator"\nvalues = ["glibc+MALLOC_ARENA_MAX=2"]', 'name = "ranks"\nvalues = [0]'),
     "is not a count of ranks"),
    (GOOD.replace('name = "allocator"', 'name = "compiler"'), "axes.0.name"),
    (GOOD.replace("[plan]", "[plans]"), "plans: unknown key"),
    (GOOD + '\n[[axes]]\nname = "allocator"\nvalues = ["jemalloc"]\n', "an axis is declared twice"),
    (GOOD.replace('metrics = ["role.fp32_master"]', ''), "give metrics, or cpu_unmeasurable"),
    (GOOD.replace('[base]\n', '[base]\ntorch = "2.13.0"\n'), "give both torch and deepspeed"),
    ("[plan\nscenario=", "not valid TOML"),
])
def test_bad_plan_is_one_line_exit_2(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(text)
    proc = rssprobe("matrix", "--plan", str(path), "--dry-run")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(path) in lines[0] and expected in lines[0], lines[0]


def test_plan_and_scenario_together_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(GOOD)
    proc = rssprobe("matrix", "tiny", "--plan", str(path))
    assert proc.returncode == 2 and "--plan declares the scenario" in proc.stderr


def test_axes_vary_one_at_a_time() -> None:
    """The base once per patch, then each axis value with everything else from the base; a value equal
    to the base's is the base (not run twice); optional values only when asked."""
    plan = planmod.Plan.model_validate({
        "plan": {"scenario": "tiny", "repeat": 3, "patches": ["baseline", "pr8132"]},
        "base": {"allocator": "glibc", "ranks": 1},
        "axes": [{"name": "allocator", "values": ["glibc", "jemalloc"]},
                 {"name": "ranks", "values": [2], "repeat": 2},
                 {"name": "deepspeed", "optional_values": ["0.17.0"]}]})
    cells = planmod.expand(plan)
    configs = [(c.axis, c.value, c.allocator, c.ranks, c.repeat, c.optional) for c in cells if c.patch == "baseline"]
    assert configs == [("base", "base", "glibc", 1, 3, False), ("allocator", "jemalloc", "jemalloc", 1, 3, False),
                       ("ranks", "2", "glibc", 2, 2, False), ("deepspeed", "0.17.0", "glibc", 1, 3, True)]
    assert len(cells) == 8
    cell = next(c for c in cells if c.value == "0.17.0")
    assert cell.deepspeed == "0.17.0" and cell.torch is None


def test_configs_are_whole_cells_of_their_own(tmp_path: Path) -> None:
    """[[configs]] (a validation campaign's held-out targets): each a cell with its own scenario, --set values,
    ranks and allocator after the base's cells, in the definition (so another config is another campaign) and
    only there (a plan without configs keeps the definition it had); a name used twice is one line, exit 2."""
    path = tmp_path / "plan.toml"
    path.write_text(GOOD + '\n[[configs]]\nname = "llama-2r"\nscenario = "llama-small"\nsets = ["steps=2"]\n'
                    'ranks = 2\nallocator = "glibc+MALLOC_MMAP_THRESHOLD_=65536"\nrepeat = 2\n')
    loaded = planmod.load(path)
    cell = loaded.cells[-1]
    assert (cell.axis, cell.value, cell.scenario, cell.sets, cell.ranks, cell.repeat, cell.malloc_env) == (
        "config", "llama-2r", "llama-small", ("steps=2",), 2, 2, {"MALLOC_MMAP_THRESHOLD_": "65536"})
    assert cell.id == "config-llama-2r-baseline" and [c.axis for c in loaded.cells[:2]] == ["base", "allocator"]
    assert loaded.definition()["configs"][0]["sets"] == ["steps=2"]
    (tmp_path / "old.toml").write_text(GOOD)
    assert "configs" not in planmod.load(tmp_path / "old.toml").definition()
    path.write_text(GOOD + '\n[[configs]]\nname = "a"\n\n[[configs]]\nname = "a"\n')
    proc = rssprobe("matrix", "--plan", str(path), "--dry-run")
    assert proc.returncode == 2 and "a config name is used twice" in proc.stderr, proc.stderr


def test_optional_values_are_picked_one_by_one(tmp_path: Path) -> None:
    """--optional alone selects every optional value; --optional AXIS=VALUE only that one; an unknown one is
    one line naming what the plan offers (exit 2), before anything runs."""
    text = GOOD.replace('values = ["glibc+MALLOC_ARENA_MAX=2"]', 'values = ["glibc+MALLOC_ARENA_MAX=2"]\n'
                        'optional_values = ["jemalloc", "tcmalloc"]')
    path = tmp_path / "plan.toml"
    path.write_text(text)
    loaded = planmod.load(path)
    values = lambda cells: sorted(c.value for c in cells)  # noqa: E731
    assert values(loaded.selected()) == ["base", "glibc+MALLOC_ARENA_MAX=2"]
    assert values(loaded.selected(frozenset({"all"}))) == ["base", "glibc+MALLOC_ARENA_MAX=2", "jemalloc", "tcmalloc"]
    assert values(loaded.selected(frozenset({"allocator=tcmalloc"}))) == ["base", "glibc+MALLOC_ARENA_MAX=2",
                                                                           "tcmalloc"]
    proc = rssprobe("matrix", "--plan", str(path), "--optional", "allocator=mimalloc", "--dry-run")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "allocator=mimalloc" in proc.stderr and "allocator=jemalloc, allocator=tcmalloc" in proc.stderr


def test_allocator_values_parse() -> None:
    assert planmod.parse_allocator("glibc+MALLOC_ARENA_MAX=2+MALLOC_MMAP_THRESHOLD_=65536") == (
        "glibc", {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "65536"})
    with pytest.raises(ValueError, match="glibc knobs apply to glibc only"):
        planmod.parse_allocator("jemalloc+MALLOC_ARENA_MAX=2")


# ---- ccache behind the op builds ---------------------------------------------------------------------

def test_no_ccache_sets_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ccache on PATH (or disabled) the worker's environment is torch's default build."""
    monkeypatch.setenv("RSSPROBE_ENVS", str(tmp_path / "envs"))
    env_python = str(tmp_path / "envs" / "torch2.13.0-ds0.17.0" / "bin" / "python")
    monkeypatch.setenv("PATH", str(tmp_path))  # no ccache here
    monkeypatch.delenv("CXX", raising=False)
    assert compilecache.worker_env(env_python) == {}
    if shutil.which("ccache", path=os.defpath + ":/usr/local/bin"):
        monkeypatch.setenv("PATH", os.defpath + ":/usr/local/bin")
        monkeypatch.setenv(compilecache.DISABLE, "0")
        assert compilecache.worker_env(env_python) == {}


@pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache is not installed (apt-get install ccache)")
def test_ccache_reuses_objects_across_environments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two environments' copies of the same op source, compiled as torch's builder does (absolute paths,
    -g, ninja's working directory the env's own build dir): the second compile is a ccache hit. Only for
    rssprobe's environments: another interpreter gets no variable (a changed compiler line would make
    ninja rebuild ops already built there)."""
    monkeypatch.setenv("RSSPROBE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RSSPROBE_ENVS", str(tmp_path / "envs"))
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv(compilecache.DISABLE, raising=False)
    assert compilecache.worker_env("/usr/bin/python3") == {}
    stats = []
    for name in ("torch2.13.0-ds0.16.9", "torch2.13.0-ds0.17.0"):
        python = tmp_path / "envs" / name / "bin" / "python"
        src = tmp_path / "envs" / name / "lib" / "site-packages" / "deepspeed" / "csrc"
        src.mkdir(parents=True)
        (src / "op.h").write_text("inline int twice(int x) { return 2 * x; }\n")
        (src / "op.cpp").write_text('#include "op.h"\nint f(int x) { return twice(x) + 1; }\n')
        build = host.ops_cache_dir(str(python), "2.13.0", "0.17.0") / "op"
        assert build.is_relative_to(tmp_path / "envs" / name / layout.ENV_OPS)
        build.mkdir(parents=True)
        env = compilecache.worker_env(str(python))
        assert Path(env["CXX"]).name == "c++" and os.path.realpath(env["CXX"]) == os.path.realpath(
            shutil.which("ccache") or "")
        assert env["CCACHE_DIR"].startswith(str(tmp_path / "cache")) and env["TORCH_NO_COMPILER_WRAPPER"] == "1"
        full = {**os.environ, **env}
        subprocess.run([env["CXX"], "-O2", "-g", f"-I{src}", "-c", str(src / "op.cpp"), "-o", "op.o"], cwd=build,
                       env=full, check=True)
        out = subprocess.run(["ccache", "--print-stats"], env=full, capture_output=True, text=True, check=True).stdout
        counts = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
        stats.append((int(counts.get("direct_cache_hit", 0)) + int(counts.get("preprocessed_cache_hit", 0)),
                      int(counts.get("cache_miss", 0))))
    assert stats == [(0, 1), (1, 1)], stats


# ---- one real plan, resumed, and its report -----------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_plan(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("plan")
    path = root / "plan.toml"
    path.write_text(GOOD)
    runs = root / "runs"
    proc = rssprobe("matrix", "--plan", str(path), "--out", str(runs), "--format", "json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return path, runs


@pytest.mark.worker
def test_plan_runs_every_cell_and_resumes(tiny_plan: tuple[Path, Path]) -> None:
    path, runs = tiny_plan
    cells = sorted(p.name for p in runs.iterdir() if p.is_dir())
    assert cells == ["allocator-glibc+MALLOC_ARENA_MAX_2-baseline", "base-base-baseline"]
    before = {p: p.stat().st_mtime_ns for p in runs.rglob("manifest.json")}
    proc = rssprobe("matrix", "--plan", str(path), "--out", str(runs), "--format", "json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {p: p.stat().st_mtime_ns for p in runs.rglob("manifest.json")} == before  # nothing ran again
    manifest = (runs / cells[0] / "run-01" / "manifest.json").read_text()
    assert '"MALLOC_ARENA_MAX": "2"' in manifest


@pytest.mark.worker
def test_report_judges_each_claim(tiny_plan: tuple[Path, Path], tmp_path: Path) -> None:
    path, runs = tiny_plan
    out = tmp_path / "verdict.md"
    proc = rssprobe("verdict", str(path), "--runs", str(runs), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    section = text.split("### fp32 master")[1].split("###")[0]
    assert section.count("| 4.00") == 2 and section.count("| reproduced |") == 2, section
    unscale = text.split("### unscale +4")[1].split("###")[0]
    assert unscale.count("| not reproduced |") == 2, unscale
    assert "Cannot be measured on the CPU accelerator: no pinning" in text
    assert (tmp_path / "verdict" / "claims.png").stat().st_size > 0
