"""The structure counts an issue's note quotes, read from the source with ast (python -m tools.counts [ROOT]):

* contract face imports: imports that go through rssprobe.contract's package (a name from it that is not one of its
  modules, or the package itself), in rssprobe/, tests/, tools/ and reports/;
* reporter string-key reads: `x["key"]` loads and `x.get("key", ...)` calls in rssprobe/reporters/, and their keys;
  and of them the reads mypy cannot check: those whose base mypy does not type as a TypedDict (a dict[str, Any],
  Any, a Mapping, or a function mypy does not check), found by mypy itself (unchecked_reads below);
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


def _reads(tree: ast.AST) -> list[ast.expr]:
    """The base expression of each string-key read (`base["key"]`, `base.get("key", ...)`), as reporter_reads counts."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and \
                isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            out.append(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            out.append(node.func.value)
    return out


def unchecked_reads(root: Path) -> dict[str, tuple[int, int]]:
    """Per reporter module: (string-key reads, those mypy cannot check). mypy (the pinned one, with pyproject's
    [tool.mypy]) builds rssprobe/reporters with its types exported; a read is checked when the type mypy inferred
    for its base is a TypedDict (or a union of TypedDicts and None), where a key the declaration lacks is an error.
    The base is matched to mypy's expression by its source span (line, column, end line, end column) among that
    module's own expressions. ~15 s of CPU (a cold build: a warm cache exports no types)."""
    import os

    from mypy import build
    from mypy.main import process_options
    from mypy.nodes import Node
    from mypy.types import NoneType, TypedDictType, UnionType, get_proper_type

    cwd = os.getcwd()
    os.chdir(root)  # pyproject.toml's [tool.mypy], and the paths it names, are the root's
    try:
        sources, options = process_options([str(Path("rssprobe") / "reporters")])
        options.export_types, options.preserve_asts, options.incremental = True, True, False
        options.cache_dir = os.devnull
        result = build.build(sources, options)
    finally:
        os.chdir(cwd)
    skip = {"node", "info", "original_def", "def_or_infer_vars", "expanded", "__match_args__"}

    def own(tree: Node) -> list[Node]:  # the module's own nodes: not through a name to its definition elsewhere
        seen, stack, out = set(), list(getattr(tree, "defs", [])), []
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            out.append(node)
            for attr in getattr(type(node), "__mypyc_attrs__", ()):
                if attr not in skip:
                    value = getattr(node, attr, None)
                    items = value if isinstance(value, list | tuple) else (value,)
                    stack += [x for x in items if isinstance(x, Node)]
        return out

    def typed(t: object) -> bool:
        t = get_proper_type(t)  # type: ignore[arg-type]
        items = [get_proper_type(i) for i in t.items] if isinstance(t, UnionType) else [t]
        items = [i for i in items if not isinstance(i, NoneType)]
        return bool(items) and all(isinstance(i, TypedDictType) for i in items)

    out = {}
    for source in sources:
        spans: dict[tuple[int, int, int | None, int | None], list[object]] = {}
        for node in own(result.graph[source.module].tree):
            if node in result.types:
                spans.setdefault((node.line, node.column, node.end_line, node.end_column), []).append(
                    result.types[node])
        path = root / str(source.path)
        bases = _reads(ast.parse(path.read_text(encoding="utf-8")))
        types = [spans.get((b.lineno, b.col_offset, b.end_lineno, b.end_col_offset)) for b in bases]
        out[str(path.relative_to(root))] = (len(bases), sum(not t or not all(typed(x) for x in t) for t in types))
    return out


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


def main(root: Path, by_file: bool = False) -> None:
    face = face_imports(root)
    reads, keys = reporter_reads(root)
    scripts = reports_importing(root)
    print(f"contract face imports: {len(face)} in {len({f.split(':')[0] for f in face})} files")
    print(f"reporter string-key reads: {reads} over {len(keys)} keys")
    per_file = unchecked_reads(root)
    print(f"reporter string-key reads mypy cannot check: {sum(u for _n, u in per_file.values())} "
          "(base not a TypedDict: dict[str, Any], Any, unchecked code)")
    if by_file:
        for path, (n, unchecked) in sorted(per_file.items(), key=lambda kv: -kv[1][1]):
            if n:
                print(f"  {path}: {unchecked} of {n}")
    print(f"reports/ scripts importing rssprobe: {len(scripts)} of {len(list((root / 'reports').rglob('*.py')))}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--by-file"]
    main(Path(args[0]).resolve() if args else Path(__file__).resolve().parent.parent, "--by-file" in sys.argv)
