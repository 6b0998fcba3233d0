"""THE parser of sizes people type: parameter counts (`7B`, `70e9`, `1.3B`, `350M`) and amounts of memory (`512G`,
`1.5TiB`, `2TB`, `768000000000`). Every option that takes a size goes through here (estimate's --params and
--node-ram, scale's --params list), so `7B` means the same everywhere.

Counts use the SI letters models are named with (K = 1e3, M = 1e6, B or G = 1e9, T = 1e12). Memory takes binary
units (KiB, MiB, GiB, TiB; a bare K, M, G or T is binary too, as Slurm's --mem and `free -g` read them) and decimal
ones (KB, MB, GB, TB), or a plain number of bytes. nan, infinities, negative numbers and anything else are refused
with the reason (ValueError; the commands make it one line, exit 2).
"""

from __future__ import annotations

import math
import re

COUNT_UNITS = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}
BYTE_UNITS = {"": 1, "B": 1, "K": 2**10, "KIB": 2**10, "M": 2**20, "MIB": 2**20, "G": 2**30, "GIB": 2**30,
              "T": 2**40, "TIB": 2**40, "P": 2**50, "PIB": 2**50, "KB": 10**3, "MB": 10**6, "GB": 10**9,
              "TB": 10**12, "PB": 10**15}
NUMBER = re.compile(r"\s*([+-]?[\d_]*\.?\d*(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)\s*")


def _split(text: str, what: str) -> tuple[float, str]:
    m = NUMBER.fullmatch(str(text))
    if not m:
        raise ValueError(f"{text!r} is not {what}")
    try:
        value = float(m.group(1).replace("_", ""))
    except ValueError:
        raise ValueError(f"{text!r} is not {what}") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value, m.group(2).upper()


def _scaled(text: str, units: dict[str, int], what: str, hint: str) -> float:
    value, unit = _split(text, f"{what} ({hint})")
    if unit not in units:
        raise ValueError(f"{text!r}: unknown unit {unit!r} ({what}: {hint})")
    n = value * units[unit]
    if not math.isfinite(n):  # 1e308T: finite as typed, not once scaled
        raise ValueError(f"{text!r} is not a finite number")
    if n <= 0:
        raise ValueError(f"{text!r} is not {what} > 0")
    if n < 1:  # a fraction of one byte or one parameter (0.5B) is no size, not zero
        raise ValueError(f"{text!r} is not {what} of at least 1")
    return n


def count(text: str) -> float:
    """A parameter count: '7B' -> 7e9, '70e9', '1.3B', '350M', '125000000'; ValueError otherwise."""
    return _scaled(text, COUNT_UNITS, "a parameter count", "7B, 1.3B, 350M, 70e9: K, M, B or T")


def items(text: str) -> list[str]:
    """THE splitter of a list people type ('4e6,16M,64e6', a script's size values '1,2,4'): each item stripped;
    an empty item (a trailing comma), a space inside one or a control character (a newline) is refused
    (ValueError). Repeats are the caller's to judge (sizes by their value: 1e6 and 1M are one size)."""
    out: list[str] = []
    for raw in str(text).split(","):
        item = raw.strip(" ")
        if not item:
            raise ValueError(f"{text!r}: an empty value (a comma too many)")
        if any(c.isspace() or not c.isprintable() for c in item):
            raise ValueError(f"{text!r}: {item!r} holds a space or a control character")
        out.append(item)
    return out


def counts(text: str) -> list[float]:
    """'4e6,16M,64e6' -> [4e6, 16e6, 64e6] (items(), each as count())."""
    return [count(item) for item in items(text)]


# the largest amount of memory taken: a node's RAM is TiBs; 1 PiB is past any machine's, a typo (1e30, 5PB)
MAX_BYTES = 2**50


def nbytes(text: str) -> int:
    """An amount of memory in bytes: '512G' and '512GiB' -> 512 x 2^30, '2TB' -> 2e12, '1.5T'; ValueError otherwise
    (and above MAX_BYTES)."""
    n = int(_scaled(text, BYTE_UNITS, "an amount of memory", "512G, 1.5TiB, 2TB: KiB..TiB or KB..TB"))
    if n > MAX_BYTES:
        raise ValueError(f"{text!r} is more than 1 PiB: not a machine's memory")
    return n


def format_count(n: float) -> str:
    """A count as count() reads it back, in three significant digits: 413M, 1.65B, 7B."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.3g}"
