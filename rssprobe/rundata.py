"""The one place that reads a run directory's data files and checks them against each other.

Every consumer (show, diff, gate, group and scale summaries) reads events and manifests
through here, so they all get the same answer for a damaged directory:

* a file that cannot be read (missing where required, a directory, not UTF-8, not JSON,
  not the JSON shape expected) is one line, `file: reason` (UserError, exit 2);
* an events line that is valid JSON but not an event of the shape its kind has (`[1,2,3]`,
  `{"foo": 1}`, a step without `rss`) is left out and reported; a torn last line (the worker
  died mid-write) is dropped silently, as it always was;
* a "running" run whose orchestrator is gone (liveness.py) is "incomplete" too;
* a run whose manifest says ok but whose events do not back it (no `end` event with status
  ok, fewer step events than the manifest's or the scenario's step count, a rank's events
  missing, a line that is not an event) is "incomplete", with the reason: never shown as
  ok, never counted as finished, never compared (verdict undecided, exit 125).

Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UserError

INCOMPLETE = "incomplete"

_NUM = (int, float)


def read_text(path: Path) -> str:
    """A file's text (UTF-8), or UserError naming the file and what is wrong with it."""
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a file") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: damaged (not UTF-8 text: byte {e.start})") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror or e})") from None


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """A JSON file that must hold one object (a manifest, group.json, native.json)."""
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: corrupt {what} (not JSON: {e})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: corrupt {what} (a JSON {type(data).__name__}, not an object)")
    return data


# ---- manifests ----------------------------------------------------------------------------

# key -> (allowed types, required): what the readers of a manifest rely on
_MANIFEST: dict[str, tuple[tuple[type, ...], bool]] = {
    "status": ((str,), True),
    "scenario": ((dict,), True),
    "label": ((str, type(None)), False),
    "error": ((str, type(None)), False),
    "world_size": ((int,), False),
    "steps_done": ((int, type(None)), False),
    "patches": ((list,), False),
    "effects": ((dict, type(None)), False),
    "ranks": ((dict, type(None)), False),
    "versions": ((dict, type(None)), False),
    "started": ((str,), False),
}


def check_manifest(path: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    for key, (types, required) in _MANIFEST.items():
        if key not in manifest:
            if required:
                raise UserError(f"{path}: corrupt manifest ({key} is missing)")
            continue
        value = manifest[key]
        if not isinstance(value, types) or isinstance(value, bool):
            raise UserError(f"{path}: corrupt manifest ({key} is {json.dumps(value)[:40]}, "
                            f"not {' or '.join('null' if t is type(None) else _TYPE_NAMES[t] for t in types)})")
    steps = manifest["scenario"].get("steps")
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 0):
        raise UserError(f"{path}: corrupt manifest (scenario.steps is {json.dumps(steps)[:40]}, not a step count)")
    if manifest.get("world_size", 1) < 1:
        raise UserError(f"{path}: corrupt manifest (world_size {manifest['world_size']} is not a count of ranks)")
    if not all(isinstance(p, str) for p in manifest.get("patches", [])):
        raise UserError(f"{path}: corrupt manifest (patches is not a list of names)")
    return manifest


_TYPE_NAMES = {str: "a string", dict: "an object", int: "an integer", list: "a list", float: "a number"}


def check_group(path: Path, info: dict[str, Any]) -> dict[str, Any]:
    for key in ("scenario", "label"):
        if not isinstance(info.get(key), str):
            raise UserError(f"{path}: corrupt group file ({key} is missing or not a string)")
    return info


def check_native(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """native.json: phase -> kind -> rows with bytes, allocations and where."""
    for kinds in data.values():
        ok = isinstance(kinds, dict) and all(
            isinstance(rows, list) and all(isinstance(r, dict) and isinstance(r.get("bytes"), _NUM)
                                           and isinstance(r.get("allocations"), int) and isinstance(r.get("where"), str)
                                           for r in rows)
            for rows in kinds.values())
        if not ok:
            raise UserError(f"{path}: corrupt native view (not phase -> kind -> rows of bytes, allocations, where)")
    return data


# ---- events -------------------------------------------------------------------------------

# kind -> field -> types: the fields the analysis reads, and their types (None allowed where listed)
_NUMBER = (int, float)
_OPT_DICT = (dict, type(None))
_EVENT_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "step": {"rss": _NUMBER, "peak": _NUMBER, "mallinfo": _OPT_DICT, "sites": (dict,), "time_s": _NUMBER},
    "init": {"rss": _NUMBER, "peak": _NUMBER, "mallinfo": _OPT_DICT, "sites": (dict,)},
    "phase": {"name": (str,), "rss": _NUMBER, "mallinfo": _OPT_DICT},
    "census": {"at": (str,), "rss": _NUMBER, "resident": _NUMBER, "roles": (dict,), "mallinfo": _OPT_DICT},
    "model": {"params": (int,)},
    "partition": {"params": (int, type(None))},  # None: the optimizer has no partition_size
    "trim_at_end": {"before": (dict,), "after": (dict,)},
    "sites": {"installed": (dict,)},
    "end": {"status": (str,)},
    "error": {"message": (str,)},
    "usage_error": {"message": (str,)},
    "pins": {"at": (str,), "requests": (list,), "freed": (list,)},
}
# a pin request's fields the analysis reads (rssprobe.worker.pins), and a free's
_PIN_REQUEST = {"id": (int,), "bytes": (int, type(None)), "site": (str,), "line": (int,), "entry": (str,),
                "role": (str, type(None))}
_PIN_FREE = {"id": (int,), "seq": (int,)}


def _pins_problem(event: dict[str, Any]) -> str | None:
    for what, items, fields in (("request", event["requests"], _PIN_REQUEST), ("free", event["freed"], _PIN_FREE)):
        for item in items:
            if not isinstance(item, dict) or any(not isinstance(item.get(k), t) or isinstance(item.get(k), bool)
                                                 for k, t in fields.items()):
                return f"a pins event with a {what} that is not {', '.join(fields)}"
            if what == "request" and item["bytes"] is not None and item["bytes"] < 0:
                return "a pins event with a request of negative bytes"
    return None


def event_problem(event: Any) -> str | None:
    """Why a parsed JSON value is not an event the analysis can read; None when it is."""
    if not isinstance(event, dict):
        return f"a JSON {type(event).__name__}, not an event object"
    kind = event.get("event")
    if not isinstance(kind, str):
        return "no 'event' kind"
    for name, types in _EVENT_FIELDS.get(kind, {}).items():
        value = event.get(name)
        if not isinstance(value, types) or isinstance(value, bool):
            return f"a {kind} event without {'a valid ' if name in event else ''}'{name}'"
    if kind == "trim_at_end" and not all(isinstance(event[k].get("rss"), _NUM) for k in ("before", "after")):
        return "a trim_at_end event without 'rss' before and after"
    return _pins_problem(event) if kind == "pins" else None


@dataclass
class Events:
    """A rank's events that can be read, and the lines that were left out (line number, why)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    exists: bool = True


def read_events(path: Path) -> Events:
    """Every event of an events file; a torn last line is dropped, other bad lines are reported."""
    if not path.exists():
        return Events(exists=False)
    text = read_text(path)
    lines = text.split("\n")
    out = Events()
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            if i != last or text.endswith("\n"):  # a torn write is the unterminated last line only
                out.bad_lines.append((i + 1, "not JSON"))
            continue
        problem = event_problem(event)
        if problem:
            out.bad_lines.append((i + 1, problem))
        else:
            out.events.append(event)
    return out


# ---- does the data back the manifest? -------------------------------------------------------

FINAL = ("ok",)  # statuses that claim the data is all there


def rank_incomplete(name: str, read: Events, steps_expected: int | None) -> str | None:
    """Why one rank's events do not back a finished run; None when they do."""
    if not read.exists:
        return f"{name} is missing"
    if read.bad_lines:
        line, why = read.bad_lines[0]
        more = f" (and {len(read.bad_lines) - 1} more)" if len(read.bad_lines) > 1 else ""
        return f"{name} line {line} is not an event: {why}{more}"
    steps = sum(1 for e in read.events if e["event"] == "step")
    if steps_expected is not None and steps < steps_expected:
        return f"{name} has {steps} of {steps_expected} step events"
    if not any(e["event"] == "end" and e["status"] == "ok" for e in read.events):
        return f"{name} has no end event with status ok (truncated?)"
    return None


def incomplete(manifest: dict[str, Any], read: Any) -> dict[int, str]:
    """rank -> why its events do not back the manifest's ok; empty when they do (or it claims no ok).

    `read(rank)` gives a rank's Events (so the caller's cache is used)."""
    from .layout import events_file

    if manifest.get("status") not in FINAL:
        return {}
    expected = _most(manifest["scenario"].get("steps"), manifest.get("steps_done"))
    out = {}
    for rank in range(manifest.get("world_size", 1)):
        want = _most(expected, ((manifest.get("ranks") or {}).get(str(rank)) or {}).get("steps_done"))
        why = rank_incomplete(events_file(rank), read(rank), want)
        if why:
            out[rank] = why
    return out


def judged(manifest: dict[str, Any], read: Any) -> tuple[str, str | None, dict[int, str]]:
    """(status, error, rank -> gap): the manifest's status where the files back it, else "incomplete" with
    why; a "running" run whose orchestrator is gone (SIGKILL leaves no last word) is incomplete too."""
    from .liveness import gone

    gaps = incomplete(manifest, read)
    if gaps:
        return INCOMPLETE, "; ".join(gaps.values()), gaps
    if manifest.get("status") == "running":
        why = gone(manifest.get("orchestrator"))
        if why:
            return INCOMPLETE, why, {}
    return manifest["status"], manifest.get("error"), {}


def _most(*counts: Any) -> int | None:
    values = [c for c in counts if isinstance(c, int) and not isinstance(c, bool)]
    return max(values) if values else None
