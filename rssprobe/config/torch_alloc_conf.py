"""PYTORCH_CUDA_ALLOC_CONF as rssprobe takes it (--torch-alloc-conf, the scenario's torch_alloc_conf): its
syntax, and the keys only a CUDA build of torch parses (rssprobe/data/torch_alloc_conf.toml).

Which keys a torch accepts is asked of that torch (rssprobe.worker.allocconf, in the worker's Python): a CUDA
build parses the whole setting and refuses an unknown key ("Unrecognized key"); a CPU build parses the keys
every build shares and silently passes over the rest, the CUDA-only ones and misspelt ones alike, so for
those this module's table answers. The environment variables themselves are the contract's
(TORCH_ALLOC_CONF_ENV: the worker's; run/environment.py sets it).
"""

from __future__ import annotations

import functools
import re
import tomllib
from importlib import resources
from typing import Any

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


@functools.lru_cache(maxsize=1)
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


def cuda_only_keys() -> set[str]:
    """The keys only a CUDA build parses (any release rssprobe read)."""
    return set(_table()["since"])


def _whole(key: str, value: str, form: dict[str, Any]) -> str | None:
    """Why `value` is not the whole number `form` asks for (torch reads it with stoull)."""
    text = value.strip()
    if re.fullmatch(r"-\s*\d+", text):
        return f"{key}:{value}: torch reads a negative number as 2^64 minus it (stoull); give a whole number >= " \
               f"{form.get('min', 0)}"
    if not re.fullmatch(r"\d+", text):
        lead = re.match(r"\d+", text)  # stoull keeps the leading digits
        misread = f", as {int(lead.group())}" if lead else ""
        return f"{key}:{value}: not a whole number (torch would read {text!r} with stoull{misread})"
    n = int(text)
    if n < form.get("min", 0) or ("max" in form and n > form["max"]):
        top = f" to {form['max']}" if "max" in form else " or more"
        return f"{key}:{value}: out of range (torch takes {form.get('min', 0)}{top})"
    if form.get("power_of_two") and n & (n - 1):
        return f"{key}:{value}: not a power of 2 (torch takes 1, 2, 4, ... {form.get('max', '')})".replace(" )", ")")
    return None


def value_problem(key: str, value: str) -> str | None:
    """Why torch would refuse or misread `value` for `key` (the table's [values]); None when it reads it as
    written, or the key is not in the table (its torch is asked: preflight.check_alloc_conf)."""
    form = _table()["values"].get(key)
    if form is None:
        return None
    text = value.strip()
    if form == "bool":
        return None if text in ("True", "False") else f"{key}:{value}: torch takes True or False (exactly)"
    if "choice" in form:
        return None if text in form["choice"] else f"{key}:{value}: torch takes {' or '.join(form['choice'])}"
    if form.get("fraction"):
        try:
            number = float(text)
        except ValueError:
            number = float("nan")
        return None if 0.0 <= number <= 1.0 else f"{key}:{value}: torch takes a number from 0.0 to 1.0"
    return _whole(key, value, form)


def fix_needed(keys: dict[str, str], torch_version: str | None) -> str | None:
    """Why `keys` are unsafe on `torch_version` for want of a fix the table's [fixes] names; None when safe."""
    fix = _table()["fixes"]["192722"]
    round_mb, cached_mb = keys.get("pinned_max_round_threshold_mb"), keys.get("pinned_max_cached_size_mb")
    if round_mb is None or not (2, 13) <= _minor(torch_version or "") < _minor(fix["since"]):
        return None
    below = cached_mb is None or int(round_mb.strip()) < int(cached_mb.strip())
    if not below:
        return None
    cached = f"pinned_max_cached_size_mb {cached_mb.strip()}" if cached_mb is not None else \
        "pinned_max_cached_size_mb (unset: no limit)"
    return (f"pinned_max_round_threshold_mb {round_mb.strip()} is below {cached}: torch {torch_version} can hand "
            f"a request a cached pinned block smaller than itself (fixed by pytorch PR #192722, torch "
            f"{fix['since']} and later); set pinned_max_cached_size_mb to at most the round threshold, or leave "
            "the threshold unset")


def check(conf: str, torch_version: str | None = None) -> dict[str, str]:
    """The keys of `conf`; ValueError naming the first item whose syntax or value torch would refuse or misread,
    or (`torch_version` given) a combination that release is unsafe with (fix_needed)."""
    keys = split(conf)
    for key, value in keys.items():
        problem = value_problem(key, value)
        if problem:
            raise ValueError(problem)
    if torch_version is not None:
        problem = fix_needed(keys, torch_version)
        if problem:
            raise ValueError(problem)
    return keys
