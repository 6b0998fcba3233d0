"""Imports of the contract name the module that owns a name (issue 44): `from rssprobe.contract.files import
MANIFEST`, not `from rssprobe.contract import MANIFEST`. A reader sees where a name lives, and the package has no
list of re-exports to keep in step with its modules.

Every module of rssprobe/, tests/, tools/ and reports/ is parsed with ast (imports inside functions count).
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT / "rssprobe" / "contract"
SUBMODULES = {p.stem for p in CONTRACT.glob("*.py")} - {"__init__"}
# The modules that still read `contract.NAME` through the package: none since issue 44's fifth round (7 at its
# start). This list only shrinks; it stays empty.
LEGACY: set[str] = set()


def _target(path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = list(path.relative_to(ROOT).with_suffix("").parts)[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def face_imports(path: Path, text: str | None = None) -> list[str]:
    """Each import in `path` (or in `text`, read as if it were `path`) that goes through rssprobe.contract's
    package: a name from it that is not one of its modules, or the package itself (`from rssprobe import contract`,
    `import rssprobe.contract`)."""
    out = []
    source = path.read_text(encoding="utf-8") if text is None else text
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.ImportFrom):
            target = _target(path, node)
            names = [a.name for a in node.names]
            if target == "rssprobe.contract" and set(names) - SUBMODULES:
                out.append(f"line {node.lineno}: {', '.join(sorted(set(names) - SUBMODULES))}")
            elif target == "rssprobe" and "contract" in names:
                out.append(f"line {node.lineno}: the package")
        elif isinstance(node, ast.Import) and any(a.name == "rssprobe.contract" for a in node.names):
            out.append(f"line {node.lineno}: the package")
    return out


def sources() -> list[Path]:
    return [p for d in ("rssprobe", "tests", "tools", "reports") for p in sorted((ROOT / d).rglob("*.py"))
            if p.parent != CONTRACT]


def test_imports_name_the_contract_module_that_owns_the_name() -> None:
    offenders = {str(p.relative_to(ROOT)): found for p in sources() if (found := face_imports(p))}
    assert set(offenders) <= LEGACY, {k: v for k, v in offenders.items() if k not in LEGACY}


def test_code_in_strings_imports_by_module_too() -> None:
    """Code run by another Python (`python -c`, the worker's Python asked a question) is a string to ast: read as
    text. A face import there would fail only in that process."""
    face = re.compile(r"from rssprobe import contract\b|import rssprobe\.contract\b(?!\.)|"
                      r"from rssprobe\.contract import (?!(?:" + "|".join(sorted(SUBMODULES)) + r")\b)")
    offenders = [f"{p.relative_to(ROOT)}:{n}" for p in sources() if p != Path(__file__).resolve()
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if face.search(line)]
    assert offenders == []


def test_the_package_face_holds_only_what_the_legacy_modules_read() -> None:
    """When a legacy module names its modules, the names only it read leave the face (and it leaves LEGACY)."""
    read: set[str] = set()
    for rel in LEGACY:
        tree = ast.parse((ROOT / rel).read_text(encoding="utf-8"))
        read |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                 and n.value.id == "contract"}
    face = importlib.import_module("rssprobe.contract")  # (not an import statement: this file is checked too)
    assert set(getattr(face, "__all__", ())) <= read, sorted(set(face.__all__) - read)
    assert all(face_imports(ROOT / rel) for rel in LEGACY), "a module that no longer reads the face leaves LEGACY"


def test_the_checker_finds_a_face_import() -> None:
    """The checks above would pass vacuously if face_imports never found anything: known cases both ways, read as
    if they were a module of rssprobe/run (relative imports resolve from there)."""
    where = ROOT / "rssprobe" / "run" / "probe.py"
    cases = {"from ..contract import MANIFEST": True, "from rssprobe.contract import EXIT_INTERRUPTED": True,
             "from .. import contract": True, "import rssprobe.contract": True,
             "def f():\n    from ..contract import files, MANIFEST": True,
             "from ..contract import files, status": False, "from ..contract.files import MANIFEST": False,
             "from rssprobe.contract.exitcodes import EXIT_INTERRUPTED": False, "from .. import errors": False}
    assert {source: bool(face_imports(where, source)) for source in cases} == cases


def test_each_concept_has_its_module() -> None:
    """files.py holds the format and the run directory's names only: environment variables, exit codes, the test
    lane's knob, glibc's defaults and the answer lines each live in the module named for them."""
    defined: dict[str, set[str]] = {}
    for path in CONTRACT.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined[path.stem] = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                              if isinstance(t, ast.Name)} | {n.name for n in tree.body
                                                             if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    homes = {"_ENV": {"environment", "testlane", "glibc", "interventions"}, "_ANSWER": {"answers"}}
    for suffix, modules in homes.items():
        assert sorted((m, n) for m, names in defined.items() for n in names
                      if n.endswith(suffix) and m not in modules) == [], suffix
    assert sorted((m, n) for m, names in defined.items() for n in names
                  if n.startswith("EXIT_") and m != "exitcodes") == []
    assert {"NO_WORKER_ENV"} == defined["testlane"] and "STEADY_MALLOC_ENV" in defined["glibc"]
