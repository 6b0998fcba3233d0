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

from ..contract.files import FORMAT_KEY, FORMAT_VERSION
from ..errors import UserError
from . import layout, reader, upgrade
from .writer import now_iso, write_json_atomic

KINDS = ("matrix", "plan", "scale", "bisect")
INDEX = {"matrix": layout.MATRIX_INDEX, "plan": layout.MATRIX_INDEX, "scale": layout.SCALE_INDEX,
         "bisect": layout.BISECT_DEFINITION}
# list key, entry key
ENTRIES = {"matrix": ("cells", "id"), "plan": ("cells", "id"), "scale": ("groups", "dir"), "bisect": ("rounds", "id")}


def kind_of(directory: Path) -> str | None:
    """The kind of campaign a directory holds, from which index lies in it (None: not a campaign)."""
    if (directory / layout.MATRIX_INDEX).is_file():
        return "plan" if (directory / layout.PLAN_FILE).is_file() else "matrix"
    if (directory / layout.SCALE_INDEX).is_file():
        return "scale"
    if (directory / layout.BISECT_DEFINITION).is_file():
        return "bisect"
    return None


def _inside(name: Any) -> bool:
    """A group's directory name that stays inside the campaign directory."""
    return isinstance(name, str) and bool(name) and not PurePath(name).is_absolute() and ".." not in PurePath(
        name).parts


def _check(path: Path, data: dict[str, Any], kind: str) -> None:
    def damaged(why: str) -> UserError:
        return UserError(f"{path}: damaged ({why})")

    if kind == "scale":
        members = data.get("groups")
        if not isinstance(members, list) or not all(isinstance(g, dict) and isinstance(g.get("params"), int)
                                                    and isinstance(g.get("dir"), str) for g in members):
            raise damaged("no list of groups with params and dir")
        for g in members:
            if not _inside(g["dir"]):
                raise damaged(f"group dir {g['dir']!r} is outside the scale directory")
        repeat = data.get("repeat", 1)
        if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
            raise damaged(f"repeat {repeat!r} is not a count of runs")
    elif kind in ("matrix", "plan"):
        cells = data.get("cells")
        if not isinstance(cells, list) or not all(isinstance(c, dict) and _inside(c.get("id"))
                                                  and isinstance(c.get("status"), str) for c in cells):
            raise damaged("no list of cells with id and status")
    if "definition" in data and not isinstance(data["definition"], dict):
        raise damaged("definition is not an object")


def read_index(directory: Path, kind: str | None = None) -> dict[str, Any]:
    """The index of the campaign in `directory` (of `kind`, or whichever it is); UserError when there is none,
    it is damaged, or it is another kind's."""
    found = kind_of(directory)
    if found is None:
        raise UserError(f"{directory}: not a {kind or 'campaign'} directory (no "
                        f"{INDEX[kind] if kind else ', '.join(sorted(set(INDEX.values())))})")
    if kind is not None and found != kind and {found, kind} != {"matrix", "plan"}:
        raise UserError(f"{directory}: a {found} directory, not a {kind} directory")
    path = directory / INDEX[found]
    data = upgrade.index(path, reader.read_json_object(path, f"{found} index", "damaged"), found)
    if kind is not None and data.get("kind", found) != kind:
        raise UserError(f"{directory}: a {data.get('kind')} directory, not a {kind} directory")
    _check(path, data, data.get("kind", found))
    return data


def write_index(directory: Path, data: dict[str, Any]) -> None:
    """Write the index whole (format version and update time stamped here)."""
    directory.mkdir(parents=True, exist_ok=True)
    stamped = {FORMAT_KEY: FORMAT_VERSION, **{k: v for k, v in data.items()
                                                                 if k not in (FORMAT_KEY, "updated")},
               "updated": now_iso()}
    write_json_atomic(directory / INDEX[data["kind"]], stamped)


def entries(index: dict[str, Any]) -> list[dict[str, Any]]:
    """The index's group entries (cells, size groups or a bisect's rounds) in their order."""
    key = ENTRIES.get(index["kind"])
    return list(index.get(key[0], [])) if key else []


def entry_dir(index: dict[str, Any], entry: dict[str, Any]) -> str:
    """The directory name (under the campaign directory) of an entry's run group."""
    return entry[ENTRIES[index["kind"]][1]]
