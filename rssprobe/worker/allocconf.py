"""Ask this Python's torch how it parses an allocator setting (PYTORCH_CUDA_ALLOC_CONF), before any run:

    python -m rssprobe.worker.allocconf 'KEY:VALUE,...'

prints one JSON line (rssprobe.contract.answers.AllocConfAnswer, after ALLOC_CONF_ANSWER): torch's version,
whether it is a CUDA build, torch's own error for the setting (None when it took it), and, for a CPU build,
which keys its parser knows. torch >= 2.9 parses through
`torch._C._accelerator_setAllocatorSettings` (c10's AcceleratorAllocatorConfig, then the CUDA build's own
parser, which refuses an unknown key); older CUDA builds through torch.cuda.memory._set_allocator_settings.
A CPU build knows only the keys every build shares and passes over the rest unread: a key it knows refuses
a value that is not one ('KEY:?'), so asking with that value tells known keys from the rest. Run in a process
of its own: the setting it parses is that process's, never the worker's.
"""

from __future__ import annotations

import json
import sys

from ..contract.answers import ALLOC_CONF_ANSWER, AllocConfAnswer


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


def ask(conf: str, keys: list[str]) -> AllocConfAnswer:
    import torch

    cuda_build = torch.version.cuda is not None or getattr(torch.version, "hip", None) is not None
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if setter is None and cuda_build:
        setter = getattr(torch.cuda.memory, "_set_allocator_settings", None)
    out: AllocConfAnswer = {"torch": torch.__version__.split("+")[0], "build": torch.__version__,
                            "cuda_build": cuda_build, "parser": setter is not None, "error": None, "known": None}
    if setter is None:
        return out
    try:
        setter(conf)
    except Exception as e:  # torch's own refusal, as it words it
        out["error"] = _first_line(e)
        return out
    if not cuda_build:
        known = {}
        for key in keys:
            try:
                setter(f"{key}:?")
                known[key] = False  # passed over unread: not a key this build parses
            except Exception:
                known[key] = True
        out["known"] = known
    return out


def main(argv: list[str]) -> int:
    conf, keys = argv[1], json.loads(argv[2])
    print(ALLOC_CONF_ANSWER + json.dumps(ask(conf, keys)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
