"""The kinds have an owner (issue 44 item 3): rssprobe/kinds.py is the one table of campaign and result kinds, and
no other module switches on a kind's name.

A switch is found by reading the source (ast), as tests/test_structure.py reads imports: a string constant that is
a kind's name, compared (==, !=, in, not in) with an expression about a kind (a name or attribute spelled with
"kind", a `["kind"]` subscript, a call of kind_of), matched as a case of a `match` on one, or a key of a dict
literal that is indexed by one or whose keys are all kind names, two or more (a table by kind), or a tuple of
two or more kind names and nothing else kept under a name (a list of kinds beside the registry). Data keys that
happen to be spelled like a kind (`data["matrix"]`, `{"run": ...}` in a row, the commands' names) are not
switches and are not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rssprobe import kinds
from rssprobe.analysis import results

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rssprobe"
NAMES = frozenset(k.name for k in kinds.RESULTS) | frozenset(k.name for k in kinds.CAMPAIGNS)


def _about_kind(node: ast.AST) -> bool:
    """An expression whose value is a kind: `kind`, `x.kind`, `kinds`, `index["kind"]`, `kind_of(...)`, or a
    tuple/list of such."""
    if isinstance(node, ast.Name):
        return "kind" in node.id.lower()
    if isinstance(node, ast.Attribute):
        return "kind" in node.attr.lower()
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "kind"
    if isinstance(node, ast.Call):
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        return "kind" in name.lower() or (name == "get" and bool(node.args) and isinstance(node.args[0], ast.Constant)
                                          and node.args[0].value == "kind")
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_about_kind(e) for e in node.elts)
    return False


def _named(node: ast.AST) -> list[str]:
    """The kind names a constant (or a tuple/list/set of constants) spells."""
    if isinstance(node, ast.Constant) and node.value in NAMES:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [n for e in node.elts for n in _named(e)]
    return []


def switches(source: str) -> list[tuple[int, str]]:
    """(line, kind name) of every switch on a kind's name in `source`."""
    tree = ast.parse(source)
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_about_kind(s) for s in sides):
                out += [(node.lineno, n) for s in sides for n in _named(s)]
        elif isinstance(node, ast.Match) and _about_kind(node.subject):
            for case in node.cases:
                for sub in ast.walk(case.pattern):
                    if isinstance(sub, ast.MatchValue):
                        out += [(sub.lineno, n) for n in _named(sub.value)]
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict) and _about_kind(node.slice):
            out += [(node.lineno, n) for k in node.value.keys if k is not None for n in _named(k)]
        elif isinstance(node, ast.Assign) and isinstance(node.value, (ast.Tuple, ast.List, ast.Set)):
            named = _named(node.value)  # a list of kinds kept beside the registry (MERGEABLE = ("matrix", ...))
            if len(named) >= 2 and len(named) == len(node.value.elts):
                out += [(node.lineno, n) for n in named]
        elif isinstance(node, ast.Dict):
            named = [n for k in node.keys if k is not None for n in _named(k)]
            if len(named) >= 2 and len(named) == len(node.keys):
                out += [(node.lineno, n) for n in named]
    return sorted(set(out))


def package_switches() -> dict[str, list[tuple[int, str]]]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel != "rssprobe/kinds.py" and (hits := switches(path.read_text(encoding="utf-8"))):
            found[rel] = hits
    return found


def test_no_module_outside_the_registry_switches_on_a_kind_name() -> None:
    assert package_switches() == {}


@pytest.mark.parametrize(("source", "expected"), [
    ('if kind == "scale": pass', [(1, "scale")]),
    ('if kind in ("matrix", "plan"): pass', [(1, "matrix"), (1, "plan")]),
    ('x = "scale" in (campaign.kind_of(a), campaign.kind_of(b))', [(1, "scale")]),
    ('x = index["kind"] == "plan"', [(1, "plan")]),
    ('x = first.kind != "plan"', [(1, "plan")]),
    ('match kind:\n    case "bisect":\n        pass', [(2, "bisect")]),
    ('{"matrix": a, "plan": b}[kind](data)', [(1, "matrix"), (1, "plan")]),
    ('INDEX = {"matrix": "m.json", "scale": "s.json"}', [(1, "matrix"), (1, "scale")]),
    ('MERGEABLE = ("matrix", "plan")', [(1, "matrix"), (1, "plan")]),
    # data, not switches
    ('x = data["matrix"]', []),
    ('row = {"run": s.id, "label": "x"}', []),
    ('if "group" in merged: pass', []),
    ('if data["mode"] == "commits": pass', []),
    ('SUMMARIES = {"run": "Run it.", "scale": "Fit it.", "doctor": "Check."}', []),
])
def test_the_scan_tells_a_switch_from_data(source: str, expected: list[tuple[int, str]]) -> None:
    """The scan above would pass vacuously if it never found anything: known cases both ways."""
    assert switches(source) == expected


# the layer each field's references must lie in: the reader that calls it is that layer or above
FIELD_ROOMS = {"view": {"reporters"}, "gate_view": {"reporters"}, "table": {"campaign", "analysis"}}


def _room(ref: str) -> str:
    return ref.partition(":")[0].split(".")[1]


def test_every_reference_resolves_in_the_layer_its_field_says() -> None:
    refs = [("view", k.view) for k in kinds.RESULTS] + [("gate_view", k.gate_view) for k in kinds.RESULTS] + \
        [("table", k.table) for k in kinds.CAMPAIGNS]
    for field, ref in refs:
        if ref is None:
            continue
        assert _room(ref) in FIELD_ROOMS[field], (field, ref)
        assert callable(kinds.load(ref)), ref


def test_every_result_kind_is_declared_and_every_campaign_names_known_results() -> None:
    assert set(results.DECLARED) == {k.name for k in kinds.RESULTS}
    assert all(isinstance(results.DECLARED[k.name], type) for k in kinds.RESULTS)
    named = [r for k in kinds.CAMPAIGNS for r in (k.result, k.listing, k.compared) if r is not None]
    assert all(kinds.result(r) for r in named)
    # a campaign shown whole has a result to show it as, and one that is not says why and where its result is
    assert all((k.table is None) == (k.result is None) == (k.not_shown is not None) for k in kinds.CAMPAIGNS)


def test_kinds_that_share_an_index_are_told_apart_by_a_marker() -> None:
    by_index: dict[str, list[kinds.CampaignKind]] = {}
    for k in kinds.CAMPAIGNS:
        by_index.setdefault(k.index, []).append(k)
    for shared in by_index.values():
        assert sum(k.marker is None for k in shared) <= 1, [k.name for k in shared]


def test_the_registry_imports_nothing_of_rssprobe_at_import_time() -> None:
    """The lowest layer: the store reads it, so it may not import anything above it (references load on use)."""
    tree = ast.parse((PACKAGE / "kinds.py").read_text(encoding="utf-8"))
    imported = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                and (n.level or (n.module or "").startswith("rssprobe"))]
    imported += [n for n in ast.walk(tree) if isinstance(n, ast.Import)
                 and any(a.name.startswith("rssprobe") for a in n.names)]
    assert imported == []
