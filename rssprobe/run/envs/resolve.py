"""Which worker Python the command-line flags mean: --env SPEC|NAME, --python PATH, a version pair."""

from __future__ import annotations

import os
import shutil
import sys

from ...errors import UserError
from ...store.layout import envs_root
from .. import host
from .build import Log, create
from .spec import EnvSpec, check_pinned_libraries
from .store import find, is_name


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
        if is_name(env):
            found = find(env)
            if found is None:
                raise UserError(f"--env {env}: no environment of that name under {envs_root()}; give a spec "
                                "such as 'torch==2.13.0 deepspeed==0.19.8' (see `rssprobe env list`)")
        else:
            spec = EnvSpec.parse([env])
            check_pinned_libraries([env])  # typed by a person: a library range is refused, as in env create
            found = create(spec, pip_options, log)
        found.info()  # a damaged marker is one line, here
        return found.check_python(), found.name
    return sys.executable, None


def for_versions(torch: str | None, deepspeed: str | None, pip_options: tuple[str, ...] = (),
                 log: Log = lambda s: None, extras: tuple[str, ...] = ()) -> tuple[str, str | None]:
    """(python, env name) for a (torch, deepspeed) pair and further requirements (transformers==V, ...); a missing
    torch or DeepSpeed is this interpreter's version."""
    if torch is None and deepspeed is None and not extras:
        return sys.executable, None
    torch = torch or host.package_version("torch")
    ds = deepspeed or host.package_version("deepspeed")
    items = [f"torch=={torch}", f"deepspeed={ds}" if ds and "/" in ds else f"deepspeed=={ds}", *extras]
    found = create(EnvSpec.parse(items), pip_options, log)
    return found.check_python(), found.name
