"""The fixes for pinned-memory rounding slack (rssprobe/data/fixes.toml), and what each would hold on CUDA for a
run's (or an estimate's) pin requests: torch's caching host allocator rule (analysis/pinrule.py) replayed over
the same requests as each fix would pin them. Predicted, never measured here: what a fix saves is the predicted
holding of the requests as they were made minus the fix's. `show` and `estimate` name the fixes from here, and
reports/issue7693-answer.md compares them.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ..config.torch_alloc_conf import release
from . import pinrule
from .pinrule import Rule

HOLDS = ("exact", "rule", "none")


@dataclass(frozen=True)
class Fix:
    """One entry of fixes.toml (its comments say what each field means)."""

    name: str
    label: str
    short: str
    user: str
    rssprobe: str
    holds: str
    since: str
    h2d_gbps: tuple[float, float]
    h2d_source: str
    cost: str
    patch: str | None = None
    set: str | None = None
    alloc_conf: str | None = None
    needs: tuple[str, str] | None = None
    hazard: str | None = None
    reference: bool = False
    recommended: bool = False

    @property
    def full_bandwidth(self) -> bool:
        """Within 10% of torch's pinned copies (the reference's documented bandwidth)."""
        return self.h2d_gbps[0] >= 0.9 * reference().h2d_gbps[0]

    def bandwidth(self) -> str:
        low, high = self.h2d_gbps
        return f"{low:.0f}-{high:.0f} GB/s"


@functools.cache
def catalogue() -> tuple[Fix, ...]:
    """The declared fixes, the reference (torch's allocator, DeepSpeed's default) first."""
    data = tomllib.loads(resources.files("rssprobe.data").joinpath("fixes.toml").read_text())
    out = []
    for entry in data["fix"]:
        entry = dict(entry)
        entry["h2d_gbps"] = tuple(entry["h2d_gbps"])
        if "needs" in entry:
            entry["needs"] = tuple(entry["needs"])
        fix = Fix(**entry)
        if fix.holds not in HOLDS or len(fix.h2d_gbps) != 2 or not fix.h2d_gbps[0] <= fix.h2d_gbps[1]:
            raise ValueError(f"rssprobe/data/fixes.toml: {fix.name}: holds must be one of {HOLDS} and h2d_gbps "
                             "[low, high]")
        out.append(fix)
    if sum(f.reference for f in out) != 1 or not out[0].reference:
        raise ValueError("rssprobe/data/fixes.toml: exactly one reference fix, the first")
    return tuple(out)


def reference() -> Fix:
    return catalogue()[0]


def by_name(name: str) -> Fix:
    found = next((f for f in catalogue() if f.name == name), None)
    if found is None:
        raise KeyError(f"{name}: not a fix in rssprobe/data/fixes.toml")
    return found


def of_run(patches: list[str], torch_alloc_conf: str | None, zero_pin_memory: Any) -> Fix:
    """The fix a run was made with (its patches, alloc conf and zero.pin_memory), else the reference."""
    for fix in catalogue()[1:]:
        if (fix.patch and fix.patch in patches) or (fix.alloc_conf and fix.alloc_conf == torch_alloc_conf) or \
                (fix.set == "zero.pin_memory=false" and zero_pin_memory is False):
            return fix
    return reference()


def missing(fix: Fix, versions: dict[str, str | None]) -> str | None:
    """Why `fix` is not available with these package versions (None when it is, or when a version is unknown)."""
    if fix.needs is None:
        return None
    package, since = fix.needs
    have = versions.get(package)
    if have is None or release(have) >= release(since):
        return None
    return f"needs {package} >= {since} ({package} {have} here)"


def held(fix: Fix, ops: list[tuple[Any, ...]], torch_version: str | None, conf: str | None) -> tuple[int, int]:
    """(pinned, host) bytes at the end of `ops` (pinned.request_ops' order: ('alloc', id, bytes, via), ('free',
    id)) had `fix` pinned them: at their own pages, through torch's rule (the run's torch, 2.13 where it predates
    the fix's knob; the fix's alloc conf, else the run's), or not at all (then the same buffers are pageable:
    host memory is the requests' own bytes, nothing pinned)."""
    if fix.holds == "none":
        gone = {op[1] for op in ops if op[0] == "free"}
        return 0, sum(op[2] for op in ops if op[0] == "alloc" and op[1] not in gone)
    if fix.holds == "exact":
        pinned = pinrule.predict([(*op[:3], "native") if op[0] == "alloc" else op for op in ops], Rule()).pinned
        return pinned, pinned
    version = torch_version or "2.13.0"
    if fix.needs and fix.needs[0] == "torch" and release(version) < release(fix.needs[1]):
        version = fix.needs[1]
    rule = Rule.of(version, fix.alloc_conf if fix.alloc_conf is not None else conf)
    pinned = pinrule.predict([(*op[:3], "torch") if op[0] == "alloc" else op for op in ops], rule).pinned
    return pinned, pinned


def compare(ops: list[tuple[Any, ...]], torch_version: str | None, conf: str | None, params: int | None,
            now_held: int, versions: dict[str, str | None] | None = None) -> list[dict[str, Any]]:
    """Every fix against the requests as they were pinned (`now_held`: the host memory their predicted holding
    takes): what it would pin, the host memory the requests would take, and the saving, in bytes and per
    parameter; the reference's row is torch's allocator without a knob."""

    def per(n: int) -> float | None:
        return n / params if params else None

    rows = []
    for fix in catalogue():
        pinned, host = held(fix, ops, torch_version, conf)
        rows.append({"name": fix.name, "label": fix.label, "short": fix.short, "user": fix.user,
                     "rssprobe": fix.rssprobe, "holds": fix.holds,
                     "pinned_predicted": pinned, "host_predicted": host, "saving_predicted": now_held - host,
                     "pinned_predicted_bytes_per_param": per(pinned), "host_predicted_bytes_per_param": per(host),
                     "saving_predicted_bytes_per_param": per(now_held - host),
                     "h2d": fix.bandwidth(), "h2d_source": fix.h2d_source, "full_bandwidth": fix.full_bandwidth,
                     "cost": fix.cost, "hazard": fix.hazard, "since": fix.since, "reference": fix.reference,
                     "recommended": fix.recommended, "not_available": missing(fix, versions or {})})
    return rows
