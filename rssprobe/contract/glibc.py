"""glibc's malloc as both sides name it: the steady mmap threshold workflows default to, and the in-use formula.

Part of the contract (rssprobe/contract/): stdlib only."""

from typing import Any

# glibc's dynamic mmap threshold makes identical runs retain different amounts (+-4 B/param of raw RSS, in
# 8-32 MiB jumps); workflows that compare versions fix it unless told otherwise (README, "Noise")
STEADY_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}

IN_USE = ("uordblks", "hblkhd")  # small chunks in use + mmapped chunks: what the program holds


def glibc_in_use(mi: Any) -> Any:
    """Bytes malloc has handed out and not got back, from mallinfo2's fields (dicts of ints or of arrays)."""
    return None if mi is None else mi[IN_USE[0]] + mi[IN_USE[1]]
