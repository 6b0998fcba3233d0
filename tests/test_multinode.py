"""Issue 42 loose end: a run prepared for several nodes forwards the shared ops directory (RSSPROBE_SHARED_OPS) to
every rank, in the torchrun exports and in the file DeepSpeed's launcher forwards; without it the other nodes'
ranks would build DeepSpeed's CPU ops again (minutes each) instead of loading the ones built once."""

from __future__ import annotations

import shlex
from pathlib import Path

from rssprobe.contract.environment import SHARED_OPS_ENV
from rssprobe.run.multinode import DEEPSPEED_ENV_FILE

from .conftest import rssprobe


def _exports(text: str) -> dict[str, str]:
    line = next(x for x in text.splitlines() if x.strip().startswith("export "))
    return dict(item.split("=", 1) for item in shlex.split(line.strip())[1:])


def test_prepare_forwards_the_shared_ops_directory(tmp_path: Path) -> None:
    shared = tmp_path / "shared ops"  # a space: the export is quoted as a shell reads it
    proc = rssprobe("prepare", "default", "--world-size", "4", "--out", str(tmp_path / "run"),
                    env={SHARED_OPS_ENV: str(shared)}, check=True)
    assert _exports(proc.stdout)[SHARED_OPS_ENV] == str(shared)
    env_file = tmp_path / "run" / DEEPSPEED_ENV_FILE
    assert f"{SHARED_OPS_ENV}={shared}" in env_file.read_text().splitlines()
    assert f"DS_ENV_FILE={shlex.quote(str(env_file))} deepspeed --hostfile HOSTFILE" in proc.stdout


def test_prepare_forwards_reuse_switched_off(tmp_path: Path) -> None:
    """Set empty by the user (no reuse): the other nodes are told so too, not left to their default directory."""
    proc = rssprobe("prepare", "default", "--world-size", "2", "--out", str(tmp_path / "run"),
                    env={SHARED_OPS_ENV: ""}, check=True)
    assert _exports(proc.stdout)[SHARED_OPS_ENV] == ""
