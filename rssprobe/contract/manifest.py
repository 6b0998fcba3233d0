"""The manifest and worker.json, each defined once, and how a damaged one is told apart.

Part of the contract (rssprobe/contract/__init__.py): stdlib only."""

import json
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from .events import _runtime, _wrong
from .files import FORMAT_KEY, FORMAT_VERSION, MAX_WORLD_SIZE, format_of, too_new
from .workerscenario import WorkerScenario

# ---- the manifest and worker.json -------------------------------------------------------------------------

@dataclass
class Manifest:
    """manifest.json: what ran and how it ended. Written whole before the worker starts; the launcher updates
    its later fields (status, orchestrator, node, the end), by these names only."""

    id: str
    label: str | None
    status: str  # Status: prepared | running | ok | failed | timeout | interrupted (contract/status.py)
    started: str
    scenario_ref: str
    # resolved: model.layers (model.hf's layer count) set from a size given as params; a script run's holds
    # [script] and what rssprobe decides, and once it concluded what its engine decided (zero, precision, ...)
    scenario: dict[str, Any]
    deepspeed_config: dict[str, Any] | None  # a script run's: None until its engine gives it (None if not JSON)
    command: list[str]
    python: str
    host: dict[str, Any]
    allocator: str
    ld_preload: str | None
    malloc_env: dict[str, str]
    patches: list[str]  # component specs, expanded
    patch_files: list[dict[str, str]]
    torch_extensions_dir: str
    memray: bool
    compiler_cache: str | None
    format: int = FORMAT_VERSION
    orchestrator: dict[str, Any] | None = None  # who runs it (pid, start ticks, boot id): liveness
    node: dict[str, Any] | None = None  # the node's sampled peak of the ranks' summed RSS
    shm_buffers_removed: dict[str, Any] | None = None
    killed_after_exit: list[int] | None = None  # processes of the run alive after it ended (a stuck rank): killed
    error: str | None = None
    exit_code: int | None = None
    exit_after_end: str | None = None
    ended: str | None = None
    versions: dict[str, str | None] | None = None
    accelerator: str | None = None
    params: int | None = None
    steps_done: int | None = None
    effects: dict[str, Any] | None = None
    world_size: int = 1
    ranks: dict[str, Any] | None = None
    log_tail: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        return {FORMAT_KEY: out.pop(FORMAT_KEY), **out}

    @classmethod
    def read(cls, data: dict[str, Any]) -> "Manifest":
        """A manifest read back, typed (its JSON checked by manifest_problem and brought to this format first):
        every declared field; one a run of an older format (or a launch rssprobe did not control) never wrote is
        its default, or None where it has none. Keys this format does not declare are left out."""
        values: dict[str, Any] = {f.name: data[f.name] if f.name in data else (
            None if f.default is MISSING else f.default) for f in fields(cls)}
        return cls(**values)


MANIFEST_REQUIRED = frozenset({"status", "scenario"})
MANIFEST_TYPES: dict[str, tuple[type, ...]] = {
    k: _runtime(v) for k, v in typing.get_type_hints(Manifest).items()}


def manifest_problem(manifest: dict[str, Any]) -> str | None:
    """Why a manifest's JSON object is not a manifest its readers can rely on; None when it is."""
    for key, allowed in MANIFEST_TYPES.items():
        if key not in manifest:
            if key in MANIFEST_REQUIRED:
                return f"{key} is missing"
        elif _wrong(manifest[key], allowed):
            names = " or ".join("null" if t is type(None) else _TYPE_NAMES.get(t, t.__name__) for t in allowed)
            return f"{key} is {json.dumps(manifest[key], default=str)[:40]}, not {names}"
    steps = manifest["scenario"].get("steps")
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 0):
        return f"scenario.steps is {steps!r:.40}, not a step count"
    for where, ranks in (("world_size", manifest.get("world_size", 1)),
                         ("scenario.world_size", manifest["scenario"].get("world_size", 1))):
        if not isinstance(ranks, int) or isinstance(ranks, bool) or not 1 <= ranks <= MAX_WORLD_SIZE:
            return f"{where} {str(ranks)[:40]} is not a count of ranks from 1 to {MAX_WORLD_SIZE:,}"
    if not all(isinstance(p, str) for p in manifest.get("patches", [])):
        return "patches is not a list of names"
    return None


_TYPE_NAMES = {str: "a string", dict: "an object", int: "an integer", list: "a list", float: "a number",
               bool: "true or false"}


@dataclass
class WorkerSpec:
    """worker.json: the exact instructions the worker gets (the scenario resolved, sites, patches). The
    orchestrator fills every default before it writes it; the worker reads it back typed (WorkerSpec.read)."""

    scenario: WorkerScenario  # a script run's has [script] (path, sha256, args, stop_after)
    deepspeed_config: dict[str, Any] | None  # None: a script run (the script's own config)
    patches: list[str]  # component specs, each a name of INTERVENTIONS with its options
    sites: list[tuple[str, bool]]  # (dotted path, required)
    overlay: str | None  # the run's overlay directory (--patch-file), else None
    # the ZeRO stage whose roles the census names until an engine says its own: the scenario's, or for a script
    # run (whose [zero] its engine decides) DEFAULT_ZERO_STAGE
    zero_stage: int
    sites_first_step_only: list[str] = field(default_factory=list)
    memray: bool = False
    format: int = FORMAT_VERSION

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        return {FORMAT_KEY: out.pop(FORMAT_KEY), **out}

    @classmethod
    def read(cls, data: dict[str, Any]) -> "WorkerSpec":
        """worker.json read back, typed (checked by worker_spec_problem first); keys it does not declare are left
        out, an optional one it lacks is its default."""
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


def worker_spec_problem(spec: Any) -> str | None:
    """Why worker.json cannot be run; None when it can (the worker's own check, before anything heavy)."""
    if not isinstance(spec, dict):
        return "not a JSON object"
    version = format_of(spec)
    if version is None:
        return f"{FORMAT_KEY} is not a format version"
    if version > FORMAT_VERSION:
        return too_new(version)
    missing = [f.name for f in fields(WorkerSpec) if f.name not in spec and f.default is MISSING
               and f.default_factory is MISSING]
    return f"{', '.join(missing)} missing" if missing else None
