"""The answer lines of the worker's Python: asked a question before a run (run/ask.py), `python -m
rssprobe.worker.<module>` prints its answer as JSON on the one line that starts with the question's prefix.

Part of the contract (rssprobe/contract/): stdlib only."""

from typing import Any, TypedDict

# `python -m rssprobe.worker.allocconf CONF KEYS` (the worker's torch asked before a run) prints its answer
# (AllocConfAnswer, JSON) on the line that starts with this
ALLOC_CONF_ANSWER = "RSSPROBE-ALLOC-CONF "


class AllocConfAnswer(TypedDict):
    """How a torch parses an allocator setting (rssprobe.worker.allocconf; run/preflight.py reads it)."""

    torch: str  # its version without the local part ("2.13.0")
    build: str  # torch.__version__ whole ("2.13.0+cpu")
    cuda_build: bool
    parser: bool  # this torch has a setter that parses the setting
    error: str | None  # torch's own refusal, first line; None: it took the setting
    known: dict[str, bool] | None  # a CPU build: key -> whether its parser knows it (None: not asked)


# `python -m rssprobe.worker.dsinfo REQUEST` (the installed DeepSpeed asked before an estimate) prints its answer
# (DeepSpeedInfo, JSON) on the line that starts with this
DS_INFO_ANSWER = "RSSPROBE-DS-INFO "
# the other answers of the worker's Python (run/ask.py): whether the code sites resolve (path -> why missing), what
# its probes can read (`python -m rssprobe.worker.selfcheck`), a distribution's version (null: not installed)
SITES_ANSWER = "RSSPROBE-SITES "
SELF_CHECK_ANSWER = "RSSPROBE-SELF-CHECK "
VERSION_ANSWER = "RSSPROBE-VERSION "


class DeepSpeedInfo(TypedDict):
    """What the worker's DeepSpeed says for an estimate (rssprobe.worker.dsinfo; workflows/estimate reads it)."""

    torch: str
    deepspeed: str
    zero_defaults: dict[str, Any]  # DeepSpeedZeroConfig's sub_group_size, persistence thresholds, pin_memory
    estimator_cpu_bytes: int | None  # DeepSpeed's own estimate of the node's host memory (model states)
    estimator_cpu_bytes_zero_init: int | None  # ZeRO-3: the same with zero_init=True (None below stage 3)
    estimator: str | None  # the function that gave it
