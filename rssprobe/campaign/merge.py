"""`rssprobe merge DIR... --out DIR`: the shards of one campaign joined into one campaign directory.

Each shard (`--shard K/N` of a matrix, a plan or a size sweep) ran its share of the groups into its own
directory. The merge copies every group a shard holds into --out and writes one index, so that show,
diff, report and the verdict report read the result as if it had run on one machine. It refuses (one line,
exit 2) shards of different campaigns (their definitions differ), a group two shards hold with different
runs, a damaged index, and an --out that exists and is not empty; it never writes into its inputs.
A group no shard holds is named, and stays to run (rerunning the campaign's command into --out runs it).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import kinds
from ..analysis import results
from ..contract.files import FORMAT_KEY, FORMAT_VERSION
from ..contract.status import Status
from ..errors import UserError
from ..store import campaign as index_file
from ..store import claim, outputs, reader
from ..store.rundir import GroupDir
from ..store.writer import now_iso, write_bytes_atomic, write_json_atomic
from .engine import OTHER_SHARD, Campaign, normal


@dataclass
class Merged:
    out: Path
    kind: str
    taken: dict[str, str] = field(default_factory=dict)  # group -> the input it came from
    missing: list[str] = field(default_factory=list)  # groups no input holds

    def as_dict(self) -> results.Merged:
        return {"out": str(self.out), "kind": self.kind, "taken": self.taken, "missing": self.missing}


def _digest(root: Path) -> dict[str, str]:
    """Every file of a group (relative path -> sha256): two copies of one group are the same bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(reader.read_bytes(p)).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink() and p.name != claim.CLAIM}


def _holds(c: Campaign, entry: dict[str, Any]) -> bool:
    """Whether this shard ran the entry's group (a finished or failed group, not another shard's)."""
    group = c.directory / index_file.entry_dir(c.index, entry)
    return GroupDir.is_group(group) and entry.get("status") not in (Status.PENDING, Status.RUNNING, OTHER_SHARD)


def _check_out(out: Path, inputs: list[Path]) -> None:
    for d in inputs:
        outputs.note(d)  # the shards: nothing merge writes lands in them (store/outputs.py)
    if os.path.lexists(out) and (not os.path.isdir(out) or claim.contents(out)):
        raise UserError(f"{out}: exists and is not empty; merge writes a new directory (give another --out)")
    for d in inputs:
        a, b = d.resolve(), out.resolve()
        if a == b or a in b.parents or b in a.parents:
            raise UserError(f"{out}: overlaps the input {d}; merge never writes into its inputs")


def _copyable(group: Path) -> None:
    """UserError, one line, unless every entry of a group to copy is a directory, a regular file or a link (a
    FIFO would block the copy, a device would be read without end): checked for every group before --out is
    written."""
    for top, dirs, files in os.walk(group, onerror=lambda e: _unreadable(group, e)):
        for name in [*dirs, *files]:
            if name == claim.CLAIM:  # never copied
                continue
            path = Path(top) / name
            try:
                mode = os.lstat(path).st_mode
            except OSError as e:
                raise UserError(f"{path}: cannot be read ({e.strerror or e})") from None
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                raise UserError(f"{path}: is {outputs.kind(mode)}, not a file; merge copies files only (nothing "
                                "was written)")


def _unreadable(group: Path, e: OSError) -> None:
    raise UserError(f"{group}: cannot be read ({e.strerror or e})")


def _write(out: Path, sources: dict[str, tuple[Campaign, dict[str, Any]]], index: dict[str, Any],
           marker_file: Path | None) -> None:
    """Every taken group copied into --out and the index written; on any failure --out is emptied again (a
    second merge then finds it as the first one did), and the reason is one line."""
    try:
        for key, (c, _state) in sources.items():
            shutil.copytree(c.directory / key, out / key, symlinks=True, ignore=shutil.ignore_patterns(claim.CLAIM))
        marker = kinds.campaign_kind(index["kind"]).marker  # what tells its kind from another with its index
        if marker_file is not None:  # a plan's plan.json: the plan it ran
            write_bytes_atomic(out / marker_file.name, reader.read_bytes(marker_file))
        elif marker is not None:
            write_json_atomic(out / marker, {FORMAT_KEY: FORMAT_VERSION})
        index_file.write_index(out, index)
    except (OSError, shutil.Error, UserError) as e:
        claim.clear(out)
        why = e if isinstance(e, UserError) else (e.strerror if isinstance(e, OSError) and e.strerror else e)
        raise UserError(f"{out}: merge could not write it ({why}); nothing was left there") from None


def merge(inputs: list[Path], out: Path) -> Merged:
    """Join the shards `inputs` into `out` (see the module's doc)."""
    if not inputs:
        raise UserError("merge: name the shards' directories (rssprobe merge DIR... --out DIR)")
    _check_out(out, inputs)
    shards = [Campaign.read(d) for d in inputs]
    first = shards[0]
    mergeable = kinds.mergeable()
    if first.kind not in mergeable:
        raise UserError(f"{first.directory}: a {first.kind} directory; merge joins "
                        f"{', '.join(mergeable[:-1])} and {mergeable[-1]} shards")
    for c in shards[1:]:
        if c.kind != first.kind:
            raise UserError(f"{c.directory}: a {c.kind} directory, {first.directory} a {first.kind} one; merge joins "
                            "shards of one campaign")
        if normal(c.definition) != normal(first.definition):
            keys = sorted(k for k in {*c.definition, *first.definition}
                          if c.definition.get(k) != first.definition.get(k))
            raise UserError(f"{c.directory}: a different campaign from {first.directory} (definitions differ in "
                            f"{', '.join(keys) or 'their values'}); merge joins shards of one campaign")
    result = Merged(out, first.kind)
    sources: dict[str, tuple[Campaign, dict[str, Any]]] = {}
    for c in shards:
        for entry in c.entries():
            key = index_file.entry_dir(c.index, entry)
            if not _holds(c, entry):
                continue
            if key in sources:
                other = sources[key][0]
                if _digest(other.directory / key) != _digest(c.directory / key):
                    raise UserError(f"{key}: in both {other.directory} and {c.directory}, with different runs; "
                                    "merge takes each group from one shard (merge shards K/N, each once)")
                continue
            sources[key] = (c, entry)
    for key, (c, _entry) in sources.items():  # everything checked before anything is written
        _copyable(c.directory / key)
    claim.claim(out, "merge directory")
    if claim.contents(out):  # written meanwhile by another command
        claim.release(out)
        raise UserError(f"{out}: exists and is not empty; merge writes a new directory (give another --out)")
    every: dict[str, dict[str, Any]] = {}  # each group of any shard's index, in the campaign's order
    for c in shards:
        for entry in c.entries():
            every.setdefault(index_file.entry_dir(c.index, entry), entry)
    entries = []
    for key, entry in every.items():
        if key in sources:
            c, state = sources[key]
            merged = {k: v for k, v in state.items() if k != "shard"}
            if "group" in merged:
                merged["group"] = str(out / key)
            result.taken[key] = str(c.directory)
        else:
            merged = {k: v for k, v in entry.items() if k not in ("shard", "statuses", "error", "group")}
            merged["status"] = Status.PENDING
            result.missing.append(key)
        entries.append(merged)
    index = {k: v for k, v in first.index.items() if k not in ("shard", FORMAT_KEY, "updated")}
    index[index_file.members_key(first.kind)[0]] = entries
    index.update(command=list(sys.argv), merged_from=[str(d) for d in inputs], merged=now_iso())
    marker = kinds.campaign_kind(first.kind).marker
    _write(out, sources, index, first.directory / marker
           if marker is not None and os.path.lexists(first.directory / marker) else None)
    return result
