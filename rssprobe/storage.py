"""Run and run-group directories on disk: reading and writing them, finding them by reference.

What a run or group directory holds, file by file, is in rssprobe.layout. Everything a
report shows is derived from those files, never kept only in memory.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import layout, rundata
from .errors import UserError
from .layout import EVENTS, GROUP, MANIFEST, NATIVE, STEPS, WORKER_LOG, WORKER_SPEC, runs_root, steps_file

__all__ = ["EVENTS", "GROUP", "MANIFEST", "NATIVE", "STEPS", "WORKER_LOG", "WORKER_SPEC", "GroupDir", "RunDir",
           "find_entries", "now_iso", "resolve_entry", "resolve_runs", "runs_root", "steps_file", "write_json_atomic"]


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


@dataclass(frozen=True)
class RunDir:
    path: Path

    @classmethod
    def create(cls, out: Path | None, scenario: str, label: str) -> RunDir:
        if out is None:
            stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
            out = runs_root() / f"{stamp}-{layout.slug(scenario)}-{label}"
        if out.exists() and not out.is_dir():
            raise UserError(f"{out}: exists and is not a directory")
        if out.exists() and any(out.iterdir()):
            raise UserError(f"{out}: output directory exists and is not empty")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"{out}: cannot create the output directory ({e.strerror or e})") from None
        return cls(out)

    @property
    def id(self) -> str:
        return self.path.name

    def manifest(self) -> dict[str, Any]:
        path = self.path / MANIFEST
        if not path.exists():
            raise UserError(f"{self.path}: not a run directory (no {MANIFEST})")
        return rundata.check_manifest(path, rundata.read_json_object(path, "manifest"))

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        write_json_atomic(self.path / MANIFEST, manifest)

    def update_manifest(self, **fields: Any) -> dict[str, Any]:
        manifest = self.manifest()
        manifest.update(fields)
        self.write_manifest(manifest)
        return manifest

    def ranks(self) -> list[int]:
        """The ranks that wrote events (one for a 1-rank run)."""
        out = [0] if (self.path / EVENTS).exists() else []
        out += sorted(layout.rank_of_events(p.name) for p in self.path.glob(layout.RANK_EVENTS_GLOB))
        return out

    def events(self, rank: int = 0) -> list[dict[str, Any]]:
        """All complete events of a rank; a torn last line (the worker died mid-write) is dropped,
        and so is a line that is not an event (read_events() names those)."""
        return self.read_events(rank).events

    def read_events(self, rank: int = 0) -> rundata.Events:
        return rundata.read_events(self.path / layout.events_file(rank))

    def incomplete(self, manifest: dict[str, Any] | None = None) -> dict[int, str]:
        """rank -> why its events do not back a manifest that says ok (empty: they do)."""
        return rundata.incomplete(manifest or self.manifest(), self.read_events)

    def judged(self, manifest: dict[str, Any] | None = None) -> tuple[str, str | None, dict[int, str]]:
        """(status, error, rank -> gap) as the files back it (rundata.judged)."""
        return rundata.judged(manifest or self.manifest(), self.read_events)

    def log_tail(self, lines: int = 20) -> str:
        path = self.path / WORKER_LOG
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@dataclass(frozen=True)
class GroupDir:
    """N runs of one configuration (rssprobe run --repeat N): group.json plus one run dir each."""

    path: Path

    @classmethod
    def create(cls, out: Path | None, scenario: str, label: str, repeat: int) -> GroupDir:
        run = RunDir.create(out, scenario, f"{label}-x{repeat}" if out is None else label)
        group = cls(run.path)
        write_json_atomic(group.path / GROUP, {"id": group.id, "label": label, "scenario": scenario,
                                               "repeat": repeat, "started": now_iso()})
        return group

    @property
    def id(self) -> str:
        return self.path.name

    def info(self) -> dict[str, Any]:
        path = self.path / GROUP
        return rundata.check_group(path, rundata.read_json_object(path, "group file"))

    def manifest(self) -> dict[str, Any]:  # for sorting alongside runs
        return self.info()

    def member(self, i: int) -> Path:
        return self.path / layout.group_member(i)

    def runs(self) -> list[RunDir]:
        return sorted((RunDir(p) for p in self.path.iterdir() if (p / MANIFEST).is_file()), key=lambda r: r.id)


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
    def started(e: RunDir | GroupDir) -> str | None:
        try:
            return str(e.manifest().get("started", ""))
        except UserError:
            return None  # a damaged entry is not the latest of anything; showing it names the damage

    keyed = [(s, e) for e in entries if (s := started(e)) is not None]
    return [e for _s, e in sorted(keyed, key=lambda se: (se[0], se[1].id))]


def resolve_entry(ref: str) -> RunDir | GroupDir:
    """A run or a run group by path, by id under the runs root, or 'latest'."""
    if ref == "latest":
        entries = find_entries()
        if not entries:
            raise UserError(f"latest: no runs under {runs_root()}")
        return entries[-1]
    for candidate in (Path(ref), runs_root() / ref):
        if (candidate / GROUP).is_file():
            return GroupDir(candidate)
        if (candidate / MANIFEST).is_file():
            return RunDir(candidate)
    raise UserError(f"{ref}: no such run or group (not a run directory, not an id under {runs_root()}, "
                    "not 'latest')")


def resolve_runs(ref: str) -> tuple[str, list[RunDir]]:
    """(name, member runs) of a run (one member) or a group."""
    entry = resolve_entry(ref)
    if isinstance(entry, GroupDir):
        runs = entry.runs()
        if not runs:
            raise UserError(f"{ref}: run group has no runs")
        return entry.id, runs
    return entry.id, [entry]
