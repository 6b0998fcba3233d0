"""Ask this Python's DeepSpeed what an estimate needs from it, before (and without) any run:

    python -m rssprobe.worker.dsinfo '{"params": N, "largest_layer": L, "ranks_per_node": R, "nodes": K,
                                        "stage": S, "offload_param": false}'

prints one JSON line (rssprobe.contract.answers.DeepSpeedInfo, after DS_INFO_ANSWER): torch's and DeepSpeed's
versions, the ZeRO config defaults that decide each rank's partition sizes (DeepSpeedZeroConfig's
sub_group_size and persistence thresholds, the offload configs' pin_memory default), and DeepSpeed's own
estimate of the node's host memory for that model (its estimate_zero2/zero3_model_states_mem_needs, via
worker/training.py, as every run records it). DeepSpeed is imported, nothing is trained.
"""

from __future__ import annotations

import json
import os
import sys

from ..contract.answers import DS_INFO_ANSWER, DeepSpeedInfo
from . import training


def ask(request: dict[str, object]) -> DeepSpeedInfo:
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # its estimators are arithmetic: no device is looked for
    import deepspeed
    import torch
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.offload_config import DeepSpeedZeroOffloadOptimizerConfig

    zero = DeepSpeedZeroConfig()
    stage = int(request["stage"])  # type: ignore[call-overload]
    estimate = training.estimator_cpu_bytes(
        int(request["params"]), int(request["ranks_per_node"]), int(request["nodes"]),  # type: ignore[call-overload]
        stage=stage, offload_param=bool(request["offload_param"]),
        largest_layer_params=int(request["largest_layer"]))  # type: ignore[call-overload]
    # stage 3's estimator has a row per zero.Init (estimate_zero3_model_states_mem_needs_all_cold prints both)
    with_init = training.estimator_cpu_bytes(
        int(request["params"]), int(request["ranks_per_node"]), int(request["nodes"]),  # type: ignore[call-overload]
        stage=3, offload_param=bool(request["offload_param"]),
        largest_layer_params=int(request["largest_layer"]), zero_init=True) if stage == 3 else None  # type: ignore[call-overload]
    return {"torch": torch.__version__, "deepspeed": deepspeed.__version__,
            "zero_defaults": {"sub_group_size": int(zero.sub_group_size),
                              "param_persistence_threshold": int(zero.param_persistence_threshold),
                              "model_persistence_threshold": int(zero.model_persistence_threshold),
                              "pin_memory": bool(DeepSpeedZeroOffloadOptimizerConfig().pin_memory)},
            "estimator_cpu_bytes": estimate, "estimator_cpu_bytes_zero_init": with_init,
            "estimator": "estimate_zero3_model_states_mem_needs" if stage == 3
            else "estimate_zero2_model_states_mem_needs"}


if __name__ == "__main__":
    print(DS_INFO_ANSWER + json.dumps(ask(json.loads(sys.argv[1]))), flush=True)
