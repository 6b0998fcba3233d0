"""THE campaign engine: a directory of run groups that a command fills, resumes and shards.

Matrix, plan, scale and bisect are campaigns. Each has

* a directory, by default under its root with the one default-name hash of its definition (default_dir);
* a definition: what makes two commands the same campaign. Rerunning the same command resumes; a
  different one into the same directory is refused (one line), and so is a directory that is not a
  campaign of this kind; --fresh starts over, removing only a campaign directory of this kind;
* an index (store/campaign.py: matrix.json, scale.json, definition.json) with one entry per group;
* ensure(group): a group whose runs all ended (ok, failed or timeout, as their files back it: the one
  judgement, store.judgement) is reused; anything else is removed and run again whole (an unfinished
  group proves nothing). --retry-failed runs a finished group again unless every run was ok.

A shard (`--shard K/N`) runs only its share of the groups: the campaign's groups, in the definition's
order, cut into N contiguous blocks of (nearly) equal size, block K its own. The assignment depends on
the definition only, never on what has run, so N machines given K = 1..N run every group exactly once
(contiguous blocks keep a matrix's cells of one environment together: each machine builds fewer). The
shard is not part of the definition: shards of one campaign merge (campaign/merge.py).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..contract.status import Status
from ..errors import UserError
from ..log import say
from ..run import group as run_groups
from ..run.launch import RunRequest
from ..run.progress import CampaignProgress
from ..store import campaign as index_file
from ..store import claim, layout, outputs
from ..store.judgement import ENDED
from ..store.rundir import GroupDir
from ..store.writer import now_iso

OTHER_SHARD = "other shard"  # an index entry's status when another shard runs it
_COUNT = re.compile(r"[0-9]{1,9}")  # K or N of a shard: ASCII digits (str.isdigit() takes '²', int() refuses it)


@dataclass(frozen=True)
class Shard:
    k: int
    n: int

    @classmethod
    def parse(cls, text: str | None) -> Shard | None:
        """'2/3' -> Shard(2, 3); None for no shard; UserError for anything that is not K/N with 1 <= K <= N."""
        if text is None:
            return None
        k, sep, n = text.partition("/")
        if not (sep and _COUNT.fullmatch(k.strip()) and _COUNT.fullmatch(n.strip())) or not 1 <= int(k) <= int(n):
            raise UserError(f"--shard {text}: expected K/N with 1 <= K <= N (this machine runs the K-th of N shares)")
        return cls(int(k), int(n))

    def owner(self, i: int, total: int) -> int:
        """The shard (1..N) that runs group i (0-based) of `total`: contiguous blocks of near-equal size."""
        return i * self.n // max(total, 1) + 1

    def owns(self, i: int, total: int) -> bool:
        return self.owner(i, total) == self.k

    def __str__(self) -> str:
        return f"{self.k}/{self.n}"


def default_dir(root: Path, name: str, definition: dict[str, Any]) -> Path:
    """A campaign's directory when --out is not given: its name and a hash of its definition."""
    digest = hashlib.sha1(json.dumps(definition, sort_keys=True).encode()).hexdigest()[:8]
    return root / f"{layout.slug(name, layout.NAME_PART)}-{digest}"  # a long name stays a valid file name


def normal(definition: dict[str, Any]) -> Any:
    """A definition as JSON reads it back (tuples are lists), so a stored one compares equal."""
    return json.loads(json.dumps(definition, sort_keys=True))


def group_status(statuses: list[str]) -> str:
    """A group's word in an index: done (every run ok), interrupted, or failed."""
    if Status.INTERRUPTED in statuses:
        return Status.INTERRUPTED
    return Status.DONE if statuses and set(statuses) == {Status.OK} else Status.FAILED


@dataclass
class Ensured:
    """What ensure() did for one group: its runs' judged statuses, and whether it was reused as it was."""

    key: str
    statuses: list[str]
    reused: bool
    interrupted: bool = False  # Ctrl-C (or SIGTERM) stopped it, perhaps before a run had a manifest

    @property
    def status(self) -> str:
        return Status.INTERRUPTED if self.interrupted else group_status(self.statuses)


# runs one group into its (absent) directory; returns the runs' statuses
RunGroup = Callable[[Path], list[str]]


# runs one cell's group: (its request, its repeat, what the progress says) -> the runs' statuses
GroupRunner = Callable[[RunRequest, int, str], list[str]]


@dataclass
class Cell:
    """One group a campaign's cell loop runs: its index key, its runs, what the progress says while it runs,
    and how it starts: its group directory -> the run request, and the index fields recorded as it starts (the
    environment built for it, its Python). A UserError from `start` (an environment that cannot be built) fails
    this cell only. `finish`: index fields recorded once its group ended (a script sweep's measured size)."""

    key: str
    repeat: int
    text: str
    start: Callable[[Path], tuple[RunRequest, dict[str, Any]]]
    finish: Callable[[Path], dict[str, Any]] | None = None


class Campaign:
    """An open campaign directory: its kind, definition, index, and its shard of the groups."""

    def __init__(self, directory: Path, kind: str, index: dict[str, Any], shard: Shard | None = None) -> None:
        self.directory, self.kind, self.index, self.shard = directory, kind, index, shard

    @classmethod
    def open(cls, directory: Path, kind: str, definition: dict[str, Any], fresh: bool = False,
             shard: Shard | None = None) -> Campaign:
        """Claim `directory` for this campaign (store/claim.py: one command at a time, a second refused with the
        holder named), then resume the same campaign, or refuse another (one line)."""
        claim.claim(directory, f"{kind} directory")
        try:
            index = cls._resumed(directory, kind, definition, fresh)
        except UserError:
            claim.release(directory)
            raise
        if index is None:
            index = {"kind": kind, "definition": normal(definition), "created": now_iso()}
        index.pop("shard", None)
        if shard is not None:
            index["shard"] = str(shard)
        return cls(directory, kind, index, shard)

    @staticmethod
    def _resumed(directory: Path, kind: str, definition: dict[str, Any], fresh: bool) -> dict[str, Any] | None:
        """The index of the same campaign found in `directory` (None: a new one; --fresh empties it first)."""
        found = index_file.kind_of(directory)
        if found is None:
            if [p for p in claim.contents(directory) if not outputs.kept(p)]:  # the command's own inputs may be there
                raise UserError(f"{directory}: exists, is not empty and is not a {kind} directory; give another --out")
            return None
        index = index_file.read_index(directory, kind)
        if fresh:
            claim.clear(directory)
            return None
        if normal(index.get("definition") or {}) != normal(definition):
            raise UserError(f"{directory}: made by a different {kind} command; give another --out, or --fresh")
        return index

    @classmethod
    def read(cls, directory: Path, kind: str | None = None) -> Campaign:
        """A campaign directory as it stands, to show or merge (nothing is checked against a command)."""
        index = index_file.read_index(directory, kind)
        try:
            shard = Shard.parse(str(index["shard"])) if index.get("shard") else None
        except UserError as e:  # a shard from disk: the index is damaged
            raise UserError(f"{directory}: damaged {index['kind']} index (its shard: {e})") from None
        return cls(directory, index["kind"], index, shard)

    @property
    def definition(self) -> dict[str, Any]:
        return self.index.get("definition") or {}

    def save(self) -> None:
        index_file.write_index(self.directory, self.index)

    # ---- entries: one per group, in the definition's order -------------------------------------------------
    def set_entries(self, fresh: list[dict[str, Any]], positions: list[int] | None = None,
                    total: int | None = None) -> None:
        """The index's entries: these, each with the state a previous invocation stored for it (by its key),
        and, sharded, the shard that owns it. `positions` (of `total`): where each entry stands in the whole
        campaign's order, when `fresh` is a selection of it (a plan without its optional values)."""
        name, key = index_file.members_key(self.kind)
        stored = {e[key]: e for e in self.index.get(name, [])}
        places = positions if positions is not None else list(range(len(fresh)))
        entries = []
        for place, entry in zip(places, fresh, strict=True):
            state = {**entry, **stored.get(entry[key], {})}
            state.pop("shard", None)
            if self.shard is not None:
                state["shard"] = self.shard.owner(place, total or len(fresh))
                if state.get("status") in (None, Status.PENDING, OTHER_SHARD) and state["shard"] != self.shard.k:
                    state["status"] = OTHER_SHARD
            elif state.get("status") == OTHER_SHARD:
                state["status"] = Status.PENDING
            entries.append(state)
        self.index[name] = entries

    def entries(self) -> list[dict[str, Any]]:
        return index_file.entries(self.index)

    def add_entry(self, key: str) -> None:
        """An entry for the group `key` unless it has one (a bisect's rounds are known only as it goes)."""
        name, field = index_file.members_key(self.kind)
        entries = self.index.setdefault(name, [])
        if not any(e[field] == key for e in entries):
            entries.append({field: key, "status": Status.PENDING})

    def entry(self, key: str) -> dict[str, Any]:
        name, field = index_file.members_key(self.kind)
        return next(e for e in self.index[name] if e[field] == key)

    def update(self, key: str, **fields: Any) -> None:
        self.entry(key).update(fields)
        self.save()

    def owns(self, key: str) -> bool:
        """Whether this invocation runs the group `key` (every group, unsharded)."""
        return self.shard is None or self.entry(key).get("shard") == self.shard.k

    # ---- groups -------------------------------------------------------------------------------------------
    def ensure(self, key: str, repeat: int, run: RunGroup, retry_failed: bool = False) -> Ensured:
        """Reuse the group `key` if its runs all ended, else remove it and run it whole."""
        group = self.directory / key
        if finished(group, repeat):
            statuses = GroupDir(group).statuses()
            if not (retry_failed and set(statuses) != {Status.OK}):
                return Ensured(key, statuses, reused=True)
        if group.exists():
            shutil.rmtree(group)  # an unfinished group proves nothing: run it whole again
        ran = run(group)
        judged = GroupDir(group).statuses() if GroupDir.is_group(group) else list(ran)
        return Ensured(key, judged, reused=False, interrupted=Status.INTERRUPTED in ran or Status.INTERRUPTED in judged)


    def run_cells(self, cells: list[Cell], title: str, retry_failed: bool = False,
                  run_group: GroupRunner | None = None, say: Callable[[str], None] = say) -> bool:
        """THE cell loop of matrix, plan, scale and bisect's rounds: each cell of this shard reused when finished (with
        --retry-failed, run again unless every run was ok), else run whole, its status and statuses kept in the
        index as it goes; one progress bar over the runs with the time left. `run_group` runs one cell's group
        (default: run/group.py's, the runs' own progress beneath the campaign's). True if interrupted (Ctrl-C)."""
        mine = [cell for cell in cells if self.owns(cell.key)]
        total = sum(cell.repeat for cell in mine)
        name = f"{title} {self.directory.name}"
        bar = CampaignProgress(total, name + (f" (shard {self.shard})" if self.shard else ""))
        seconds: list[float] = []
        done = skipped = 0
        for cell in mine:
            started = time.monotonic()

            def run(group_dir: Path, cell: Cell = cell, done: int = done, seconds: list[float] = seconds
                    ) -> list[str]:
                bar.show(done, cell.text, seconds)
                req, fields = cell.start(group_dir)
                self.update(cell.key, status=Status.RUNNING, group=str(group_dir), error=None, **fields)
                return (run_group or _run_group)(req, cell.repeat, cell.text)

            try:
                got = self.ensure(cell.key, cell.repeat, run, retry_failed)
            except UserError as e:
                say(f"cell {cell.key} failed: {e}")
                self.update(cell.key, status=Status.FAILED, error=str(e), wall_s=time.monotonic() - started)
                done += cell.repeat
                continue
            seconds += run_seconds(self.directory / cell.key)
            done += cell.repeat
            ended = cell.finish(self.directory / cell.key) if cell.finish else {}
            if got.reused:
                skipped += 1
                say(f"{name}: {cell.text} already finished, reused")
                self.update(cell.key, status=got.status, statuses=got.statuses, **ended)
                continue
            self.update(cell.key, status=got.status, statuses=got.statuses, wall_s=time.monotonic() - started,
                        error=None if got.status == Status.DONE else
                        f"runs ended {', '.join(got.statuses) or 'before a run'}", **ended)
            if got.status == Status.INTERRUPTED:
                return True
        bar.show(total, "finished" + (f" ({skipped} finished cells skipped)" if skipped else ""), seconds)
        return False


def run_seconds(group_dir: Path) -> list[float]:
    """Wall time of each ended run of a group, from its manifest's start and end."""
    if not GroupDir.is_group(group_dir):
        return []
    return [s for run in GroupDir(group_dir).runs() if (s := run.wall_seconds()) is not None]


def run_group(req: RunRequest, repeat: int) -> list[str]:
    """One group of `repeat` fresh runs into req.out; its runs' statuses. (The seam tests replace with
    synthetic groups.)"""
    return run_groups.run_group(req, repeat)[1]


def _run_group(req: RunRequest, repeat: int, _text: str) -> list[str]:
    return run_group(req, repeat)  # looked up when called: the seam above, or what a test put there


def finished(group: Path, repeat: int) -> bool:
    """Every one of `repeat` runs of the group reached a final status its files back (a campaign reuses it)."""
    return GroupDir(group).finished(repeat)


__all__ = ["ENDED", "OTHER_SHARD", "Campaign", "Cell", "Ensured", "GroupRunner", "RunGroup", "Shard", "default_dir",
           "finished", "group_status", "normal", "run_group", "run_seconds"]
