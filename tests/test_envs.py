"""Environments and the run matrix: spec parsing and env bookkeeping without installs, one real
environment for the installed versions (slow), and a real two-cell matrix that resumes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pytest

from rssprobe.errors import UserError
from rssprobe.run import envs

from .conftest import rssprobe

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid"}
WHEELS = Path("/opt/wheels")  # where this machine keeps the torch CPU wheel (pip also finds it via its config)


@pytest.fixture
def envs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RSSPROBE_ENVS", str(tmp_path / "envs"))
    return tmp_path / "envs"


# ---- specs -------------------------------------------------------------------------------------

def test_a_spec_names_its_env_and_keeps_a_canonical_form() -> None:
    spec = envs.EnvSpec.parse(["torch==2.13.0", "deepspeed==0.19.8"])
    assert spec.name == "torch2.13.0-ds0.19.8"
    assert spec.canonical() == ["torch==2.13.0", "deepspeed==0.19.8"]
    assert envs.EnvSpec.parse(["deepspeed==0.19.8   torch==2.13.0"]) == spec  # one string, any order
    hashed = envs.EnvSpec.parse(["torch==2.13.0", "deepspeed==0.19.8", "numpy==1.26.4"]).name
    assert hashed.startswith("env-") and len(hashed) == 16


def test_an_unpinned_torch_is_refused() -> None:
    for items in (["torch", "deepspeed==0.19.8"], ["torch>=2.1", "deepspeed==0.19.8"], ["torch==2.*"]):
        with pytest.raises(UserError, match="CUDA build"):
            envs.EnvSpec.parse(items)
    with pytest.raises(UserError, match="torch==VERSION"):
        envs.EnvSpec.parse(["deepspeed==0.19.8"])
    with pytest.raises(UserError, match="deepspeed"):
        envs.EnvSpec.parse(["torch==2.13.0"])


def test_a_local_checkout_and_one_of_its_revisions(tmp_path: Path) -> None:
    repo = tmp_path / "DeepSpeed"
    repo.mkdir()
    git = ["git", "-C", str(repo)]
    env = {**os.environ, **GIT_ENV}
    subprocess.run([*git, "init", "-q"], check=True, env=env)
    (repo / "version.txt").write_text("0.19.9\n")
    subprocess.run([*git, "add", "-A"], check=True, env=env)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True, env=env)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()

    tree = envs.EnvSpec.parse(["torch==2.13.0", f"deepspeed={repo}"])
    assert tree.name.startswith("torch2.13.0-dssrc-") and tree.canonical()[1] == f"deepspeed={repo}"
    rev = envs.EnvSpec.parse(["torch==2.13.0", f"deepspeed={repo}@HEAD"])
    assert rev.name == f"torch2.13.0-ds-{sha[:10]}" and rev.canonical()[1] == f"deepspeed={repo}@{sha}"
    with pytest.raises(UserError, match="not a revision"):
        envs.EnvSpec.parse(["torch==2.13.0", f"deepspeed={repo}@nope"])
    with pytest.raises(UserError, match="not a directory"):
        envs.EnvSpec.parse(["torch==2.13.0", f"deepspeed={tmp_path}/missing"])


# ---- bookkeeping, with the install replaced ---------------------------------------------------

def test_an_env_is_reused_half_made_ones_rebuilt_and_failures_leave_nothing(envs_dir: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    builds = []

    def build(spec: envs.EnvSpec, env: envs.Env, pip: tuple[str, ...], log) -> None:
        builds.append(env.name)
        (env.path / "bin").mkdir(parents=True)
        (env.path / "bin" / "python").symlink_to(sys.executable)  # a made environment has its python
        if "fail" in pip:
            raise UserError("pip said no")
        (env.path / envs.MARKER).write_text(json.dumps({"name": env.name, "spec": spec.canonical(),
                                                         "versions": {}, "created": "now"}))

    monkeypatch.setattr(envs.build, "_build", build)
    spec = envs.EnvSpec.parse(["torch==2.13.0", "deepspeed==0.19.8"])
    env = envs.create(spec)
    assert envs.create(spec) == env and builds == [spec.name]  # the second call reuses it
    (env.path / envs.MARKER).unlink()  # as if the first build had been killed half-way
    envs.create(spec)
    assert builds == [spec.name, spec.name]
    assert envs.resolve_python(spec.name, None) == (env.python, spec.name)
    assert envs.resolve_python("torch==2.13.0 deepspeed==0.19.8", None) == (env.python, spec.name)

    other = envs.EnvSpec.parse(["torch==2.12.0", "deepspeed==0.19.8"])
    with pytest.raises(UserError, match="pip said no"):
        envs.create(other, ("fail",))
    assert not (envs_dir / other.name).exists()
    assert [e.name for e in envs.list_envs()] == [spec.name]
    envs.remove(spec.name)
    assert envs.list_envs() == []


def test_choosing_the_worker_python(envs_dir: Path) -> None:
    assert envs.resolve_python(None, None) == (sys.executable, None)
    assert envs.resolve_python(None, sys.executable) == (sys.executable, None)
    with pytest.raises(UserError, match="give one"):
        envs.resolve_python("torch2.13.0-ds0.19.8", sys.executable)
    with pytest.raises(UserError, match="not an executable"):
        envs.resolve_python(None, "/nonexistent/python")
    with pytest.raises(UserError, match="no environment of that name"):
        envs.resolve_python("torch9-ds9", None)


@pytest.mark.integration
def test_a_failed_install_names_the_spec_and_pips_last_lines(tmp_path: Path) -> None:
    """A real venv and pip, offline: no torch 0.0.1 anywhere, so pip fails within seconds."""
    empty = tmp_path / "empty-index"
    empty.mkdir()
    proc = rssprobe("env", "create", "torch==0.0.1", "deepspeed==0.19.8", "--index-url", empty.as_uri(),
                    env={"RSSPROBE_ENVS": str(tmp_path / "envs")})
    assert proc.returncode == 2, proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("rssprobe: error: torch==0.0.1 deepspeed==0.19.8: installing torch failed")
    assert "torch==0.0.1" in error.split("failed", 1)[1]  # pip's own words about it
    left = sorted(p.name for p in (tmp_path / "envs").iterdir())
    assert left == [".torch0.0.1-ds0.19.8.failed.log", ".torch0.0.1-ds0.19.8.lock"]  # no half-made env
    log = (tmp_path / "envs" / left[0]).read_text()
    assert "pip install" in log and "ERROR" in log and f"(whole output: {tmp_path / 'envs' / left[0]})" in error


# ---- one real environment (slow) --------------------------------------------------------------

@pytest.mark.slow  # make test-slow: a real environment or campaign, minutes
@pytest.mark.worker
def test_a_real_env_for_the_installed_versions_runs_tiny(tmp_path: Path) -> None:
    """SLOW, about 2-4 minutes: builds a real venv with the installed torch (the wheel in /opt/wheels, offline)
    and the same DeepSpeed release, then trains `tiny` for 2 steps in it.

    It uses its own cache dir: DeepSpeed's op build files name the deepspeed install path, so a
    second env of the same versions would rebuild the shared compiled ops (and the main venv's
    next run would rebuild them back). Here the CPU Adam op is built once, in tmp_path, through the
    user's ccache where ccache is installed (compilecache.py: its objects are keyed by sources and flags
    relative to the envs root, so a throw-away root reuses them: a real build, compiled once per machine).
    """
    from rssprobe.store import layout

    torch_v, ds_v = version("torch"), version("deepspeed")
    spec = f"torch=={torch_v} deepspeed=={ds_v}"
    env = {"RSSPROBE_CACHE": str(tmp_path / "cache"), "RSSPROBE_RUNS": str(tmp_path / "runs"),
           "RSSPROBE_CCACHE_DIR": str(layout.ccache_dir())}
    links = ["--find-links", str(WHEELS)] if WHEELS.is_dir() else []
    t0 = time.monotonic()
    created = rssprobe("env", "create", f"torch=={torch_v}", f"deepspeed=={ds_v}", *links, env=env, check=True)
    name = created.stdout.strip()
    assert name == f"torch{torch_v}-ds{ds_v}"
    home = tmp_path / "cache" / "envs" / name
    print(f"env created in {time.monotonic() - t0:.0f} s")

    marker = home / ".rssprobe-env.json"
    built = marker.stat().st_mtime_ns
    again = rssprobe("env", "create", spec, env=env, check=True)
    assert again.stdout.strip() == name and marker.stat().st_mtime_ns == built  # reused, not rebuilt

    t0 = time.monotonic()
    out = tmp_path / "run"
    rssprobe("run", "tiny", "--steps", "2", "--env", spec, "--out", str(out), env=env, check=True)
    print(f"tiny run in the env (ops compiled once) in {time.monotonic() - t0:.0f} s")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "ok"
    assert Path(manifest["python"]).parent.parent == home
    assert manifest["versions"]["torch"] == torch_v and manifest["versions"]["deepspeed"] == ds_v
    assert manifest["command"][-2:] == ["--env", name]
    listed = json.loads(rssprobe("env", "list", "--format", "json", env=env, check=True).stdout)
    assert [e["name"] for e in listed] == [name] and listed[0]["spec"] == [f"torch=={torch_v}", f"deepspeed=={ds_v}"]


# ---- the matrix -------------------------------------------------------------------------------

def test_matrix_dry_run_lists_the_product(tmp_path: Path) -> None:
    out = tmp_path / "m"
    proc = rssprobe("matrix", "tiny", "--torch", "2.13.0,2.14.1", "--deepspeed", "0.19.8", "--patch",
                    "baseline,pr8132", "--allocator", "glibc", "--allocator", "jemalloc", "--repeat", "3",
                    "--out", str(out), "--dry-run", "--format", "json", check=True)
    cells = json.loads(proc.stdout)["cells"]
    assert len(cells) == 2 * 1 * 2 * 2
    assert {(c["torch"], c["patch"], c["allocator"]) for c in cells} == \
        {(t, p, a) for t in ("2.13.0", "2.14.1") for p in ("baseline", "pr8132") for a in ("glibc", "jemalloc")}
    assert cells[0]["id"] == "torch2.13.0-ds0.19.8-baseline-glibc" and not cells[0]["finished"]
    assert not out.exists()  # a dry run writes nothing
    bad = rssprobe("matrix", "tiny", "--python", sys.executable, "--torch", "2.13.0", "--dry-run")
    assert bad.returncode == 2 and "--python" in bad.stderr


@pytest.mark.slow  # make test-slow: a real environment or campaign, minutes
@pytest.mark.worker
def test_a_real_two_cell_matrix_finishes_and_resumes(tmp_path: Path) -> None:
    """Two real tiny runs (baseline and pr8132, 2 steps each); the rerun runs nothing."""
    out = tmp_path / "m"
    args = ["matrix", "tiny", "--steps", "2", "--repeat", "1", "--patch", "baseline,pr8132", "--python",
            sys.executable, "--out", str(out), "--format", "json"]
    t0 = time.monotonic()
    first = rssprobe(*args, check=True)
    print(f"2-cell matrix in {time.monotonic() - t0:.0f} s")
    data = json.loads(first.stdout)
    assert [c["status"] for c in data["cells"]] == ["done", "done"]
    base, patched = data["cells"]
    for cell in (base, patched):
        assert set(cell["figures"]) >= {"init.rss", "first_step.rss", "steady.rss", "peak", "budget.live",
                                        "budget.rss_after_trim_above_baseline"}
    assert set(patched["effects"]) == {"steady.rss", "budget.rss_after_trim_above_baseline"} and not base["effects"]
    effect = patched["effects"]["steady.rss"]
    assert effect["delta"] == pytest.approx(patched["figures"]["steady.rss"] - base["figures"]["steady.rss"])
    manifest = json.loads(next((out / patched["id"]).glob("run-*/manifest.json")).read_text())
    assert manifest["patches"] == ["pr8132.float-scale", "pr8132.malloc-trim"]
    assert manifest["command"][:3] == ["rssprobe", "run", "tiny"] and manifest["scenario"]["probes"]["trim_at_end"]
    index = json.loads((out / "matrix.json").read_text())
    assert [c["status"] for c in index["cells"]] == ["done", "done"]

    started = {p: json.loads(p.read_text())["started"] for p in out.glob("*/run-*/manifest.json")}
    second = rssprobe(*args, check=True)
    assert "2 finished cells skipped" in second.stderr
    assert {p: json.loads(p.read_text())["started"] for p in out.glob("*/run-*/manifest.json")} == started
    assert json.loads(second.stdout)["cells"][1]["figures"] == patched["figures"]


@pytest.mark.integration
def test_a_cell_whose_env_cannot_be_built_fails_and_the_matrix_goes_on(tmp_path: Path) -> None:
    """Two cells whose envs cannot be built (no such torch, offline): both are tried, both reported failed."""
    empty = tmp_path / "empty-index"
    empty.mkdir()
    out = tmp_path / "m"
    proc = rssprobe("matrix", "tiny", "--torch", "0.0.1,0.0.2", "--deepspeed", "0.19.8", "--repeat", "1",
                    "--index-url", empty.as_uri(), "--out", str(out), "--format", "json",
                    env={"RSSPROBE_ENVS": str(tmp_path / "envs")})
    assert proc.returncode == 1, proc.stderr
    cells = json.loads(proc.stdout)["cells"]
    assert [c["status"] for c in cells] == ["failed", "failed"]
    assert all("installing torch failed" in c["error"] for c in cells)
    assert not any((out / c["id"]).exists() for c in cells)
