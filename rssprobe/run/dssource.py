"""DeepSpeed's answer for an estimate (rssprobe.worker.dsinfo's DeepSpeedInfo) read from its installed source,
without importing it: importing torch and DeepSpeed in the worker's Python was about 4 s of CPU of a first
answer from the packaged calibration (issue 41's goal: under 5 s).

What the answer holds is all readable: the versions (package metadata), the ZeRO config defaults (the literal
defaults of DeepSpeedZeroConfig's and DeepSpeedZeroOffloadOptimizerConfig's fields, read with `ast`), and its
host-memory estimator's figures: DeepSpeed's own estimate_zero2/zero3_model_states_mem_needs, their source
compiled and run alone (arithmetic on builtins: the same float operations, so the same integers). Only for
rssprobe's own Python (another one's packages are that Python's to say); anything not read as expected (another
layout, a default that is not a literal, an estimator that calls more than builtins) is None: the worker's Python
is asked as before. tests/test_dssource.py holds the answer equal to the live one.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib.util
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from ..contract.answers import DeepSpeedInfo

ESTIMATORS = {3: ("runtime/zero/stage3.py", "estimate_zero3_model_states_mem_needs"),
              2: ("runtime/zero/stage_1_and_2.py", "estimate_zero2_model_states_mem_needs")}
ZERO_FIELDS = ("sub_group_size", "param_persistence_threshold", "model_persistence_threshold")


def answer(python: str, request: dict[str, Any]) -> DeepSpeedInfo | None:
    """What `python -m rssprobe.worker.dsinfo REQUEST` answers, read from the source; None where it cannot be."""
    if python != sys.executable:
        return None
    try:
        torch, deepspeed = version("torch"), version("deepspeed")
    except PackageNotFoundError:
        return None
    root = _root()
    defaults = _defaults(root) if root else None
    if root is None or defaults is None:
        return None
    stage = int(request["stage"])
    estimate = _estimate(root, request, stage, zero_init=False)
    with_init = _estimate(root, request, 3, zero_init=True) if stage == 3 else None
    if estimate is None or (stage == 3 and with_init is None):
        return None
    return {"torch": torch, "deepspeed": deepspeed, "zero_defaults": defaults,
            "estimator_cpu_bytes": estimate, "estimator_cpu_bytes_zero_init": with_init,
            "estimator": ESTIMATORS[3 if stage == 3 else 2][1]}


def _root() -> Path | None:
    spec = importlib.util.find_spec("deepspeed")
    return Path(spec.origin).parent if spec and spec.origin else None


def _classes(path: Path) -> dict[str, ast.ClassDef]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def _fields(cls: ast.ClassDef | None) -> dict[str, ast.expr]:
    """A pydantic model's `name: type = default` lines, by name."""
    if cls is None:
        return {}
    return {n.target.id: n.value for n in cls.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value is not None}


def _literal(node: ast.expr) -> Any:
    """A field's default: a literal, `Field(DEFAULT, ...)`, `pp_int(NUMBER[, ...])` or `sys.maxsize`; else raises
    ValueError."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
        if node.func.id == "Field":
            return _literal(node.args[0])
        if node.func.id == "pp_int":
            return int(_literal(node.args[0]))
    if (isinstance(node, ast.Attribute) and node.attr == "maxsize" and isinstance(node.value, ast.Name)
            and node.value.id == "sys"):
        return sys.maxsize
    return ast.literal_eval(node)


def _defaults(root: Path) -> dict[str, Any] | None:
    zero = _fields(_classes(root / "runtime/zero/config.py").get("DeepSpeedZeroConfig"))
    offload = _fields(_classes(root / "runtime/zero/offload_config.py").get("DeepSpeedZeroOffloadOptimizerConfig"))
    try:
        out = {name: int(_literal(zero[name])) for name in ZERO_FIELDS}
        pin = _literal(offload["pin_memory"])
    except (KeyError, ValueError, TypeError):
        return None
    return {**out, "pin_memory": bool(pin)} if isinstance(pin, bool) else None


@functools.lru_cache(maxsize=4)
def _estimator(path: Path, name: str) -> Any:
    """DeepSpeed's estimator function compiled from its source alone, when it needs nothing but builtins."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if len(found) != 1 or found[0].decorator_list:
        return None
    func = found[0]
    local = {a.arg for a in (*func.args.args, *func.args.kwonlyargs)} | {
        t.id for n in ast.walk(func) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        for t in ast.walk(n) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
    free = {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - local
    if not free <= {"max", "min", "int", "float"}:
        return None  # it calls more than arithmetic: DeepSpeed itself is asked
    namespace: dict[str, Any] = {"__builtins__": {k: getattr(builtins, k) for k in free}}
    exec(compile(ast.Module(body=[func], type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]


def _estimate(root: Path, request: dict[str, Any], stage: int, *, zero_init: bool) -> int | None:
    """worker/training.estimator_cpu_bytes's call of DeepSpeed's estimator (CPU optimizer offload)."""
    where, name = ESTIMATORS[3 if stage == 3 else 2]
    estimator = _estimator(root / where, name)
    if estimator is None:
        return None
    params, ranks, nodes = int(request["params"]), int(request["ranks_per_node"]), int(request["nodes"])
    if stage == 3:
        cpu_mem, *_gpu = estimator(params, int(request["largest_layer"]), num_gpus_per_node=ranks, num_nodes=nodes,
                                   cpu_offload=True, cpu_offload_params=bool(request["offload_param"]),
                                   zero_init=zero_init)
    else:
        cpu_mem, _gpu = estimator(params, num_gpus_per_node=ranks, num_nodes=nodes, cpu_offload=True)
    return int(cpu_mem)
