"""docs/developing.md's layout names every module of rssprobe/ (issue 44): a new contributor reads where a thing
lives and where a new one goes, and the list cannot fall behind the code (it had left out 17 modules).

The layout is the fenced block under "## Layout"; an entry starts at a line that does not begin with a space
(`rssprobe/run/ ...`) and runs to the next. A module is named when its name is a word of its package's entry (a
module of a subpackage, in its top package's entry, beside `sub/`); a top-level module when its file name is in a
`rssprobe/` entry.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rssprobe"
DOC = ROOT / "docs" / "developing.md"


def entries(text: str) -> dict[str, str]:
    """Each entry of the layout block: its first word (`rssprobe/run/`, `rssprobe/errors.py,`) -> its text."""
    block = text.split("\n## Layout\n", 1)[1].split("```", 2)[1]
    out: dict[str, str] = {}
    head = None
    for line in block.splitlines():
        if line and not line[0].isspace():
            head = line.split()[0]
            out[head] = ""
        if head is not None:
            out[head] += line + "\n"
    return out


def unnamed(layout: dict[str, str], package: Path) -> list[str]:
    """The modules of `package` (a tree like rssprobe/) that the layout does not name."""
    missing = []
    top_level = "".join(t for head, t in layout.items() if head.startswith("rssprobe/"))
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).parts
        if len(parts) == 1:
            named = path.name in top_level
        else:
            text = "".join(t for head, t in layout.items() if head.startswith(f"rssprobe/{parts[0]}/"))
            subpackages_named = all(re.search(rf"\b{re.escape(sub)}/", text) for sub in parts[1:-1])
            named = bool(text) and subpackages_named and (
                path.stem == "__init__" or path.stem in re.findall(r"\w+", text))
        if not named:
            missing.append(str(path.relative_to(package.parent)))
    return missing


def test_every_module_is_named_in_the_layout() -> None:
    layout = entries(DOC.read_text(encoding="utf-8"))
    assert unnamed(layout, PACKAGE) == []


def test_the_layout_names_reports_and_the_evidence_tools() -> None:
    layout = entries(DOC.read_text(encoding="utf-8"))
    assert "reports/" in layout and "tools/" in layout
    tools = [p.stem for p in (ROOT / "tools").rglob("*.py") if p.stem not in ("__init__", "__main__")] + \
        [p.parent.name for p in (ROOT / "tools").rglob("__main__.py")]
    assert [t for t in tools if t not in re.findall(r"\w+", layout["tools/"])] == []


def test_the_layout_says_where_each_new_thing_goes() -> None:
    text = DOC.read_text(encoding="utf-8").split("### Where a new thing goes", 1)[1].split("\n### ", 1)[0]
    for thing in ("A command", "A patch", "A figure", "A reporter", "An output format", "A campaign kind",
                  "A scenario family"):
        assert f"**{thing}**" in text, thing


def test_the_check_finds_a_module_left_out(tmp_path: Path) -> None:
    """The check would pass vacuously if `unnamed` never found anything: a made-up tree against a made-up layout."""
    tree = tmp_path / "rssprobe"
    for rel in ("cli.py", "run/launch.py", "run/secret.py", "run/envs/__init__.py", "run/envs/build.py",
                "worker/hidden/__init__.py"):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text("")
    layout = entries("\n## Layout\n```\nrssprobe/cli.py   x\nrssprobe/run/   launch, envs/ (build)\n"
                     "rssprobe/worker/   nothing\n```\n")
    assert unnamed(layout, tree) == ["rssprobe/run/secret.py", "rssprobe/worker/hidden/__init__.py"]
