"""Host-to-device copy bandwidth of each way DeepSpeed's offload buffers can be pinned (the fixes of
rssprobe/data/fixes.toml), and the host memory each way holds for one buffer: the device part of
reports/issue7693-answer.md. Run by tests/gpu/check.sh (EVIDENCE=fixes); on a machine without CUDA it writes
nothing and exits 4 ("no CUDA device"), as the check does.

    python tests/gpu/h2d_bench.py --out h2d.json [--sizes-mib 4 64 256] [--iters 20]

Modes: torch (pin_memory=True: the caching host allocator, DeepSpeed's default), cached-size (the same under
PYTORCH_CUDA_ALLOC_CONF=pinned_max_cached_size_mb:1, in a child process: torch reads it once), native and
native-unregistered (DeepSpeed's DS_PIN_MEMORY_BACKEND=native with DS_PIN_MEMORY_REGISTER_DEVICE 1 and 0),
register (rssprobe's pin.register: page-aligned memory, cudaHostRegister at its size), pageable (no pinning:
offload_optimizer.pin_memory false). Per mode and size: GB/s of `dst.copy_(src, non_blocking=True)` timed by
CUDA events over `iters` copies after warm-up (GB = 1e9 B, as DeepSpeed PR #8283 reports its figures), and the
host bytes the buffer made the allocator hold (torch's host_memory_stats) or lock (VmLck). WRITTEN WITHOUT A
DEVICE: not yet run on one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

NO_CUDA = 4
MODES = ("torch", "native", "native-unregistered", "register", "pageable", "cached-size")
CACHED_SIZE_CONF = "pinned_max_cached_size_mb:1"


def _locked() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmLck:"):
            return int(line.split()[1]) * 1024
    return 0


def _held(torch: Any) -> int:
    stats = torch.cuda.host_memory_stats()
    return int(stats.get("allocated_bytes.all.current", stats.get("allocated_bytes", 0)) or 0)


def buffer(torch: Any, mode: str, nbytes: int) -> Any:
    """A host buffer of `nbytes` pinned the way `mode` pins it."""
    if mode in ("torch", "cached-size"):
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    if mode == "pageable":
        return torch.empty(nbytes, dtype=torch.uint8)
    if mode in ("native", "native-unregistered"):
        os.environ["DS_PIN_MEMORY_BACKEND"] = "native"
        os.environ["DS_PIN_MEMORY_REGISTER_DEVICE"] = "1" if mode == "native" else "0"
        from deepspeed.utils.pin_memory import get_native_pinned_memory

        return get_native_pinned_memory().pin_empty(torch.empty(0, dtype=torch.uint8), (nbytes,))
    if mode == "register":
        from rssprobe.worker.interventions.pinregister import _Libc, registered_empty

        return registered_empty(torch, _Libc(), (nbytes,), torch.uint8, {})
    raise ValueError(mode)


def bandwidth(torch: Any, src: Any, iters: int, warmup: int = 3) -> float:
    """GB/s of host-to-device copies from `src` (non_blocking, as DeepSpeed's offload copies are)."""
    dst = torch.empty(src.numel(), dtype=src.dtype, device="cuda")
    for _ in range(warmup):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        dst.copy_(src, non_blocking=True)
    end.record()
    torch.cuda.synchronize()
    return src.numel() * src.element_size() * iters / (start.elapsed_time(end) / 1e3) / 1e9


def measure(modes: list[str], sizes_mib: list[int], iters: int) -> dict[str, Any]:
    import torch

    torch.cuda.init()
    out: dict[str, Any] = {}
    for mode in modes:
        rows = []
        for mib in sizes_mib:
            nbytes = mib * 2**20 + 4097  # just above a size: where torch's rounding shows
            held0, locked0 = _held(torch), _locked()
            src = buffer(torch, mode, nbytes)
            src.fill_(1)
            row = {"mib": mib, "bytes": nbytes, "is_pinned": bool(src.is_pinned()),
                   "allocator_held_delta": _held(torch) - held0, "locked_delta": _locked() - locked0,
                   "h2d_gbps": bandwidth(torch, src, iters)}
            rows.append(row)
            del src
        out[mode] = rows
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--sizes-mib", nargs="+", type=int, default=[4, 64, 256])
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("h2d_bench: no CUDA device: nothing measured", file=sys.stderr)
        return NO_CUDA
    here = [m for m in args.modes if m != "cached-size"]
    result: dict[str, Any] = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                              "iters": args.iters, "modes": measure(here, args.sizes_mib, args.iters)}
    if "cached-size" in args.modes:  # torch reads the allocator setting once: its own process
        env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": CACHED_SIZE_CONF}
        env.pop("PYTORCH_ALLOC_CONF", None)
        child = subprocess.run([sys.executable, __file__, "--modes", "torch", "--iters", str(args.iters),
                                "--sizes-mib", *map(str, args.sizes_mib)], env=env, capture_output=True, text=True)
        if child.returncode == 0:
            result["modes"]["cached-size"] = json.loads(child.stdout)["modes"]["torch"]
        else:
            result["modes"]["cached-size"] = {"error": (child.stderr.strip().splitlines() or ["failed"])[-1]}
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
