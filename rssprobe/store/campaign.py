"""A campaign directory's index on disk: matrix.json (a matrix, or a plan with plan.json beside it),
scale.json (a size sweep), definition.json (a bisect). The one reader and writer of those files.

Every index holds its campaign's kind, its definition (what makes two commands the same campaign), the
command that last worked on it, and one entry per run group: `cells` (matrix, plan) keyed by the group's
directory name `id`, `groups` (scale) keyed by `dir`, `rounds` (bisect, added as its search runs them) keyed by
`id` (an older bisect's index has none until its next round). A damaged index is one line
naming the file and the damage (exit 2), before anything runs.
"""

from __future__ import annotations

from pathlib import Path, PurePath
from typing import Any

from .. import kinds
from ..contract.files import FORMAT_KEY, FORMAT_VERSION
from ..errors import UserError
from . import reader, upgrade
from .writer import now_iso, write_json_atomic


def kind_of(directory: Path) -> str | None:
    """The kind of campaign a directory holds, from which index lies in it, and beside it the marker that tells
    two kinds with one index apart (None: not a campaign)."""
    found = [k for k in kinds.CAMPAIGNS if (directory / k.index).is_file()
             and (k.marker is None or (directory / k.marker).is_file())]
    found.sort(key=lambda k: k.marker is None)  # a marker that is there decides
    return found[0].name if found else None


def _inside(name: Any) -> bool:
    """A group's directory name that stays inside the campaign directory."""
    return isinstance(name, str) and bool(name) and not PurePath(name).is_absolute() and ".." not in PurePath(
        name).parts


def _check(path: Path, data: dict[str, Any], kind: kinds.CampaignKind) -> None:
    def damaged(why: str) -> UserError:
        return UserError(f"{path}: damaged ({why})")

    if kind.member_fields:
        members = data.get(kind.members)
        if not isinstance(members, list) or not all(
                isinstance(m, dict) and all(isinstance(m.get(key), typ) and not (typ is int and isinstance(
                    m.get(key), bool)) for key, typ in kind.member_fields) for m in members):
            raise damaged(f"no list of {kind.members} with {' and '.join(key for key, _t in kind.member_fields)}")
        for m in members:
            if not _inside(m[kind.member_dir]):
                raise damaged(f"group {kind.member_dir} {m[kind.member_dir]!r} is outside the {kind.name} directory")
    for key in kind.counts:
        count = data.get(key, 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise damaged(f"{key} {count!r} is not a count of runs")
    if "definition" in data and not isinstance(data["definition"], dict):
        raise damaged("definition is not an object")


def read_index(directory: Path, kind: str | None = None) -> dict[str, Any]:
    """The index of the campaign in `directory` (of `kind`, or whichever it is); UserError when there is none,
    it is damaged, or it is another kind's."""
    found = kind_of(directory)
    wanted = kinds.campaign(kind)
    if found is None:
        raise UserError(f"{directory}: not a {kind or 'campaign'} directory (no "
                        f"{wanted.index if wanted else ', '.join(sorted({k.index for k in kinds.CAMPAIGNS}))})")
    index_name = kinds.campaign_kind(found).index
    if wanted is not None and found != kind and wanted.index != index_name:  # one index, two kinds: its kind says
        raise UserError(f"{directory}: a {found} directory, not a {kind} directory")
    path = directory / index_name
    data = upgrade.index(path, reader.read_json_object(path, f"{found} index", "damaged"), found)
    if kind is not None and data.get("kind", found) != kind:
        raise UserError(f"{directory}: a {data.get('kind')} directory, not a {kind} directory")
    stated = data.get("kind", found)
    if not isinstance(stated, str) or stated not in kinds.CAMPAIGN_NAMES:
        raise UserError(f"{path}: damaged (kind {str(stated)[:40]!r} is no campaign kind)")
    _check(path, data, kinds.campaign_kind(stated))
    return data


def write_index(directory: Path, data: dict[str, Any]) -> None:
    """Write the index whole (format version and update time stamped here)."""
    directory.mkdir(parents=True, exist_ok=True)
    stamped = {FORMAT_KEY: FORMAT_VERSION, **{k: v for k, v in data.items()
                                                                 if k not in (FORMAT_KEY, "updated")},
               "updated": now_iso()}
    write_json_atomic(directory / kinds.campaign_kind(data["kind"]).index, stamped)


def entries(index: dict[str, Any]) -> list[dict[str, Any]]:
    """The index's group entries (cells, size groups or a bisect's rounds) in their order."""
    name = index.get("kind")
    return list(index.get(kinds.campaign_kind(name).members, [])) if name in kinds.CAMPAIGN_NAMES else []


def entry_dir(index: dict[str, Any], entry: dict[str, Any]) -> str:
    """The directory name (under the campaign directory) of an entry's run group."""
    return entry[kinds.campaign_kind(index["kind"]).member_dir]


def members_key(kind: str) -> tuple[str, str]:
    """(the index's list of group entries, the key of an entry naming its group's directory) of a kind."""
    k = kinds.campaign_kind(kind)
    return k.members, k.member_dir

