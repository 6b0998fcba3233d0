"""Run and run-group directories on disk: reading and writing them, finding them by reference.

What a run directory holds, file by file, is in rssprobe.contract; groups and campaigns in store/layout.py.
Every file is read through store/reader.py, checked against its definition (the contract's event kinds and
manifest), and upgraded from older formats (store/upgrade.py). Everything a report shows is derived from
these files, never kept only in memory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ..contract.events import event_problem
from ..contract.files import (
    EVENTS,
    FORMAT_KEY,
    FORMAT_VERSION,
    MANIFEST,
    RANK_EVENTS_GLOB,
    WORKER_LOG,
    events_file,
    rank_of_events,
    steps_file,
)
from ..contract.manifest import MANIFEST_TYPES, Manifest, manifest_problem
from ..errors import UserError
from . import claim, judgement, layout, outputs, reader, upgrade
from .judgement import Events
from .layout import GROUP, runs_root
from .writer import now_iso, write_json_atomic


def read_events(path: Path) -> Events:
    """Every event of an events file, in the current format; a torn last line is dropped silently (the
    worker died mid-write), every other line that is not an event of its kind's shape is reported."""
    if not path.exists():
        return Events(exists=False)
    text = reader.read_text(path)
    lines = text.split("\n")
    out = Events()
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    found: int | None = None
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            event = reader.loads_json(line, f"{path}: line {i + 1}")
        except UserError:  # nested deeper than any event
            out.bad_lines.append((i + 1, f"nested deeper than {reader.MAX_DEPTH} levels"))
            continue
        except json.JSONDecodeError:
            if i != last or text.endswith("\n"):  # a torn write is the unterminated last line only
                out.bad_lines.append((i + 1, "not JSON"))
            continue
        if found is None:
            found = upgrade.events_version(path, event)
        problem = event_problem(event)
        if problem:
            out.bad_lines.append((i + 1, problem))
        else:
            out.events.append(upgrade.event(event, found))
    return out


_STEPS_READ: dict[tuple[str, int, int, int], list[int]] = {}  # a table read once per process, per version of it


def read_step_numbers(path: Path) -> list[int] | None:
    """The step column of a per-step table, the table read whole through the damaged-file reader; None when the
    file is absent; UserError when it is not a table of steps."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror or e})") from None
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _STEPS_READ:
        table = reader.read_table(path)
        if "step" not in table.column_names:
            raise UserError(f"{path}: unreadable per-step table (no step column)")
        _STEPS_READ[key] = [int(v) if v is not None else -1 for v in table.column("step").to_pylist()]
    return _STEPS_READ[key]


def check_group(path: Path, info: dict[str, Any]) -> dict[str, Any]:
    for key in ("scenario", "label"):
        if not isinstance(info.get(key), str):
            raise UserError(f"{path}: corrupt group file ({key} is missing or not a string)")
    repeat = info.get("repeat", 1)
    if not isinstance(repeat, int) or isinstance(repeat, bool) or not 1 <= repeat <= layout.MAX_REPEAT:
        raise UserError(f"{path}: corrupt group file (repeat {json.dumps(repeat)[:40]} is not a count of runs "
                        f"from 1 to {layout.MAX_REPEAT})")
    return upgrade.group(path, info)


def read_native(path: Path) -> dict[str, Any]:
    """native.json: phase -> kind -> rows with bytes, allocations and where."""
    data = reader.read_json_object(path, "native view")
    for kinds in data.values():
        ok = isinstance(kinds, dict) and all(
            isinstance(rows, list) and all(isinstance(r, dict) and isinstance(r.get("bytes"), (int, float))
                                           and isinstance(r.get("allocations"), int) and isinstance(r.get("where"), str)
                                           for r in rows)
            for rows in kinds.values())
        if not ok:
            raise UserError(f"{path}: corrupt native view (not phase -> kind -> rows of bytes, allocations, where)")
    return data


@dataclass(frozen=True)
class RunDir:
    path: Path

    @classmethod
    def create(cls, out: Path | None, scenario: str, label: str, what: str = "run directory") -> RunDir:
        """A new, empty directory claimed by this process (store/claim.py) before anything is written; under
        the runs root by default, named by time, scenario and label, both made file-name safe and short."""
        if out is None:
            stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
            short = layout.NAME_PART
            out = runs_root() / f"{stamp}-{layout.slug(scenario, short)}-{layout.slug(label, short)}"
        claim.claim(out, what)
        if claim.contents(out):
            claim.release(out)
            raise UserError(f"{out}: output directory exists and is not empty")
        return cls(out)

    def release(self) -> None:
        """This process is done writing the directory (its claim ends; store/claim.py)."""
        claim.release(self.path)

    @property
    def id(self) -> str:
        return self.path.name

    def manifest(self) -> Manifest:
        """The manifest, typed (checked, and brought to this format: store/upgrade.py); UserError when there is
        none or it is damaged."""
        return Manifest.read(self._manifest_json())

    def _manifest_json(self) -> dict[str, Any]:
        path = self.path / MANIFEST
        if not path.exists():
            raise UserError(f"{self.path}: not a run directory (no {MANIFEST})")
        manifest = reader.read_json_object(path, "manifest")
        problem = manifest_problem(manifest)
        if problem:
            raise UserError(f"{path}: corrupt manifest ({problem})")
        return upgrade.manifest(path, manifest)

    def write_manifest(self, manifest: Manifest) -> None:
        write_json_atomic(self.path / MANIFEST, manifest.as_dict())

    def update_manifest(self, **fields: Any) -> Manifest:
        """Set later fields of the manifest; only names Manifest declares (the file keeps any other key
        it holds)."""
        unknown = sorted(set(fields) - set(MANIFEST_TYPES))
        if unknown:
            raise ValueError(f"not manifest fields (rssprobe.contract.manifest.Manifest): {', '.join(unknown)}")
        manifest = self._manifest_json()
        manifest.update(fields)
        write_json_atomic(self.path / MANIFEST, manifest)
        return Manifest.read(manifest)

    def ranks(self) -> list[int]:
        """The ranks that wrote events (one for a 1-rank run)."""
        out = [0] if (self.path / EVENTS).exists() else []
        out += sorted(r for p in self.path.glob(RANK_EVENTS_GLOB) if (r := rank_of_events(p.name)))
        return out

    def events(self, rank: int = 0) -> list[dict[str, Any]]:
        """All complete events of a rank; a torn last line (the worker died mid-write) is dropped,
        and so is a line that is not an event (read_events() names those)."""
        return self.read_events(rank).events

    def read_events(self, rank: int = 0) -> Events:
        return read_events(self.path / events_file(rank))

    def steps_problem(self, rank: int, events: Events) -> str | None:
        """Why a rank's steps.parquet does not hold its step events (unreadable, other steps); None when it
        does or is absent (the events are the record; a run ended elsewhere may not have the table yet)."""
        name = steps_file(rank)
        try:
            steps = read_step_numbers(self.path / name)
        except UserError as e:
            return str(e).replace(f"{self.path}/", "")
        return judgement.table_problem(name, steps, events)

    def incomplete(self, manifest: Manifest | None = None) -> dict[int, str]:
        """rank -> why its files do not back a manifest that says ok (empty: they do)."""
        return judgement.incomplete(manifest or self.manifest(), self.read_events, self.steps_problem)

    def judged(self, manifest: Manifest | None = None) -> tuple[str, str | None, dict[int, str]]:
        """(status, error, rank -> gap) as the files back it (store.judgement.judged)."""
        return judgement.judged(manifest or self.manifest(), self.read_events, self.steps_problem)

    def status(self) -> str:
        """The judged status; "missing" when the run is not there, "damaged" when its files cannot be read."""
        if not self.path.is_dir():
            return judgement.MISSING
        try:
            return self.judged()[0]
        except UserError:
            return judgement.DAMAGED

    def log_tail(self, lines: int = 20, name: str = WORKER_LOG) -> str:
        path = self.path / name
        if not path.exists():
            return ""
        try:
            return "\n".join(reader.read_text(path, errors="replace").splitlines()[-lines:])
        except UserError as e:
            return str(e)

    def wall_seconds(self) -> float | None:
        """From its manifest's start to its end; None for a run that has not ended (or cannot say)."""
        try:
            m = self.manifest()
            return (datetime.fromisoformat(m.ended or "") - datetime.fromisoformat(m.started)).total_seconds()
        except (KeyError, TypeError, ValueError, UserError):
            return None


@dataclass(frozen=True)
class GroupDir:
    """N runs of one configuration (rssprobe run --repeat N): group.json plus one run dir each."""

    path: Path

    @classmethod
    def create(cls, out: Path | None, scenario: str, label: str, repeat: int) -> GroupDir:
        run = RunDir.create(out, scenario, f"{label}-x{repeat}" if out is None else label, "run group directory")
        group = cls(run.path)
        write_json_atomic(group.path / GROUP, {FORMAT_KEY: FORMAT_VERSION, "id": group.id,
                                               "label": label, "scenario": scenario, "repeat": repeat,
                                               "started": now_iso()})
        return group

    @staticmethod
    def is_group(path: Path) -> bool:
        return (path / GROUP).is_file()

    def release(self) -> None:
        """This process is done writing the group (its claim ends; store/claim.py)."""
        claim.release(self.path)

    @property
    def id(self) -> str:
        return self.path.name

    def info(self) -> dict[str, Any]:
        path = self.path / GROUP
        return check_group(path, reader.read_json_object(path, "group file"))

    def member(self, i: int) -> Path:
        return self.path / layout.group_member(i)

    def repeat(self) -> int:
        """How many runs group.json says the group is of (bounded: a number from disk drives a loop)."""
        return self.info()["repeat"]

    def runs(self) -> list[RunDir]:
        """Every member: run-01 .. run-<repeat> whether or not it exists (a member deleted or never run is
        still a member: "missing"), and any other directory of the group with a manifest, in order."""
        names = {layout.group_member(i) for i in range(1, self.repeat() + 1)}
        names |= {p.name for p in self.path.iterdir() if p.is_dir() and ((p / MANIFEST).exists()
                                                                          or layout.is_group_member(p.name))}
        return [RunDir(self.path / name) for name in sorted(names)]

    def present(self) -> list[RunDir]:
        """The members whose directory exists (a missing one has nothing to read)."""
        return [run for run in self.runs() if run.path.is_dir()]

    def readable(self) -> bool:
        """A group whose group.json can be read and that has a member to read (a campaign's table shows it)."""
        try:
            return bool(self.present())
        except UserError:
            return False

    def statuses(self) -> list[str]:
        """Each run's status as its files back it (the one judgement): never ok for an incomplete run, "missing"
        for a member not there, "damaged" for one whose files cannot be read."""
        return [run.status() for run in self.runs()] if self.is_group(self.path) else []

    def finished(self, repeat: int) -> bool:
        """Every one of `repeat` runs ended (ok, failed or timeout) as its files back it: a campaign reuses it (a
        damaged group.json: not finished, run again)."""
        try:
            statuses = self.statuses()
        except UserError:
            return False
        return len(statuses) == repeat and all(s in judgement.ENDED for s in statuses)


def find_entries(root: Path | None = None) -> list[RunDir | GroupDir]:
    """Top-level runs and groups under the runs root, oldest first."""
    root = root or runs_root()
    if not root.is_dir():
        return []
    entries: list[RunDir | GroupDir] = []
    for p in root.iterdir():
        if (p / GROUP).is_file():
            entries.append(GroupDir(p))
        elif (p / MANIFEST).is_file():
            entries.append(RunDir(p))
    return _by_start(entries)


def _by_start(entries: list[RunDir | GroupDir]) -> list[RunDir | GroupDir]:
    """Oldest first, by the start their manifest (or group file) records; a damaged one is left out."""
    def started(e: RunDir | GroupDir) -> str | None:
        try:
            return str((e.manifest().started if isinstance(e, RunDir) else e.info().get("started")) or "")
        except UserError:
            return None  # a damaged entry is not the latest of anything; showing it names the damage

    keyed = [(s, e) for e in entries if (s := started(e)) is not None]
    return [e for _s, e in sorted(keyed, key=lambda se: (se[0], se[1].id))]


# in the cache root: the last run or group `rssprobe run` made, wherever --out put it, and the runs root it had
# (`latest` under another runs root, RSSPROBE_RUNS, does not see it)
LATEST = "latest.json"


def note_latest(path: Path) -> None:
    """Remember `path` (a run or group directory) as the latest, for `show latest`; best effort."""
    try:
        root = layout.cache_root()
        root.mkdir(parents=True, exist_ok=True)
        write_json_atomic(root / LATEST, {FORMAT_KEY: FORMAT_VERSION,
                                          "path": str(path.resolve()), "runs_root": str(runs_root().resolve())})
    except (OSError, UserError):
        pass  # a cache root that cannot be written costs `show latest` only this run


def _noted_latest() -> RunDir | GroupDir | None:
    """The run or group `note_latest` recorded, if it is still there (a damaged record is none)."""
    try:
        path = layout.cache_root() / LATEST
        if not path.exists():
            return None
        record = reader.read_json_object(path, "latest-run record")
        noted = record.get("path")
        if not isinstance(noted, str) or record.get("runs_root") != str(runs_root().resolve()):
            return None
    except UserError:
        return None
    found = Path(noted)
    return GroupDir(found) if (found / GROUP).is_file() else RunDir(found) if (found / MANIFEST).is_file() else None


def resolve_entry(ref: str) -> RunDir | GroupDir:
    """A run or a run group by path, by id under the runs root, or 'latest' (the newest under the runs root, or
    the last one `rssprobe run` made with --out, whichever started last)."""
    if ref == "latest":
        entries = find_entries()
        noted = _noted_latest()
        if noted is not None and noted.path.resolve() not in {e.path.resolve() for e in entries}:
            entries = _by_start([*entries, noted])
        if not entries:
            raise UserError(f"latest: no runs under {runs_root()}, and no run made with --out is recorded")
        outputs.note(entries[-1].path)
        return entries[-1]
    for candidate in (Path(ref), runs_root() / ref):
        if (candidate / GROUP).is_file():
            outputs.note(candidate)  # an input: nothing this command writes may land in it
            return GroupDir(candidate)
        if (candidate / MANIFEST).is_file():
            outputs.note(candidate)
            return RunDir(candidate)
    raise UserError(f"{ref}: no such run or group (not a run directory, not an id under {runs_root()}, "
                    "not 'latest')")


def resolve_runs(ref: str) -> tuple[str, list[RunDir]]:
    """(name, member runs) of a run (one member) or a group."""
    entry = resolve_entry(ref)
    if isinstance(entry, GroupDir):
        runs = entry.runs()
        if not entry.present():
            raise UserError(f"{ref}: run group has no runs (none of its {len(runs)} members is there)")
        return entry.id, runs
    return entry.id, [entry]
