"""PYTORCH_CUDA_ALLOC_CONF as rssprobe takes it (--torch-alloc-conf, the scenario's torch_alloc_conf): its
syntax, and the keys only a CUDA build of torch parses (rssprobe/data/torch_alloc_conf.toml).

Which keys a torch accepts is asked of that torch (rssprobe.worker.allocconf, in the worker's Python): a CUDA
build parses the whole setting and refuses an unknown key ("Unrecognized key"); a CPU build parses the keys
every build shares and silently passes over the rest, the CUDA-only ones and misspelt ones alike, so for
those this module's table answers. The environment variables themselves are the contract's
(TORCH_ALLOC_CONF_ENV: the worker's; run/environment.py sets it).
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import tomllib
from packaging.version import InvalidVersion, Version


def split(conf: str) -> dict[str, str]:
    """'KEY:VALUE,KEY:[a:b,c:d]' -> {KEY: VALUE}; commas inside brackets stay in the value (as torch's tokenizer
    reads roundup_power2_divisions). ValueError naming an item that is not KEY:VALUE."""
    out: dict[str, str] = {}
    depth, item, items = 0, "", []
    for ch in conf:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            items.append(item)
            item = ""
        else:
            item += ch
    items.append(item)
    for raw in (i.strip() for i in items):
        key, sep, value = raw.partition(":")
        if not sep or not re.fullmatch(r"[a-z][a-z0-9_]*", key.strip()) or not value.strip():
            raise ValueError(f"{raw!r} is not KEY:VALUE (a setting is KEY:VALUE,KEY:VALUE,...)")
        out[key.strip()] = value.strip()
    return out


def _table() -> dict[str, Any]:
    return tomllib.loads(resources.files("rssprobe.data").joinpath("torch_alloc_conf.toml").read_text())


def release(version: str | None) -> tuple[int, int, int]:
    """'2.13.0+cpu' -> (2, 13, 0): the release a torch version belongs to (a nightly's 2.14.0a0 counts as 2.14.0,
    a local part is dropped); (0, 0, 0) when it is not a version (older than any key)."""
    try:
        v = Version(version or "")
    except InvalidVersion:
        return (0, 0, 0)
    return (v.major, v.minor, v.micro)


def _minor(version: str) -> tuple[int, int]:
    return release(version)[:2]


def cuda_only_verdict(key: str, torch_version: str) -> str | None:
    """None when the CUDA build of torch `torch_version` accepts `key` as one of its CUDA-only keys, else why
    the run is refused: not a key of that release, or a release older than any rssprobe read."""
    table = _table()
    read, since = table["read"], table["since"].get(key)
    v = _minor(torch_version)
    if since is not None and _minor(since) <= v:
        return None
    if v < _minor(read[0]):
        return (f"cannot tell whether torch {torch_version} accepts {key!r}: its CPU build does not parse it and "
                f"rssprobe knows the CUDA-only keys of torch {read[0]}-{read[-1]} only")
    known = ", ".join(k for k, s in table["since"].items() if _minor(s) <= v)
    newer = f"; rssprobe read torch up to {read[-1]}" if v > _minor(read[-1]) else ""
    return f"torch {torch_version} does not accept {key!r} (CUDA-only keys of that release: {known}{newer})"
