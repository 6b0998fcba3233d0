"""DeepSpeed's own figures for an estimate, asked of the worker's Python (rssprobe.worker.dsinfo): its versions,
the ZeRO config defaults that size the partitions, and its own host-memory estimator's answer."""

from __future__ import annotations

import json
from typing import Any

from ..contract.answers import DS_INFO_ANSWER, DeepSpeedInfo
from ..errors import UserError
from . import ask as asking
from . import environment


def ask(python: str, request: dict[str, Any]) -> DeepSpeedInfo:
    """The worker's DeepSpeed answer for `request` (params, largest_layer, ranks_per_node, nodes, stage,
    offload_param); UserError (one line) when that Python cannot say."""
    reply = asking.ask(python, ["-m", "rssprobe.worker.dsinfo", json.dumps(request)], DS_INFO_ANSWER,
                       environment.probe(python))
    if not isinstance(reply.answer, dict):
        why = reply.why or "not a JSON object"
        raise UserError(f"{python}: its DeepSpeed did not answer for the estimate's defaults ({why})")
    answer: DeepSpeedInfo = reply.answer
    return answer
