"""The environments on disk: finding, listing and removing them, and one builder per env at a time."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import UserError
from ...store import layout, outputs, reader
from ...store.layout import envs_root
from .spec import EnvSpec

MARKER = layout.ENV_MARKER


@dataclass(frozen=True)
class Env:
    name: str
    path: Path

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")

    def info(self) -> dict[str, Any]:
        """The marker rssprobe wrote when it built the environment, checked (one line naming what is wrong)."""
        path = self.path / MARKER
        data = reader.read_json_object(path, "environment marker")
        for key, kind, words in (("name", str, "a string"), ("spec", list, "a list"), ("versions", dict, "an object"),
                                 ("created", str, "a string")):
            if not isinstance(data.get(key), kind):
                raise UserError(f"{path}: corrupt environment marker ({key} is missing or not {words}; "
                                f"rssprobe env rm {self.name})")
        if not all(isinstance(s, str) for s in data["spec"]):
            raise UserError(f"{path}: corrupt environment marker (spec is not a list of requirements)")
        return data

    def check_python(self) -> str:
        """The environment's python; UserError when it is gone (the environment was damaged after it was made)."""
        if not (os.path.isfile(self.python) and os.access(self.python, os.X_OK)):
            raise UserError(f"environment {self.name}: its python {self.python} is gone; remove it "
                            f"(rssprobe env rm {self.name}) and build it again")
        return self.python

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
    env = find(ref) if is_name(ref) else find(EnvSpec.parse([ref]).name)
    if env is None:
        raise UserError(f"{ref}: no such environment under {envs_root()} (see `rssprobe env list`)")
    shutil.rmtree(env.path)
    return env


def is_name(ref: str) -> bool:
    """An env name (torch2.13.0-ds0.19.8, env-1a2b...) rather than a spec (has '==' or '=' or spaces)."""
    return re.fullmatch(r"[A-Za-z0-9._+-]+", ref) is not None


@contextmanager
def lock(name: str) -> Iterator[None]:
    """One builder per env at a time (two matrix cells, or two terminals, asking for the same spec)."""
    root = envs_root()
    root.mkdir(parents=True, exist_ok=True)
    fd = outputs.lock(root / f".{name}.lock")  # a FIFO there would hang, a link be truncated: refused
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
