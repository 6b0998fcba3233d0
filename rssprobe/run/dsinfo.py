"""DeepSpeed's own figures for an estimate, asked of the worker's Python (rssprobe.worker.dsinfo): its versions,
the ZeRO config defaults that size the partitions, and its own host-memory estimator's answer."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from ..contract import DS_INFO_ANSWER, DeepSpeedInfo
from ..errors import UserError
from . import environment


def ask(python: str, request: dict[str, Any]) -> DeepSpeedInfo:
    """The worker's DeepSpeed answer for `request` (params, largest_layer, ranks_per_node, nodes, stage,
    offload_param); UserError (one line) when that Python cannot say."""
    try:
        proc = subprocess.run([python, "-m", "rssprobe.worker.dsinfo", json.dumps(request)], capture_output=True,
                              text=True, env=environment.probe(python), timeout=300, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UserError(f"{python}: could not ask its DeepSpeed for the estimate's defaults ({e})") from None
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(DS_INFO_ANSWER)), None)
    try:
        answer: DeepSpeedInfo = json.loads(line.removeprefix(DS_INFO_ANSWER)) if line else None
    except json.JSONDecodeError:
        answer = None
    if not isinstance(answer, dict):
        tail = (proc.stderr.strip().splitlines() or ["no answer"])[-1][:200]
        raise UserError(f"{python}: its DeepSpeed did not answer for the estimate ({tail})")
    return answer
