"""The user's own launcher (`rssprobe run -- deepspeed --num_gpus 2 train.py`), resolved and checked before anything
is made: its first word must name a regular executable file, given as a path or found on the worker's PATH, as
execvp would find it. Otherwise the start fails inside subprocess after the run directory exists (a traceback, and a
run left "running" for ever)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import UserError


def _why_not(path: Path) -> str | None:
    """Why `path` cannot be executed (None: it can)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if stat.S_ISDIR(mode):
        return "is a directory"
    if stat.S_ISFIFO(mode):
        return "is a FIFO, not a program"
    if not stat.S_ISREG(mode):
        return "is not a regular file"
    if not os.access(path, os.X_OK):
        return "is not executable (no x bit for this user)"
    return None


def resolve(command: list[str] | tuple[str, ...], path_env: str | None = None) -> Path:
    """The executable the launch command's first word starts (a path, or the first executable of that name on
    `path_env`, the worker's PATH); one line naming the word and why otherwise."""
    if not command:
        raise UserError("the launch command after `--` is empty")
    word = command[0]
    if not word.strip() or "\0" in word:
        raise UserError(f"launcher {word!r}: an empty word cannot start a program (rssprobe run -- LAUNCHER ... "
                        "train.py)")
    if "/" in word:
        why = _why_not(Path(word))
        if why:
            raise UserError(f"launcher {word}: {why}")
        return Path(word)
    seen: list[str] = []
    for directory in (path_env if path_env is not None else os.environ.get("PATH", os.defpath)).split(os.pathsep):
        candidate = Path(directory or ".") / word
        why = _why_not(candidate)
        if why is None:
            return candidate
        if why != "no such file":
            seen.append(f"{candidate} {why}")
    found = f" ({'; '.join(seen[:3])})" if seen else ""
    raise UserError(f"launcher {word}: no executable of that name on PATH{found}")
