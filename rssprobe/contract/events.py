"""The event kinds and their fields: what the worker writes and the orchestrator reads, line by line.

Part of the contract (rssprobe/contract/__init__.py): stdlib only."""

import types
import typing
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

# ---- events -----------------------------------------------------------------------------------------------
#
# One TypedDict per kind. Required keys are what every reader relies on; NotRequired keys are checked when
# present (runs of older formats lack some). The writer adds `event`, `t` and `rank`, and `format` to the
# first event of a file. Numbers typed float accept ints (JSON has one number type).

Mallinfo = dict[str, int]  # mallinfo2's fields (arena, hblkhd, uordblks, fordblks, keepcost)
# site path -> calls, retained, retained_excl, peak_above_entry, inuse, free, mmapped (of inuse: glibc's mmapped chunks)
Sites = dict[str, dict[str, Any]]


class Event(TypedDict):
    event: str
    t: NotRequired[float]  # time.time() when written (the writer always stamps it)
    rank: NotRequired[int]
    format: NotRequired[int]


class Phase(Event):
    """A named point of the worker's start (process_start, after_imports, ops_loaded, pre_model, after_model)."""

    name: str
    rss: float
    mallinfo: Mallinfo | None
    smaps: NotRequired[dict[str, int] | None]
    cuda: NotRequired[dict[str, Any] | None]
    glibc: NotRequired[dict[str, Any]]  # process_start: glibc's status (available, reason, version)
    hwm_reset: NotRequired[bool]
    locked: NotRequired[float]  # VmLck: bytes page-locked (mlock) in the process


class Hello(Event):
    pid: NotRequired[int]
    versions: NotRequired[dict[str, str | None]]
    accelerator: NotRequired[str]
    cuda_available: NotRequired[bool]


class Overlay(Event):
    modules: NotRequired[list[str]]


class Compiling(Event):
    op: NotRequired[str]


class ModelImports(Event):
    """A transformers model's imports (transformers and its modeling module), made before the baseline."""

    transformers: str  # its version
    architecture: str  # the model class, e.g. LlamaForCausalLM
    time_s: float
    rss: float  # bytes of RSS the imports added
    modules: int  # modules they added to sys.modules


class Load(Event):
    """A model loaded from a checkpoint before deepspeed.initialize (a scenario's model.load = "checkpoint", or a
    script's from_pretrained): one interval from the call to its return, the baseline still before it."""

    how: str  # from_pretrained | zero.Init (a script's own) ...
    time_s: float
    peak: int  # the interval's exact peak RSS (VmHWM after a reset)
    entry_rss: int
    rss: float  # after the load
    smaps: NotRequired[dict[str, int] | None]  # anonymous vs file-backed vs shared, after the load
    mallinfo: NotRequired[Mallinfo | None]
    zero_init: bool  # deepspeed.zero.Init was active during the load (parameters partitioned as they load)
    holds: str  # what this rank holds after it: "whole model", "partition" or "mixed"
    whole_bytes: int  # bytes of parameters this rank holds in full
    partition_bytes: int  # bytes of ZeRO-3 partitions (ds_tensor) this rank holds
    params: int  # unique parameters of the model loaded
    checkpoint: NotRequired[dict[str, Any] | None]  # path, format, files, bytes on disk, dtype on disk


class Model(Event):
    """The model trained; every count is of unique parameters (a tied weight once)."""

    params: int
    param_groups: NotRequired[int]
    trainable_params: NotRequired[int]  # a script's parameters with requires_grad (a fine-tune freezes the rest)
    estimator_ranks_per_node: NotRequired[int]
    estimator_nodes: NotRequired[int]
    estimator_cpu_bytes: NotRequired[float | None]
    zero_stage: NotRequired[int]
    model_kind: NotRequired[str]  # linear | transformers | script
    architecture: NotRequired[str]  # the model's class name
    layers: NotRequired[int | None]  # the layer count it was built with (None: a script's model says none)
    param_tensors: NotRequired[int]  # unique parameter tensors (a per-tensor site runs this often a step)
    tied: NotRequired[list[list[str]]]  # the names that share one weight, per shared weight
    tied_params: NotRequired[int]  # parameters in tied weights (counted once in params)
    # a script's model, as its ZeRO optimizer took it: the trainable tensors' element counts per param group in
    # order, the most parameters one module owns directly (a scenario's shape is rebuilt from its declaration)
    shape_groups: NotRequired[list[list[int]]]
    largest_layer: NotRequired[int]


class ScriptEngine(Event):
    """What a script run's engine was given by the script's own DeepSpeed config (written into the manifest's
    scenario when the run concludes)."""

    zero: dict[str, Any]  # stage, offload_optimizer, offload_param
    precision: str  # bf16 | fp16 | fp32
    micro_batch: int
    grad_accum_steps: int
    deepspeed_config: dict[str, Any] | None  # None: the script's config is not JSON
    # the optimizer steps the script will run, where it says (rssprobe/data/step_totals.toml); None: unknown
    steps_total: NotRequired[int | None]


class SitesInstalled(Event):
    installed: dict[str, str]  # path -> ok | absent | ...
    steady: NotRequired[str | None]
    first_step_only: NotRequired[list[str]]


class Partition(Event):
    params: int | None  # None: the optimizer has no partition_size
    world_size: NotRequired[int]


class Interval(Event):
    """What every measured interval (init, a step, an in-run event) carries."""

    rss: float
    peak: float
    mallinfo: Mallinfo | None
    sites: Sites
    calls: NotRequired[list[dict[str, Any]]]
    effects: NotRequired[dict[str, Any]]
    smaps: NotRequired[dict[str, int] | None]
    cuda: NotRequired[dict[str, Any] | None]
    locked: NotRequired[float]  # VmLck at the interval's end: bytes page-locked (mlock), runs before it: absent


class Init(Interval):
    time_s: NotRequired[float]
    entry_rss: NotRequired[float]


class Step(Interval):
    step: int
    time_s: float
    entry_rss: float
    probe_s: NotRequired[float | None]
    parts: NotRequired[dict[str, dict[str, int]]]
    loss: NotRequired[float | None]
    probes_on: NotRequired[bool]
    gathered: NotRequired[dict[str, Any]]
    micro_steps: NotRequired[int]  # forward/backward/step calls in this optimizer step (gradient accumulation)


class InRun(Interval):
    name: str  # checkpoint | eval | reinit
    step: int
    time_s: float
    entry_rss: float
    probe_s: NotRequired[float | None]
    entry_smaps: NotRequired[dict[str, int] | None]


class Save(Interval):
    """One save (rssprobe/worker/saves.py): the outermost save entry point's call as one exact-peak interval, the
    save entry points nested inside it as its parts."""

    save: str  # its kind (contract.SAVE_KINDS)
    step: int  # optimizer steps done before it
    time_s: float
    entry_rss: float
    probe_s: NotRequired[float | None]
    entry_smaps: NotRequired[dict[str, int] | None]
    entry_mallinfo: NotRequired[Mallinfo | None]  # at entry: glibc's free-retained bytes, which a save may reuse
    # nested entry point -> calls, retained (RSS bytes, exit - entry), peak (absolute, exact), time_s, inuse (glibc's
    # bytes in use, exit - entry; None: not glibc) and, for a consolidating call, state_dict_bytes (None: it
    # returned None on this rank)
    parts: dict[str, dict[str, Any]]
    state_dict_bytes: int | None  # the consolidated 16-bit state dict this rank built inside (storages); None: none
    # a scenario's save: what Python's garbage collector freed right after it ({objects, rss, inuse} bytes; a state
    # dict kept alive by a reference cycle); None or absent: not collected (a user's own save, left to the collector)
    collected: NotRequired[dict[str, Any] | None]


class Census(Event):
    at: str  # pre_model | after_init | after_first_step | end
    rss: float
    resident: float
    roles: dict[str, dict[str, int]]
    mallinfo: Mallinfo | None
    allocated: NotRequired[float]
    pinned: NotRequired[float]
    device: NotRequired[dict[str, Any] | None]
    memmap: NotRequired[dict[str, Any] | None]
    imported: NotRequired[dict[str, int] | None]
    python_objects: NotRequired[int]
    python_modules: NotRequired[int]
    census_time_s: NotRequired[float]  # the whole census's own time (its partition's: memmap.time_s)
    locked: NotRequired[float]  # VmLck: bytes page-locked (mlock) at the census point


class TrimAtEnd(Event):
    before: dict[str, Any]  # a probe reading (rss, mallinfo) before malloc_trim(0)
    after: dict[str, Any]
    released_any: NotRequired[int | None]  # malloc_trim's own answer; None: not glibc's to call


class PinRequest(TypedDict):
    """One pin request (rssprobe.worker.pins): the DeepSpeed code that asked, the bytes CUDA would pin."""

    id: int  # request ids and frees' seq share one counter: their order is the order things happened
    entry: str  # the entry point called: accelerator.pin_memory, Tensor.pin_memory, ...
    site: str  # module.qualname of the DeepSpeed frame that asked
    line: int
    bytes: int | None  # the returned tensor's storage span; None when the call raised
    role: NotRequired[str | None]  # the census role holding the storage when the request was emitted
    function: NotRequired[str]
    step: NotRequired[int]  # 0: during deepspeed.initialize
    storage_ptr: NotRequired[int | None]
    via: NotRequired[str]  # torch (the caching host allocator) | native (DeepSpeed's own) | register (pin.register)
    raised: NotRequired[str]  # the call raised (a CPU-only torch cannot pin): its first line
    block: NotRequired[dict[str, Any]]  # CUDA: the mapping holding it (bytes, perms, mapping, shared)


class PinFree(TypedDict):
    id: int  # the request whose storage was freed
    seq: int


class Pins(Event):
    """The pin requests made and the storages freed since the previous pins event."""

    at: str  # init | step N | end
    requests: list[PinRequest]
    freed: list[PinFree]
    config: NotRequired[dict[str, Any]]  # the first one: accelerator, entries, pin_memory_effective, env, ...


class End(Event):
    status: str  # Status: ok | interrupted | terminated (contract/status.py)
    effects: NotRequired[dict[str, Any]]
    stopped: NotRequired[str]  # a script run stopped after its --steps N ("stopped after N steps as asked")
    unfinished_step: NotRequired[str]  # a script's last forward/backward with no optimizer step after it


class Error(Event):
    message: str
    traceback: NotRequired[str]


class UsageError(Event):
    message: str


EVENT_KINDS: dict[str, type] = {
    "phase": Phase, "hello": Hello, "overlay": Overlay, "compiling": Compiling, "model_imports": ModelImports,
    "model": Model, "script_engine": ScriptEngine, "load": Load,
    "sites": SitesInstalled, "partition": Partition, "init": Init, "step": Step, "inrun": InRun, "census": Census,
    "save": Save,
    "trim_at_end": TrimAtEnd, "pins": Pins, "end": End, "error": Error, "usage_error": UsageError,
}
# list fields whose items have a declared shape too: kind -> field -> (what one item is called, its shape)
EVENT_ITEMS: dict[str, dict[str, tuple[str, type]]] = {
    "pins": {"requests": ("request", PinRequest), "freed": ("free", PinFree)},
}


def _runtime(hint: Any) -> tuple[type, ...]:
    """The isinstance() types of a type hint (float also accepts int)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return tuple(t for arg in typing.get_args(hint) for t in _runtime(arg))
    if hint is type(None) or hint is None:
        return (type(None),)
    if hint is Any:
        return (object,)
    base = typing.get_origin(hint) or hint
    return (int, float) if base is float else (base,)


@dataclass(frozen=True)
class _Shape:
    required: frozenset[str]
    types: dict[str, tuple[type, ...]]


def _shape(kind: type) -> _Shape:
    hints = typing.get_type_hints(kind)
    return _Shape(frozenset(kind.__required_keys__), {k: _runtime(v) for k, v in hints.items()})  # type: ignore[attr-defined]


EVENT_SHAPES: dict[str, _Shape] = {name: _shape(kind) for name, kind in EVENT_KINDS.items()}
ITEM_SHAPES: dict[str, dict[str, tuple[str, _Shape]]] = {
    kind: {name: (word, _shape(item)) for name, (word, item) in items.items()} for kind, items in EVENT_ITEMS.items()}


def _wrong(value: Any, allowed: tuple[type, ...]) -> bool:
    return not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed)


def event_problem(event: Any, strict: bool = False) -> str | None:
    """Why a parsed JSON value is not an event of its kind's shape; None when it is. `strict` (the writer):
    an undeclared kind is a problem too."""
    if not isinstance(event, dict):
        return f"a JSON {type(event).__name__}, not an event object"
    kind = event.get("event")
    if not isinstance(kind, str):
        return "no 'event' kind"
    shape = EVENT_SHAPES.get(kind)
    if shape is None:
        return f"an undeclared event kind {kind!r} (declare it in rssprobe.contract)" if strict else None
    problem = _fields_problem(event, shape)
    if problem:
        return f"a {kind} event {problem}"
    for name, (word, item_shape) in ITEM_SHAPES.get(kind, {}).items():
        for item in event[name]:
            problem = _fields_problem(item, item_shape) if isinstance(item, dict) else "that is not an object"
            if problem:
                return f"a {kind} event with a {word} {problem}"
    if kind == "trim_at_end" and not all(isinstance(event[k].get("rss"), (int, float)) for k in ("before", "after")):
        return "a trim_at_end event without 'rss' before and after"
    if kind == "pins" and any(r["bytes"] is not None and r["bytes"] < 0 for r in event["requests"]):
        return "a pins event with a request of negative bytes"
    return None


def _fields_problem(obj: dict[str, Any], shape: _Shape) -> str | None:
    for name, allowed in shape.types.items():
        if name not in obj:
            if name in shape.required:
                return f"without '{name}'"
        elif _wrong(obj[name], allowed):
            return f"without a valid '{name}'"
    return None
