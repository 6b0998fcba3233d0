"""DeepSpeed's CPU ops built once are loaded by another environment of the same build key, never compiled again;
any difference in what the build depends on builds instead (worker/opreuse.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rssprobe.contract.environment import SHARED_OPS_ENV
from rssprobe.run import environment, host
from rssprobe.worker import opreuse

# what worker/opreuse.key_parts returns, in shape (values as this machine gave them for cpu_adam)
PARTS = {
    "op": "cpu_adam", "sources": "35" * 32, "includes": "b4" * 32,
    "cxx_args": ["-O3", "-g", "-Wno-reorder", "-march=native", "-fopenmp", "-D__AVX512__", "-UC10_USE_GLOG"],
    "ldflags": [], "compiler": "c++ (Debian 12.2.0-14+deb12u1) 12.2.0", "cpu": "71" * 20, "libc": "glibc-2.36",
    "python": "cpython-311",
    "torch": ["2.13.0+cpu", "cf30153c4c131c8164ee7798e5022d810682e2cb", "True"], "deepspeed": "0.19.8",
}
CHANGED = {  # one differing value per part: each must build, not reuse
    "op": "deepspeed_shm_comm", "sources": "36" * 32, "includes": "b5" * 32,
    "cxx_args": [*PARTS["cxx_args"][:-2], "-D__AVX256__", "-UC10_USE_GLOG"], "ldflags": ["-lcurand"],
    "compiler": "c++ (Debian 13.1.0-1) 13.1.0", "cpu": "72" * 20, "libc": "glibc-2.41", "python": "cpython-312",
    "torch": ["2.13.0+cpu", "cf30153c4c131c8164ee7798e5022d810682e2cb", "False"], "deepspeed": "0.19.9",
}


def _kept(root: Path, parts: dict) -> Path:
    built = root.parent / "built" / f"{parts['op']}.so"
    built.parent.mkdir(parents=True, exist_ok=True)
    built.write_bytes(b"\x7fELF a library built with these parts")
    kept = opreuse.keep(root, parts, built)
    assert kept is not None and kept.read_bytes() == built.read_bytes()
    return kept


def test_the_same_key_reuses_and_any_differing_part_builds(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    kept = _kept(root, PARTS)
    assert opreuse.find(root, dict(PARTS)) == kept
    assert set(CHANGED) == set(PARTS)  # every part of the key is exercised
    for part, value in CHANGED.items():
        assert opreuse.find(root, {**PARTS, part: value}) is None, part
    assert opreuse.find(root, {k: v for k, v in PARTS.items() if k != "compiler"}) is None  # a part missing


def test_a_key_is_trusted_only_with_its_parts_and_library(tmp_path: Path) -> None:
    """A directory of the right name whose stored parts differ (or whose library is gone) is not reused."""
    root = tmp_path / "shared"
    kept = _kept(root, PARTS)
    (kept.parent / opreuse.PARTS).write_text(json.dumps({**PARTS, "deepspeed": "0.19.9"}))
    assert opreuse.find(root, PARTS) is None
    (kept.parent / opreuse.PARTS).write_text("{not json")
    assert opreuse.find(root, PARTS) is None
    (kept.parent / opreuse.PARTS).write_text(json.dumps(PARTS))
    assert opreuse.find(root, PARTS) == kept
    kept.unlink()
    assert opreuse.find(root, PARTS) is None


def test_the_sources_digest_follows_contents_not_paths(tmp_path: Path) -> None:
    """Two installations of the same sources (other paths) give one digest; one changed byte or header another."""
    for env in ("a", "b"):
        (tmp_path / env / "includes").mkdir(parents=True)
        (tmp_path / env / "adam.cpp").write_text("int step() { return 1; }\n")
        (tmp_path / env / "includes" / "adam.h").write_text("#define SIMD 8\n")

    def digest(env: str) -> tuple[str, str]:
        return (opreuse.files_digest([str(tmp_path / env / "adam.cpp")]),
                opreuse.files_digest([str(tmp_path / env / "includes"), str(tmp_path / env / "absent")]))

    assert digest("a") == digest("b")
    (tmp_path / "b" / "includes" / "adam.h").write_text("#define SIMD 16\n")
    assert digest("a")[0] == digest("b")[0] and digest("a")[1] != digest("b")[1]
    (tmp_path / "b" / "adam.cpp").write_text("int step() { return 2; }\n")
    assert digest("a")[0] != digest("b")[0]


def test_every_worker_is_given_the_shared_directory_unless_the_user_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SHARED_OPS_ENV, raising=False)
    env = environment.worker(sys.executable, 1, "glibc", {}, "2.13.0", "0.19.8")
    assert env[SHARED_OPS_ENV] == str(host.shared_ops_dir())
    monkeypatch.setenv(SHARED_OPS_ENV, "")  # the user's way to build each environment's own
    assert environment.worker(sys.executable, 1, "glibc", {}, "2.13.0", "0.19.8")[SHARED_OPS_ENV] == ""


LOAD_AND_STEP = """
import resource, sys, torch
from deepspeed.ops.op_builder import CPUAdamBuilder
from rssprobe.worker import opreuse
print("cpu_adam:", opreuse.load(CPUAdamBuilder(), lambda op: print("compiling", op)))
from deepspeed.ops.adam import DeepSpeedCPUAdam
p = torch.nn.Parameter(torch.ones(8))
p.grad = torch.ones(8)
DeepSpeedCPUAdam([p], lr=0.1).step()
print("stepped:", bool((p.detach() < 1).all()))
"""


def _load(python: str, ops: Path, shared: Path) -> str:
    env = {**environment.probe(python), "TORCH_EXTENSIONS_DIR": str(ops), SHARED_OPS_ENV: str(shared)}
    out = subprocess.run([python, "-c", LOAD_AND_STEP], env=env, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.mark.worker
def test_another_environment_path_loads_the_ops_without_compiling(tmp_path: Path) -> None:
    """This venv reached through another path (a symlink: another prefix, so another TORCH_EXTENSIONS_DIR, which
    compiled both ops again before) loads cpu_adam from the shared directory: its own build directory stays empty
    (torch's builder, ninja and the compiler never ran there), and the op steps. The machine's own shared directory,
    as a worker's: the first step builds cpu_adam only where no environment of this key has built it yet."""
    from importlib.metadata import version

    shared = host.shared_ops_dir()
    here = host.ops_cache_dir(sys.executable, version("torch"), version("deepspeed"))
    first = _load(sys.executable, here, shared)
    assert ("cpu_adam: loaded" in first or "cpu_adam: reused" in first) and "stepped: True" in first, first
    assert list(shared.glob("*/cpu_adam.so")), f"nothing kept in {shared}"
    other = tmp_path / "other-venv"
    other.symlink_to(Path(sys.executable).parent.parent, target_is_directory=True)
    ops = tmp_path / "other-ops"
    second = _load(str(other / "bin" / Path(sys.executable).name), ops, shared)
    assert "cpu_adam: reused" in second and "compiling" not in second and "stepped: True" in second, second
    assert not (ops / "cpu_adam").exists()


def test_doctor_counts_the_shared_ops_of_its_versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RSSPROBE_CACHE", str(tmp_path / "cache"))
    _kept(host.shared_ops_dir(), PARTS)
    assert host.shared_ops("2.13.0+cpu", "0.19.8") == ["cpu_adam"]
    assert host.shared_ops("2.13.0+cpu", "0.19.9") == [] and host.shared_ops("2.14.1", "0.19.8") == []
