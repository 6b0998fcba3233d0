"""The checkpoints that scenarios with model.load = "checkpoint" load: written once per shape (the model's resolved
config, seed, dtype on disk, format, shard count, transformers' version) under the cache root's checkpoints/
(RSSPROBE_CHECKPOINTS moves it), in a
process of the worker's Python of its own (rssprobe/worker/checkpoint.py), and reused by every later run."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..config import hfconfig
from ..config.scenario import Scenario
from ..errors import UserError
from ..log import say
from ..store import layout, outputs
from . import checkpointfiles, environment, host

WRITE_TIMEOUT_S = 3600


def spec(scenario: Scenario) -> dict[str, Any]:
    fp = scenario.model.from_pretrained
    assert fp is not None
    return {"hf": hfconfig.worker_hf(scenario.model), "seed": scenario.seed, "dtype_on_disk": fp.dtype_on_disk,
            "format": fp.format, "shards": fp.shards}


def directory(scenario: Scenario, python: str) -> Path:
    """Where the checkpoint of this scenario's model lives (keyed by everything that makes its files)."""
    other = None if python == sys.executable else python
    key = {**spec(scenario), "transformers": host.package_version("transformers", other)}
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return layout.checkpoints_root() / f"{layout.slug(scenario.model.hf['model_type'])}-{digest}"


def _damage(out: Path, scenario: Scenario) -> str | None:
    """Why the checkpoint at `out` cannot be loaded as it is (run/checkpointfiles.py); None: it is whole."""
    fp = scenario.model.from_pretrained
    assert fp is not None
    return checkpointfiles.damage(out, fp.format)


def _whole(out: Path, scenario: Scenario) -> bool:
    """The cached checkpoint is there and whole (run/checkpointfiles.py); a damaged one is removed, said, so that
    it is written again; one that cannot be removed is refused with the command that clears it."""
    if not os.path.lexists(out):
        return False
    why = _damage(out, scenario)
    if why is None:
        return True
    say(f"the cached checkpoint {out} is damaged ({why}): writing it again")
    try:
        if out.is_dir() and not out.is_symlink():
            shutil.rmtree(out)
        else:
            out.unlink()
    except OSError as e:
        raise UserError(f"{out}: the cached checkpoint is damaged ({why}) and cannot be removed "
                        f"({e.strerror or e}); clear it with: rm -rf {shlex.quote(str(out))}") from None
    return False


def ensure(scenario: Scenario, python: str) -> Path:
    """The checkpoint's directory, written first if no run wrote it before (one writer at a time), verified whole
    before any worker loads it (written again when damaged)."""
    out = directory(scenario, python)
    if out.is_dir() and _damage(out, scenario) is None:  # checked again, and repaired, under the lock
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with os.fdopen(outputs.lock(out.parent / f".{out.name}.lock"), "rb") as lock:  # a FIFO or a link: refused
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _whole(out, scenario):  # another process wrote it meanwhile; a damaged one is removed here
            return out
        say(f"writing the checkpoint this scenario loads (once per shape): {out}")
        env = {**environment.probe(python), **environment.HUB_OFFLINE}
        proc = subprocess.run([python, "-m", "rssprobe.worker.checkpoint", str(out), json.dumps(spec(scenario))],
                              env=env, capture_output=True, text=True, timeout=WRITE_TIMEOUT_S)
        if proc.returncode != 0 or not out.is_dir():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(f"{out}: the checkpoint could not be written ({last})")
        why = _damage(out, scenario)
        if why is not None:
            raise UserError(f"{out}: the checkpoint just written is not whole ({why}); clear it with: "
                            f"rm -rf {shlex.quote(str(out))}")
    return out

