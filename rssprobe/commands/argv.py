"""The `rssprobe run` command line that reproduces one run group started by matrix or bisect.

It is what those groups' manifests record as their command, so each group can be rerun on
its own and names the environment (or Python) it ran in.
"""

from __future__ import annotations

from pathlib import Path


def run_argv(ref: str, sets: list[str], patches: list[str], repeat: int, out: Path, env_name: str | None,
             python: str, allocator: str = "glibc") -> list[str]:
    argv = ["rssprobe", "run", ref, *[a for s in sets for a in ("--set", s)], "--trim-at-end",
            "--allocator", allocator, "--repeat", str(repeat), "--out", str(out)]
    argv += [a for p in patches for a in ("--patch", p)]
    return argv + (["--env", env_name] if env_name else ["--python", python])
