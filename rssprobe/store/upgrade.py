"""Format versions: every file says which format it is (rssprobe.contract.files.FORMAT_VERSION); a file that says
nothing is format 0. A reader accepts the current format and upgrades older ones here, one explicit step per
version, so that the analysis reads one shape only; a newer format than this rssprobe knows is refused with
one line (exit 2). Modelled on asv's results api_version and its update step.

Format 0 -> 1 (files written before versions existed):
  events    trim_at_end's `returned` is `released_any`; a site's `peak` is `peak_above_entry`; a sites event
            without `steady` ran every site in full on every step ("full")
  manifest  a scenario without a zero table ran ZeRO stage 2 with the optimizer offloaded to the CPU
  indexes   a matrix.json without a kind is a plan's when plan.json lies beside it, else a matrix's;
            a bisect's definition.json held the definition itself
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import kinds
from ..contract.files import FORMAT_KEY, FORMAT_VERSION, format_of, too_new
from ..errors import UserError
from . import layout


def version(path: Path, data: Any) -> int:
    """The format `data` (read from `path`) says it is; UserError when it is not one, or newer than this reads."""
    found = format_of(data)
    if found is None:
        raise UserError(f"{path}: damaged ({FORMAT_KEY} is not a format version)")
    if found > FORMAT_VERSION:
        raise UserError(f"{path}: {too_new(found)}")
    return found


def _steps(steps: dict[int, Callable[[Any], Any]], data: Any, found: int) -> Any:
    for v in range(found, FORMAT_VERSION):
        data = steps[v](data)
    return data


# ---- events -----------------------------------------------------------------------------------------------

def _event_0(event: dict[str, Any]) -> dict[str, Any]:
    kind = event.get("event")
    if kind == "trim_at_end" and "released_any" not in event and "returned" in event:
        event["released_any"] = event.pop("returned")
    if kind == "sites" and "steady" not in event:
        event["steady"] = "full"
    sites = event.get("sites")
    if kind in ("init", "step", "inrun") and isinstance(sites, dict):
        for totals in sites.values():
            if isinstance(totals, dict) and "peak_above_entry" not in totals and "peak" in totals:
                totals["peak_above_entry"] = totals.pop("peak")
    return event


def event(data: dict[str, Any], found: int) -> dict[str, Any]:
    """One event of a file of format `found`, in the current shape (the event is changed in place)."""
    return _steps({0: _event_0}, data, found)


def events_version(path: Path, first: Any) -> int:
    """An events file's format: its first event's (the writer stamps it there)."""
    return version(path, first if isinstance(first, dict) else {})


# ---- manifests, groups, indexes ---------------------------------------------------------------------------

def _manifest_0(m: dict[str, Any]) -> dict[str, Any]:
    scenario = m.get("scenario")
    if isinstance(scenario, dict) and not isinstance(scenario.get("zero"), dict):
        scenario["zero"] = {"stage": 2, "offload_optimizer": "cpu"}
    return m


def _current(data: dict[str, Any]) -> dict[str, Any]:
    """An upgraded file says the format it now has (written back, it is a file of that format)."""
    return {FORMAT_KEY: FORMAT_VERSION, **{k: v for k, v in data.items()
                                                             if k != FORMAT_KEY}}


def manifest(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    return _current(_steps({0: _manifest_0}, data, version(path, data)))


def group(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    version(path, data)
    return _current(data)


def index(path: Path, data: dict[str, Any], kind: str) -> dict[str, Any]:
    """A campaign index (matrix.json, scale.json, definition.json) in the current shape."""
    found = version(path, data)

    def zero_to_one(d: dict[str, Any]) -> dict[str, Any]:
        if path.name == layout.BISECT_DEFINITION:
            return {"kind": kinds.BISECT.name, "definition": d}
        if "kind" not in d:
            d["kind"] = kinds.PLAN.name if path.name == layout.MATRIX_INDEX and (path.parent / layout.PLAN_FILE) \
                .is_file() else kind
        return d

    return _current(_steps({0: zero_to_one}, data, found))
