"""The package's shape, read from its source: layers that point one way, no import circles, a worker that
imports nothing of the orchestration side, a stdlib-only contract, a short top level.

Every module of rssprobe/ is parsed with ast; every import counts, also one inside a function or under
`if TYPE_CHECKING` (an import that runs late is still a dependency, and may hide a circle).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "rssprobe"

# The layers, lowest first: a module may import its own layer and the layers below it, never one above.
# A key is the first name under rssprobe/ (a top-level module or a package).
LAYERS: list[set[str]] = [
    {"__init__", "contract", "errors", "log", "verdicts", "kinds", "data", "scenarios"},
    {"store"},
    {"config"},
    {"analysis"},
    {"run"},
    {"campaign"},
    {"workflows"},
    {"reporters"},
    {"commands"},
    {"cli", "__main__"},
]
# Rooms with a narrower door than their layer: what they may import (rssprobe's own names only).
ONLY: dict[str, set[str]] = {
    # reporters render: they sit beside the workflows but read only figures, verdicts and the contract
    # and the kinds' table (rssprobe/kinds.py: which view renders which result)
    "reporters": {"reporters", "analysis", "contract", "verdicts", "kinds", "errors"},
    # the worker runs inside the training process: the contract and itself
    "worker": {"worker", "contract"},
}
TOP_LEVEL_MODULES = 12


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The rssprobe modules `name` imports (a `from pkg import sub` of a submodule counts as the submodule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(name, path.name == "__init__.py", node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in known else target)
    return {m for m in out if m == "rssprobe" or m.startswith("rssprobe.")}


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: {m for m in imports(name, path, known) if m != name} for name, path in found.items()}


def room(module: str) -> str:
    """The layer key of a module: the first name under rssprobe/ ('__init__' for the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer(key: str) -> int | None:
    return next((i for i, keys in enumerate(LAYERS) if key in keys), None)


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def upward(g: dict[str, set[str]]) -> list[str]:
    """Every import that points up a layer, or through a narrower door than a room allows."""
    out = []
    for importer, targets in sorted(g.items()):
        a = room(importer)
        for target in sorted(targets):
            b = room(target)
            if a in ONLY:
                if b not in ONLY[a]:
                    out.append(f"{importer} -> {target} ({a} imports only {', '.join(sorted(ONLY[a]))})")
                continue
            la, lb = layer(a), layer(b)
            if la is None or lb is None:
                out.append(f"{importer} -> {target} (not in a declared layer: {a if la is None else b})")
            elif lb > la:
                out.append(f"{importer} -> {target} (layer {la} {a} imports layer {lb} {b})")
    return out


def test_every_room_is_in_a_layer() -> None:
    rooms = {room(m) for m in modules()} - set(ONLY)
    assert sorted(r for r in rooms if layer(r) is None) == []


def test_every_import_names_a_module_that_exists() -> None:
    """A relative import that points nowhere (left behind by a move) is found here, not in a run."""
    found = modules()
    known = set(found)
    broken = [f"{name} -> {m}" for name, path in found.items() for m in imports(name, path, known) if m not in known]
    assert broken == []


def test_no_import_cycles() -> None:
    assert cycles(graph()) == []


def test_imports_only_point_down() -> None:
    assert upward(graph()) == []


def test_nothing_outside_the_worker_imports_from_it() -> None:
    g = graph()
    offenders = [f"{a} -> {b}" for a, targets in g.items() for b in targets
                 if room(b) == "worker" and room(a) != "worker"]
    assert offenders == []


def test_the_worker_imports_the_contract_and_itself_only() -> None:
    g = graph()
    offenders = [f"{a} -> {b}" for a, targets in g.items() if room(a) == "worker" for b in targets
                 if room(b) not in ("worker", "contract")]
    assert offenders == []


def test_the_contract_imports_the_standard_library_only() -> None:
    """Each module of the contract package imports the standard library and the contract's own modules only."""
    names = set()
    for path in sorted((PACKAGE / "contract").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level:
                target = _resolve(module_name(path), path.name == "__init__.py", node)
                names.add("." if target.startswith("rssprobe.contract") else target)
            elif isinstance(node, ast.ImportFrom):
                names.add((node.module or "").split(".")[0])
    assert sorted(n for n in names if n not in sys.stdlib_module_names and n not in ("__future__", ".")) == []


def test_no_module_of_the_contract_is_a_grab_bag() -> None:
    """The contract is one package of small modules by concept (files, names, interventions, events, manifest,
    lifeline): none over 400 lines (issue 32; the single contract.py had grown to 889)."""
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in (PACKAGE / "contract").glob("*.py")}
    assert len(sizes) >= 6 and max(sizes.values()) <= 400, sizes


def test_a_short_top_level() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= TOP_LEVEL_MODULES, top


@pytest.mark.parametrize(("importer", "target", "expected"), [
    ("rssprobe.store.rundir", "rssprobe.config.scenario", True),  # store imports config: up
    ("rssprobe.config.scenario", "rssprobe.store.reader", False),
    ("rssprobe.reporters.views", "rssprobe.store.rundir", True),  # a reporter reading files
    ("rssprobe.reporters.views", "rssprobe.analysis.metrics", False),
    ("rssprobe.worker.census", "rssprobe.store.layout", True),
    ("rssprobe.commands.run", "rssprobe.workflows.run", False),
])
def test_the_checker_itself_tells_up_from_down(importer: str, target: str, expected: bool) -> None:
    """The checks above would pass vacuously if `upward` never found anything: known cases both ways."""
    assert bool(upward({importer: {target}})) is expected
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# What a command may import: its job is parsing the command line and one call into the library (memray's
# commands/), then rendering. The library's door is a workflow, or, for a campaign (matrix, plan, scale, bisect,
# merge), the campaign's own entry module, which is that campaign's workflow. Besides: the option vocabularies
# and the scenario spec (config), the contract, errors and log, the reporters it renders with, the one writer of
# a command's output files (store.outputs) and the names and defaults of options that live with their owners
# (the gated figures, the statistics' threshold and alpha). Never the run machinery, the run directories or the
# analysis.
COMMAND_DOORS = ("rssprobe.commands", "rssprobe.workflows", "rssprobe.campaign", "rssprobe.reporters",
                 "rssprobe.config", "rssprobe.contract", "rssprobe.errors", "rssprobe.log", "rssprobe.verdicts",
                 "rssprobe.store.outputs", "rssprobe.analysis.metrics", "rssprobe.analysis.stats")


def test_commands_reach_the_library_through_its_doors_only() -> None:
    g = graph()
    offenders = [f"{a} -> {b}" for a, targets in sorted(g.items()) if room(a) == "commands" for b in sorted(targets)
                 if not any(b == door or b.startswith(door + ".") for door in COMMAND_DOORS)]
    assert offenders == []


def test_every_request_that_runs_something_carries_the_one_run_options_bundle() -> None:
    """Patches, diffs, allocator, glibc knobs, repeat, environment and python are declared once (RunOptions) and
    carried whole: no request that runs something declares one of them again beside it (matrix keeps `patches` as
    an axis: its cells' patch sets, not options applied to every run), and each has the bundle."""
    import dataclasses

    from rssprobe.campaign.bisect.start import BisectRequest
    from rssprobe.campaign.matrix import MatrixRequest
    from rssprobe.config.runoptions import RunOptions
    from rssprobe.run.group import Start
    from rssprobe.workflows.estimate.request import Request
    from rssprobe.workflows.gate import GateRequest

    bundled = {f.name for f in dataclasses.fields(RunOptions)}
    axes = {MatrixRequest: {"patches"}}
    for request in (Start, Request, GateRequest, MatrixRequest, BisectRequest):
        own = {f.name: f for f in dataclasses.fields(request)}
        assert own["options"].type in ("RunOptions", RunOptions), request.__name__
        assert bundled & set(own) - axes.get(request, set()) == set(), request.__name__


def test_the_command_lines_run_options_are_checked_once_into_the_bundle() -> None:
    from rssprobe.commands.common_args import run_options
    from rssprobe.config.runoptions import RunOptions
    from rssprobe.errors import UserError

    got = run_options(patches=("pr8132",), malloc_env=("MALLOC_ARENA_MAX=2",), repeat=3, python="/p/python")
    assert got == RunOptions(patches=("pr8132",), malloc_env={"MALLOC_ARENA_MAX": "2"}, repeat=3, python="/p/python")
    assert run_options(malloc_default={"MALLOC_MMAP_THRESHOLD_": "65536"}).malloc_env == \
        {"MALLOC_MMAP_THRESHOLD_": "65536"}
    for bad in ("MALLOC_ARENA_MAX=two", "LD_PRELOAD=x", "MALLOC_ARENA_MAX"):
        with pytest.raises(UserError, match="--malloc-env"):
            run_options(malloc_env=(bad,))
