"""Isolated environments for other torch / DeepSpeed versions: one venv per spec, built once.

An environment lives under envs_root()/<name> (default: the cache dir's envs/); its name is
derived from the spec (torch2.13.0-ds0.19.8), so the same spec always finds the same venv.
A marker file is written only after every install step succeeded: a directory without it
is a half-made env and is rebuilt. The worker needs only torch, DeepSpeed, ninja and psutil
there, since the launcher puts this checkout on its PYTHONPATH. Each env compiles
DeepSpeed's ops once into its own cache directory (host.ops_cache_dir keys by env).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from . import host, layout, storage
from .errors import UserError
from .layout import envs_root

MARKER = layout.ENV_MARKER
MAX_NAME = 40
EXTRA_PACKAGES = ("ninja", "psutil")  # the worker's JIT op build and its probes
TAIL_LINES = 6
Log = Callable[[str], None]




@dataclass(frozen=True)
class Source:
    """DeepSpeed from a local checkout: its working tree, or one git revision of it."""

    path: Path
    commit: str | None = None  # None: the working tree as it is

    def canonical(self) -> str:
        return f"deepspeed={self.path}" + (f"@{self.commit}" if self.commit else "")

    def short(self) -> str:
        if self.commit:
            return f"ds-{self.commit[:10]}"
        return f"dssrc-{hashlib.sha1(str(self.path).encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class EnvSpec:
    torch: str  # the pinned version
    deepspeed: str | Source  # a version or a local source
    extras: tuple[str, ...] = field(default_factory=tuple)  # further requirements, passed to pip as they are

    @classmethod
    def parse(cls, items: list[str] | tuple[str, ...]) -> EnvSpec:
        """'torch==V' 'deepspeed==V|deepspeed=PATH|deepspeed=PATH@REV' [other requirements]; also one string."""
        words = [w for item in items for w in item.split()]
        torch = deepspeed = None
        extras: list[str] = []
        for word in words:
            if word.startswith("deepspeed=") and not word.startswith("deepspeed=="):
                deepspeed = _source(word.split("=", 1)[1])
                continue
            try:
                req = Requirement(word)
            except InvalidRequirement as e:
                raise UserError(f"env spec {word}: not a requirement ({e})") from None
            name = req.name.lower()
            if name == "torch":
                torch = _pinned(req, word)
            elif name == "deepspeed":
                deepspeed = _pinned(req, word)
            else:
                extras.append(word)
        if torch is None:
            raise UserError(f"env spec {' '.join(words) or '(empty)'}: give torch==VERSION (always pinned: an "
                            "unpinned torch pulls a multi-GB CUDA build)")
        if deepspeed is None:
            raise UserError(f"env spec {' '.join(words)}: give deepspeed==VERSION, deepspeed=PATH or "
                            "deepspeed=PATH@REV")
        return cls(torch, deepspeed, tuple(sorted(extras)))

    def canonical(self) -> list[str]:
        ds = self.deepspeed.canonical() if isinstance(self.deepspeed, Source) else f"deepspeed=={self.deepspeed}"
        return [f"torch=={self.torch}", ds, *self.extras]

    @property
    def name(self) -> str:
        ds = self.deepspeed.short() if isinstance(self.deepspeed, Source) else f"ds{self.deepspeed}"
        name = layout.slug(f"torch{self.torch}-{ds}")
        if self.extras or len(name) > MAX_NAME:
            return "env-" + hashlib.sha1(" ".join(self.canonical()).encode()).hexdigest()[:12]
        return name


def _pinned(req: Requirement, word: str) -> str:
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator not in ("==", "===") or "*" in specs[0].version:
        hint = " (an unpinned torch pulls a multi-GB CUDA build)" if req.name.lower() == "torch" else ""
        raise UserError(f"env spec {word}: pin an exact version, e.g. {req.name}==2.13.0{hint}")
    return specs[0].version


def _source(value: str) -> Source:
    path_text, rev = value, None
    head, sep, tail = value.rpartition("@")
    if sep and head and "/" not in tail:
        path_text, rev = head, tail
    path = Path(path_text).expanduser().resolve()
    if not path.is_dir():
        raise UserError(f"env spec deepspeed={value}: {path} is not a directory")
    if rev is None:
        return Source(path)
    out = subprocess.run(["git", "-C", str(path), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise UserError(f"env spec deepspeed={value}: {rev} is not a revision of the git checkout {path}")
    return Source(path, out.stdout.strip())


@dataclass(frozen=True)
class Env:
    name: str
    path: Path

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")

    def info(self) -> dict[str, Any]:
        return json.loads((self.path / MARKER).read_text())

    @property
    def ready(self) -> bool:
        return (self.path / MARKER).is_file()


def find(name: str) -> Env | None:
    env = Env(name, envs_root() / name)
    return env if env.ready else None


def list_envs() -> list[Env]:
    root = envs_root()
    return sorted((Env(p.name, p) for p in root.iterdir() if (p / MARKER).is_file()), key=lambda e: e.name) \
        if root.is_dir() else []


def remove(ref: str) -> Env:
    """Remove an env by name or by spec."""
    env = find(ref) if _is_name(ref) else find(EnvSpec.parse([ref]).name)
    if env is None:
        raise UserError(f"{ref}: no such environment under {envs_root()} (see `rssprobe env list`)")
    shutil.rmtree(env.path)
    return env


def _is_name(ref: str) -> bool:
    """An env name (torch2.13.0-ds0.19.8, env-1a2b...) rather than a spec (has '==' or '=' or spaces)."""
    return re.fullmatch(r"[A-Za-z0-9._+-]+", ref) is not None


@contextmanager
def _lock(name: str) -> Iterator[None]:
    """One builder per env at a time (two matrix cells, or two terminals, asking for the same spec)."""
    root = envs_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def create(spec: EnvSpec, pip_options: tuple[str, ...] = (), log: Log = lambda s: None) -> Env:
    """The env for spec: reused if ready, otherwise built; a failed build leaves nothing behind."""
    env = Env(spec.name, envs_root() / spec.name)
    with _lock(env.name):
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
    pip = [uv, "pip", "install", "--python", env.python] if uv else [env.python, "-m", "pip", "install",
                                                                       "--no-input"]
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
    versions = {name: host.package_version(name, env.python) for name in ("torch", "deepspeed")}
    storage.write_json_atomic(env.path / MARKER, {
        "name": env.name, "spec": spec.canonical(), "python": env.python, "versions": versions,
        "pip_options": list(pip_options), "created": storage.now_iso(), "builder": "uv" if uv else "pip"})
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
        failed_log.write_text(f"$ {' '.join(cmd)}\n{output}")
        tail = " | ".join(line.strip() for line in output.strip().splitlines()[-TAIL_LINES:] if line.strip())
        raise UserError(f"{what}: {step} failed (exit {proc.returncode}): {tail} (whole output: {failed_log})")


def resolve_python(env: str | None, python: str | None, pip_options: tuple[str, ...] = (),
                   log: Log = lambda s: None) -> tuple[str, str | None]:
    """(python, env name) for --env SPEC|NAME or --python PATH; default: this interpreter, no env."""
    if env and python:
        raise UserError("--env and --python both choose the worker's Python; give one")
    if python:
        path = shutil.which(python) or python
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise UserError(f"--python {python}: not an executable file")
        return path, None
    if env:
        if _is_name(env):
            found = find(env)
            if found is None:
                raise UserError(f"--env {env}: no environment of that name under {envs_root()}; give a spec "
                                "such as 'torch==2.13.0 deepspeed==0.19.8' (see `rssprobe env list`)")
        else:
            found = create(EnvSpec.parse([env]), pip_options, log)
        return found.python, found.name
    return sys.executable, None


def for_versions(torch: str | None, deepspeed: str | None, pip_options: tuple[str, ...] = (),
                 log: Log = lambda s: None) -> tuple[str, str | None]:
    """(python, env name) for a (torch, deepspeed) pair; a missing one is this interpreter's version."""
    if torch is None and deepspeed is None:
        return sys.executable, None
    torch = torch or host.package_version("torch")
    ds = deepspeed or host.package_version("deepspeed")
    items = [f"torch=={torch}", f"deepspeed={ds}" if ds and "/" in ds else f"deepspeed=={ds}"]  # a path: source
    found = create(EnvSpec.parse(items), pip_options, log)
    return found.python, found.name


def pip_options(find_links: tuple[str, ...], index_url: str | None) -> tuple[str, ...]:
    out: list[str] = []
    for d in find_links:
        out += ["--find-links", d]
    if index_url:
        out += ["--index-url", index_url]
    return tuple(out)
