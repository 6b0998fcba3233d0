"""One reporter protocol (issue 44 item 3): every view rssprobe/kinds.py names (a result kind's view, a gate's view)
returns a View (rssprobe/reporters/view.py) for a real result, in every format, and output.render turns it into
that format; no module but reporters/output.py calls a format module's render, so a format never knows which kind
it renders.

The results are tests/test_results.py's real outputs (the recorded demo, the H200 sweep, an estimate from the
packaged calibration, a gate against ceilings, a matrix and a plan on synthetic groups) and two bisects over
tests/test_bisect.py's synthetic groups; no worker runs. The commit bisect's result needs a git history and lives in
the integration lane: tests/test_bisect.py holds its view there. Each check failed on the code before it (73d5608):
the views printed and returned None, and gate.py, show.py, report.py and commands/doctor.py called a format's
render themselves."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rssprobe import kinds
from rssprobe.cli import main
from rssprobe.reporters import markdown, output
from rssprobe.reporters.view import View

from .test_bisect import _fake_groups
from .test_results import outputs  # noqa: F401  (the fixture: a real output of every declared kind but a bisect's)

ROOT = Path(__file__).resolve().parent.parent
# the modules output.render renders with, one per format of output.FORMATS
FORMAT_MODULES = frozenset({"terminal", "jsonfile", "markdown", "csvfile"})
BISECTS = ("bisect versions", "bisect components")
HELD_IN_TEST_BISECT = "bisect commits"
VIEWS = [(k.name, ref) for k in kinds.RESULTS for ref in (k.view, k.gate_view) if ref is not None]


def _check(ref: str, data: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """The view returns a View of this result in every format, and each format renders it."""
    for fmt in output.FORMATS:
        made = kinds.load(ref)(data, fmt)
        assert isinstance(made, View), (ref, fmt, type(made))
        assert made.data is data and made.tables, (ref, fmt)  # JSON prints the result; every view has a table
        output.render(fmt, made)
        shown = capsys.readouterr().out
        if fmt == "json":
            assert json.loads(shown) == json.loads(json.dumps(data, default=str))
        elif fmt != "csv" and made.answer:  # the answer first (CSV holds the tables only)
            first = markdown.line(made.answer[0]) if fmt == "markdown" else made.answer[0]
            assert shown.lstrip("*").startswith(first[:20]), (ref, fmt, shown[:200])


@pytest.mark.parametrize(("kind", "ref"), [v for v in VIEWS if v[0] not in (*BISECTS, HELD_IN_TEST_BISECT)],
                         ids=[f"{k}:{r.rsplit(':')[-1]}" for k, r in VIEWS if k not in (*BISECTS, HELD_IN_TEST_BISECT)])
def test_every_named_view_returns_a_view_of_a_real_result(outputs: dict[str, dict[str, Any]],  # noqa: F811
                                                          kind: str, ref: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    _check(ref, outputs[kind], capsys)


def test_the_bisect_views_return_a_view_of_a_real_result(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A version bisect and a component bisect over synthetic groups (tests/test_bisect.py's), as the CLI makes them."""
    _fake_groups(monkeypatch, lambda req, k: 20.0 + (1.5 if req.label.endswith("0.3") else 0)
                 - (2.0 if "pr8132.malloc-trim" in req.patches else 0) + (k % 3) * 0.01)
    made = {}
    for kind, args in (("bisect versions", ["--deepspeed", "0.1,0.2,0.3"]), ("bisect components",
                                                                                ["--components", "pr8132"])):
        proc = CliRunner().invoke(main, ["bisect", "tiny", *args, "--metric", "steady.rss", "--out",
                                         str(tmp_path / kind.split()[1]), "--format", "json"])
        assert proc.exit_code in (0, 125), proc.output
        made[kind] = json.loads(proc.stdout)
    for kind in BISECTS:
        ref = kinds.result(kind).view
        assert ref is not None
        _check(ref, made[kind], capsys)


def test_every_named_view_is_checked_here_or_where_its_result_is_made() -> None:
    named = {k for k, _ref in VIEWS}
    assert HELD_IN_TEST_BISECT in named and set(BISECTS) <= named
    text = (Path(__file__).parent / "test_bisect.py").read_text(encoding="utf-8")
    assert "isinstance(show.bisect(data, fmt), View)" in text


def render_calls(source: str) -> list[int]:
    """The lines of `source` that call a format module's render: `markdown.render(...)` after `from . import
    markdown` (or `from rssprobe.reporters import terminal as t`), or `render(...)` imported from one."""
    tree = ast.parse(source)
    modules: set[str] = set()
    functions: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            where = (node.module or "").rsplit(".", 1)[-1]
            for alias in node.names:
                if alias.name in FORMAT_MODULES:
                    modules.add(alias.asname or alias.name)
                elif where in FORMAT_MODULES and alias.name == "render":
                    functions.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name.rsplit(".", 1)[-1] in FORMAT_MODULES}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr == "render" and isinstance(f.value, ast.Name)
                    and f.value.id in modules) or (isinstance(f, ast.Name) and f.id in functions):
                lines.append(node.lineno)
    return lines


def test_only_output_calls_a_formats_render() -> None:
    """Every module of the package (reporters and commands alike): a view's result reaches a format only through
    output.render (or output.markdown_text, for a job summary or a report page)."""
    assert FORMAT_MODULES <= {p.stem for p in (ROOT / "rssprobe" / "reporters").glob("*.py")}
    found = {}
    for path in sorted((ROOT / "rssprobe").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel != "rssprobe/reporters/output.py" and (lines := render_calls(path.read_text(encoding="utf-8"))):
            found[rel] = lines
    assert found == {}
    assert render_calls((ROOT / "rssprobe" / "reporters" / "output.py").read_text(encoding="utf-8"))


@pytest.mark.parametrize(("source", "expected"), [
    ("from . import markdown\nmarkdown.render([], [])", [2]),
    ("from ..reporters import terminal as t\nt.render([], [])", [2]),
    ("from .csvfile import render\nrender([])", [2]),
    ("import rssprobe.reporters.jsonfile as j\nj.render({})", [2]),
    # not a format's render
    ("from . import html\nhtml.render([], [], '')", []),
    ("from . import markdown\nmarkdown.table(t)", []),
    ("from .output import render\nrender('json', v)", []),
])
def test_the_scan_finds_a_formats_render(source: str, expected: list[int]) -> None:
    assert render_calls(source) == expected
