"""The structure counts an issue's note quotes, read from the source with ast (python -m tools.counts [ROOT]):

* contract face imports: imports that go through rssprobe.contract's package (a name from it that is not one of its
  modules, or the package itself), in rssprobe/, tests/, tools/ and reports/;
* reporter string-key reads: `x["key"]` loads and `x.get("key", ...)` calls in rssprobe/reporters/, and their keys;
* reports/ scripts importing rssprobe: Python under reports/ that imports the package (tools/evidence/ is where such
  code lives: docs/developing.md, "Evidence").
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def _target(root: Path, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = list(path.relative_to(root).with_suffix("").parts)[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def face_imports(root: Path) -> list[str]:
    contract = root / "rssprobe" / "contract"
    modules = {p.stem for p in contract.glob("*.py")} - {"__init__"}
    out = []
    for folder in ("rssprobe", "tests", "tools", "reports"):
        for path in sorted((root / folder).rglob("*.py")):
            if path.parent == contract:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
                if isinstance(node, ast.ImportFrom):
                    target, names = _target(root, path, node), {a.name for a in node.names}
                    if (target == "rssprobe.contract" and names - modules) or (
                            target == "rssprobe" and "contract" in names):
                        out.append(where)
                elif isinstance(node, ast.Import) and any(a.name == "rssprobe.contract" for a in node.names):
                    out.append(where)
    return out


def reporter_reads(root: Path) -> tuple[int, set[str]]:
    reads, keys = 0, set()
    for path in sorted((root / "rssprobe" / "reporters").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            key = None
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and \
                    isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                key = node.slice.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                key = node.args[0].value
            if key is not None:
                reads += 1
                keys.add(key)
    return reads, keys


def reports_importing(root: Path) -> list[str]:
    out = []
    for path in sorted((root / "reports").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n.split(".")[0] == "rssprobe" for n in names):
                out.append(str(path.relative_to(root)))
                break
    return out


def main(root: Path) -> None:
    face = face_imports(root)
    reads, keys = reporter_reads(root)
    scripts = reports_importing(root)
    print(f"contract face imports: {len(face)} in {len({f.split(':')[0] for f in face})} files")
    print(f"reporter string-key reads: {reads} over {len(keys)} keys")
    print(f"reports/ scripts importing rssprobe: {len(scripts)} of {len(list((root / 'reports').rglob('*.py')))}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
