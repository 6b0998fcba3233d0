"""One way to ask another Python a question: run a command in it and read the JSON it prints after a prefix.

rssprobe asks the worker's Python what only it can say (a distribution's version, whether the code sites
resolve, how its torch parses an allocator setting, its DeepSpeed's defaults, what its probes can read). Each
answer is one line, `PREFIX json`, on stdout (the prefixes are the contract's, so that a library's own output
never passes for an answer); every way of not answering (cannot start, no answer in time, exited without the
line, a line cut short) is one `why` the caller puts in its own one-line error.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from typing import Any

from ..errors import UserError
from ..store import reader

TIMEOUT_S = 300  # importing torch and DeepSpeed on a loaded machine can take a minute; a hung import is not waited


@dataclass(frozen=True)
class Reply:
    answer: Any = None  # the JSON after the prefix
    why: str | None = None  # why there is no answer (None: answered)
    ran: bool = True  # False: the Python could not be started at all


def ask(python: str, argv: list[str], prefix: str, env: dict[str, str] | None = None,
        timeout: float = TIMEOUT_S) -> Reply:
    """Run `python ARGV` (env: the worker's environment; None: this one) and read its answer line."""
    try:
        proc = subprocess.run([python, *argv], capture_output=True, text=True, env=env, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Reply(why=f"no answer in {timeout:.0f} s")
    except OSError as e:  # gone, not executable
        return Reply(why=f"cannot run this Python ({e.strerror or e})", ran=False)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(prefix)), None)
    if line is None:
        last = (proc.stderr.strip().splitlines() or [""])[-1][:200]
        return Reply(why=f"exit code {proc.returncode}, no answer" + (f": {last}" if last else ""))
    try:
        return Reply(reader.loads_json(line.removeprefix(prefix), "its answer"))
    except json.JSONDecodeError:
        return Reply(why="its answer was cut short")
    except UserError:
        return Reply(why="its answer is nested too deep to be one")
