"""Making an environment: a venv, torch, DeepSpeed (a release or a source tree), the worker's tools."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

from ...errors import UserError
from ...store import outputs
from ...store.layout import envs_root
from ...store.writer import now_iso, write_json_atomic
from .. import host
from .spec import EnvSpec, Source
from .store import MARKER, Env, lock

EXTRA_PACKAGES = ("ninja", "psutil")  # the worker's JIT op build and its probes
TAIL_LINES = 6
Log = Callable[[str], None]


def create(spec: EnvSpec, pip_options: tuple[str, ...] = (), log: Log = lambda s: None) -> Env:
    """The env for spec: reused if ready, otherwise built; a failed build leaves nothing behind."""
    env = Env(spec.name, envs_root() / spec.name)
    with lock(env.name):
        if env.ready and not os.access(env.python, os.X_OK):
            log(f"{env.name}: its python {env.python} is gone; building it again")
            shutil.rmtree(env.path)
        if env.ready:
            made_for = env.info().get("spec")
            if made_for != spec.canonical():
                raise UserError(f"{env.path}: environment was made for {' '.join(made_for or [])}, not "
                                f"{' '.join(spec.canonical())}; remove it (rssprobe env rm {env.name})")
            return env
        if env.path.exists():
            log(f"{env.name}: removing a half-made environment")
            shutil.rmtree(env.path)
        try:
            _build(spec, env, pip_options, log)
        except BaseException:
            shutil.rmtree(env.path, ignore_errors=True)
            raise
    return env


def _build(spec: EnvSpec, env: Env, pip_options: tuple[str, ...], log: Log) -> None:
    what = " ".join(spec.canonical())
    uv = shutil.which("uv")
    log(f"{env.name}: creating a virtualenv with {'uv' if uv else 'python -m venv'}")
    base = _base_python()
    failed_log = envs_root() / f".{env.name}.failed.log"
    failed_log.unlink(missing_ok=True)
    _call([uv, "venv", "--python", base, str(env.path)] if uv else [base, "-m", "venv", str(env.path)], what,
          "creating the virtualenv", failed_log)
    # bytecode compiled at install, as pip does by default: a worker whose Python may not write it
    # (PYTHONDONTWRITEBYTECODE) would otherwise compile DeepSpeed from source in every run (~3 s on 2 cores)
    pip = [uv, "pip", "install", "--compile-bytecode", "--python", env.python] if uv else [
        env.python, "-m", "pip", "install", "--no-input"]
    steps: list[tuple[str, list[str]]] = [("torch", [f"torch=={spec.torch}"])]
    if isinstance(spec.deepspeed, Source):
        steps.append(("deepspeed", [str(_source_tree(spec.deepspeed, env, what))]))
    else:
        steps.append(("deepspeed", [f"deepspeed=={spec.deepspeed}"]))
    steps.append(("tools", [*EXTRA_PACKAGES, *spec.extras]))
    extra_env = {"DS_BUILD_OPS": "0"}  # ops are JIT-compiled by the worker, into the per-version cache
    if isinstance(spec.deepspeed, Source) and spec.deepspeed.commit:
        extra_env["DS_BUILD_STRING"] = f"+{spec.deepspeed.commit[:7]}"  # no .git in an export: name the revision
    for label, packages in steps:
        log(f"{env.name}: installing {' '.join(packages)}")
        _call([*pip, *pip_options, *packages], what, f"installing {label}", failed_log, extra_env)
    versions = {name: host.package_version(name, env.python) for name in ("torch", "deepspeed", "transformers",
                                                                            "accelerate")}
    write_json_atomic(env.path / MARKER, {
        "name": env.name, "spec": spec.canonical(), "python": env.python, "versions": versions,
        "pip_options": list(pip_options), "created": now_iso(), "builder": "uv" if uv else "pip"})
    log(f"{env.name}: ready (torch {versions['torch']}, deepspeed {versions['deepspeed']})")


def _base_python() -> str:
    """The interpreter to base envs on: this one's base, so the ops cache's Python version matches."""
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    return str(base) if base.exists() else sys.executable


def _source_tree(source: Source, env: Env, what: str) -> Path:
    """The tree to pip install: the checkout itself, or one revision exported into the env's src/."""
    if source.commit is None:
        return source.path
    dest = env.path / "src" / "DeepSpeed"
    dest.mkdir(parents=True)
    out = subprocess.run(["git", "-C", str(source.path), "archive", "--format=tar", source.commit],
                         capture_output=True)
    if out.returncode != 0:
        raise UserError(f"{what}: git archive {source.commit} failed: {out.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def _call(cmd: list[str], what: str, step: str, failed_log: Path, extra_env: dict[str, str] | None = None) -> None:
    """Run one install step; on failure keep its whole output in failed_log (the env itself is removed)."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(extra_env or {})},
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        output = proc.stdout + proc.stderr
        outputs.replace(failed_log, f"$ {' '.join(cmd)}\n{output}")
        tail = " | ".join(line.strip() for line in output.strip().splitlines()[-TAIL_LINES:] if line.strip())
        raise UserError(f"{what}: {step} failed (exit {proc.returncode}): {tail} (whole output: {failed_log})")
