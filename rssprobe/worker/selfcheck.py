"""What the worker's probes can read in this Python, as one answer line (`rssprobe doctor` asks it: run/ask.py).

    python -m rssprobe.worker.selfcheck [--torch]

Run in a fresh process of the worker's Python, so that the answers are a worker's: glibc's status as a
worker sees it (an LD_PRELOAD the doctor's own process does not have, another glibc), whether the kernel
resets the peak there, and, with --torch, whether that Python's torch sees a CUDA device.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ..contract.answers import SELF_CHECK_ANSWER
from . import glibc, procfs


def check(with_torch: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"rss_bytes": procfs.rss_bytes(), "smaps_rollup": procfs.smaps_rollup() is not None,
                           "hwm_reset": procfs.reset_hwm(), "glibc": glibc.STATUS.__dict__, "cuda": None}
    if with_torch:
        import torch

        available = torch.cuda.is_available()
        out["cuda"] = {"available": available, "device": torch.cuda.get_device_name(0) if available else None}
    return out


if __name__ == "__main__":
    print(SELF_CHECK_ANSWER + json.dumps(check("--torch" in sys.argv[1:])))
