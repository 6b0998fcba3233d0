"""The contract between the worker (inside the training process) and the orchestrator: one module, stdlib only.

Both sides import it and nothing of each other. It holds

* the format version every file rssprobe writes carries (FORMAT_VERSION; a file without one is format 0);
* the run directory's file names;
* the event kinds and their fields, as TypedDicts (and the items of a list field, EVENT_ITEMS): the worker's
  writer refuses an event that does not match its kind (event_problem), the orchestrator's reader leaves out
  and reports a line that does not (a run with such a line is incomplete: store/judgement.py);
* the manifest and worker.json (Manifest, WorkerSpec), each defined once;
* the names both sides share: census roles (data/roles.toml), memory-map parts and their metric keys,
  glibc's in-use formula, the interventions (names, options, counters, sets: their implementations live in
  the worker and register by these names), the environment variables (torch's allocator setting among them,
  and how the worker's torch answers for it), exit codes and the steady glibc knob;
* the lifeline both sides keep: a child dies with its parent, a session is ended whole.

A field added to an event, or a new event kind, is declared here first (README: "The contract").
"""

import ctypes
import json
import math
import os
import signal
import sys
import types
import typing
from dataclasses import asdict, dataclass, fields
from importlib import resources
from typing import Any, NotRequired, TypedDict

import tomllib

# ---- format versions --------------------------------------------------------------------------------------

FORMAT_VERSION = 1  # 1: every file carries "format"; 0: files written before versions existed
FORMAT_KEY = "format"


def format_of(data: Any) -> int | None:
    """The format a file's JSON says it is (0 when it says nothing); None when the key is not a count."""
    value = data.get(FORMAT_KEY, 0) if isinstance(data, dict) else 0
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def too_new(version: int) -> str:
    return (f"format {version} is newer than this rssprobe reads (format {FORMAT_VERSION} and older); "
            "use the rssprobe that wrote it, or a newer one")


# ---- the run directory ------------------------------------------------------------------------------------
#
#   manifest.json          what ran and how it ended (written before the worker starts, updated at the end)
#   worker.json            the exact instructions the worker got
#   events.jsonl           everything rank 0 measured, one flushed line per event (rank r: events.rank<r>.jsonl)
#   steps.parquet          the per-step table derived from the events at the end (rank r: steps.rank<r>.parquet)
#   worker.log             the worker's stdout and stderr (rank r of a multi-rank run: worker.rank<r>.log)
#   overlay/               patched copies of deepspeed/torch modules (--patch-file)
#   checkpoints/           where an in-run checkpoint event saves, inside the run directory, never elsewhere
#   memray-<phase>.bin     native captures per phase (--memray), and native.json, their top sites

MANIFEST = "manifest.json"
WORKER_SPEC = "worker.json"
EVENTS = "events.jsonl"
STEPS = "steps.parquet"
WORKER_LOG = "worker.log"
NATIVE = "native.json"
CHECKPOINTS = "checkpoints"
OVERLAY = "overlay"
MEMRAY_PHASES = ("init", "first_step", "steady")
INRUN_EVENTS = ("checkpoint", "eval", "reinit")  # in-run events (scenario tables), in the order they run after a step
EVENTS_GLOB = "events*.jsonl"
RANK_EVENTS_GLOB = "events.rank*.jsonl"


def events_file(rank: int) -> str:
    """Rank 0 writes events.jsonl (the whole stream of a 1-rank run); rank r > 0 events.rank<r>.jsonl."""
    return EVENTS if rank == 0 else f"events.rank{rank}.jsonl"


def rank_of_events(name: str) -> int | None:
    """The rank an events file belongs to (the inverse of events_file); None for a name events_file() does not
    give (events.rankX.jsonl, a rank beyond MAX_WORLD_SIZE)."""
    if name == EVENTS:
        return 0
    middle = name.removeprefix("events.rank").removesuffix(".jsonl")
    return int(middle) if middle.isdigit() and 0 < int(middle) < MAX_WORLD_SIZE and name == events_file(
        int(middle)) else None


def steps_file(rank: int) -> str:
    return STEPS if rank == 0 else f"steps.rank{rank}.parquet"


def rank_log(rank: int) -> str:
    return f"worker.rank{rank}.log"


def memray_file(phase: str) -> str:
    return f"memray-{phase}.bin"


# ---- environment variables, exit codes, glibc -------------------------------------------------------------

ORCHESTRATOR_ENV = "RSSPROBE_ORCHESTRATOR_PID"  # set by the launcher for the processes it starts
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143: a worker (or command) ended by SIGTERM
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130: by Ctrl-C
# The test suite's lanes (tests/conftest.py): a test not marked `worker` runs with this set to a file name; a
# worker started under it writes that file and stops at once, so a test that trains without the marker fails
# (and `make test-fast`, which leaves those tests out, never trains).
NO_WORKER_ENV = "RSSPROBE_NO_WORKER"
EXIT_NO_WORKER = 3
# glibc's dynamic mmap threshold makes identical runs retain different amounts (+-4 B/param of raw RSS, in
# 8-32 MiB jumps); workflows that compare versions fix it unless told otherwise (README, "Noise")
STEADY_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}
# torch's allocator settings (--torch-alloc-conf, the scenario's torch_alloc_conf): the worker is given the first;
# torch >= 2.9 reads the second before it, so an inherited one is removed from the worker's environment
TORCH_ALLOC_CONF_ENV = "PYTORCH_CUDA_ALLOC_CONF"
TORCH_ALLOC_CONF_NEWER_ENV = "PYTORCH_ALLOC_CONF"
# `python -m rssprobe.worker.allocconf CONF KEYS` (the worker's torch asked before a run) prints its answer
# (AllocConfAnswer, JSON) on the line that starts with this
ALLOC_CONF_ANSWER = "RSSPROBE-ALLOC-CONF "


class AllocConfAnswer(TypedDict):
    """How a torch parses an allocator setting (rssprobe.worker.allocconf; run/preflight.py reads it)."""

    torch: str  # its version without the local part ("2.13.0")
    build: str  # torch.__version__ whole ("2.13.0+cpu")
    cuda_build: bool
    parser: bool  # this torch has a setter that parses the setting
    error: str | None  # torch's own refusal, first line; None: it took the setting
    known: dict[str, bool] | None  # a CPU build: key -> whether its parser knows it (None: not asked)


# `python -m rssprobe.worker.dsinfo REQUEST` (the installed DeepSpeed asked before an estimate) prints its answer
# (DeepSpeedInfo, JSON) on the line that starts with this
DS_INFO_ANSWER = "RSSPROBE-DS-INFO "


class DeepSpeedInfo(TypedDict):
    """What the worker's DeepSpeed says for an estimate (rssprobe.worker.dsinfo; workflows/estimate.py reads it)."""

    torch: str
    deepspeed: str
    zero_defaults: dict[str, Any]  # DeepSpeedZeroConfig's sub_group_size, persistence thresholds, pin_memory
    estimator_cpu_bytes: int | None  # DeepSpeed's own estimate of the node's host memory (model states)
    estimator: str | None  # the function that gave it


IN_USE = ("uordblks", "hblkhd")  # small chunks in use + mmapped chunks: what the program holds


def glibc_in_use(mi: Any) -> Any:
    """Bytes malloc has handed out and not got back, from mallinfo2's fields (dicts of ints or of arrays)."""
    return None if mi is None else mi[IN_USE[0]] + mi[IN_USE[1]]


# ---- census roles (declared in data/roles.toml) -----------------------------------------------------------

def _roles_file(stage: int | None) -> list[dict[str, Any]]:
    roles = tomllib.loads(resources.files("rssprobe.data").joinpath("roles.toml").read_text())["role"]
    return [r for r in roles if stage is None or stage in r["stages"]]


def roles(stage: int | None = 2) -> list[tuple[str, list[str]]]:
    """(name, attribute paths) of one ZeRO stage's roles in priority order (every stage's when None)."""
    return [(r["name"], list(r["paths"])) for r in _roles_file(stage)]


def role_names(stage: int | None = None) -> list[str]:
    """Each role name once, in declaration order (every stage's when `stage` is None)."""
    return list(dict.fromkeys(name for name, _paths in roles(stage)))


def partitioned_roles(stage: int | None = None) -> frozenset[str]:
    """The roles ZeRO splits across data-parallel ranks; a name means the same at every stage it is declared for."""
    return frozenset(r["name"] for r in _roles_file(stage) if r.get("partitioned"))


# ---- memory-map parts: the worker's labels, and the metric key each is gated by ---------------------------

TENSORS = "live tensors"
GLIBC_IN_USE = "glibc in use, not tensors"
GLIBC_FREE = "glibc free, resident"
GLIBC_UNWALKED = "glibc heap, not walked"
PYMALLOC = "python objects (pymalloc pools)"
STACKS = "thread stacks"
ANON_OTHER = "anonymous, other"
SHARED = "shared memory"
# CUDA's pinned host blocks are shared anonymous mappings (/dev/zero, seen on an H200 with torch 2.11): a block
# holding a pinned tensor is named apart, and what of it no tensor uses is the caching host allocator's rounding
# to a power of two and its cached blocks (reports/gpu-check.md: 10 B/param with ZeRO-2 offload)
PINNED_SLACK = "pinned host blocks, not tensors"
FILE_TORCH_CPU = "file: libtorch_cpu.so"
FILE_TORCH = "file: other torch libraries"
FILE_OPS = "file: deepspeed ops"
FILE_PYTHON = "file: python"
FILE_OTHER = "file: other files"
# a checkpoint's weights mapped from disk (safetensors maps its files; torch.load(mmap=True) a .bin): page cache
# the process shares with the kernel, not memory it allocated, and a load's own part
FILE_CHECKPOINT = "file: checkpoint weights (mapped)"
# label -> metric name; the keys are stable (users' gates and ceilings name them), whatever the labels become
PART_KEYS: dict[str, str] = {
    TENSORS: "part.live_tensors",
    GLIBC_IN_USE: "part.glibc_in_use_not_tensors",
    GLIBC_FREE: "part.glibc_free_resident",
    GLIBC_UNWALKED: "part.glibc_heap_not_walked",
    PYMALLOC: "part.python_objects_pymalloc_pools",
    STACKS: "part.thread_stacks",
    ANON_OTHER: "part.anonymous_other",
    SHARED: "part.shared_memory",
    PINNED_SLACK: "part.pinned_host_blocks_not_tensors",
    FILE_TORCH_CPU: "part.file_libtorch_cpu_so",
    FILE_TORCH: "part.file_other_torch_libraries",
    FILE_OPS: "part.file_deepspeed_ops",
    FILE_PYTHON: "part.file_python",
    FILE_OTHER: "part.file_other_files",
    FILE_CHECKPOINT: "part.file_checkpoint_weights_mapped",
}
PARTS = tuple(PART_KEYS)


# ---- interventions: declared here, implemented in the worker ----------------------------------------------

class OptionError(ValueError):
    """An intervention's options are not what it declares (one line naming the intervention and the option)."""


@dataclass(frozen=True)
class Option:
    """One option of an intervention, given on the command line as text (`--patch NAME:KEY=VALUE,...`)."""

    name: str
    kind: type  # str, int or float: what the text must read as
    help: str
    default: str | None = None  # None: absent unless given
    minimum: float | None = None  # numbers: finite and >= this
    choices: tuple[str, ...] = ()  # str: one of these
    words: tuple[str, ...] = ()  # numbers: words accepted instead (step=every); read as None
    required: str = ""  # when it must be given: its placeholder (site=DOTTED.PATH)
    excludes: str = ""  # an option it cannot be given with
    refusal: str = ""  # the reason given for an excluded or non-positive value

    def describe(self) -> str:
        kind = self.required or {str: "text", int: "integer", float: "number"}[self.kind]
        bounds = " > 0" if self.refusal else f" >= {self.minimum:g}" if self.minimum is not None else ""
        one_of = f" ({'|'.join(self.choices)})" if self.choices else ""
        words = f" or {'|'.join(self.words)}" if self.words else ""
        default = f", default {self.default}" if self.default is not None else ", required" if self.required else ""
        excludes = f", not with {self.excludes}" if self.excludes else ""
        return f"{kind}{bounds}{one_of}{words}{default}{excludes}: {self.help}"


@dataclass(frozen=True)
class Intervention:
    name: str
    description: str
    counter: str  # the effect key that says it took effect (must end > 0)
    options: tuple[Option, ...] = ()
    testing: bool = False  # test-only: hidden from `rssprobe patches` unless asked

    def values(self, given: dict[str, str]) -> dict[str, Any]:
        """The options as typed values (defaults filled in); OptionError naming the first that is wrong."""
        unknown = sorted(set(given) - {o.name for o in self.options})
        if unknown and not self.options:
            raise OptionError(f"{self.name}: takes no options (got {', '.join(unknown)})")
        if unknown:
            raise OptionError(f"unknown option(s) {', '.join(unknown)} for {self.name}")
        out: dict[str, Any] = {}
        for o in self.options:
            text = given.get(o.name, o.default)
            if text is None:
                if o.required:
                    raise OptionError(f"{self.name}: {o.name}={o.required} is required ({o.help})")
                out[o.name] = None
                continue
            if o.excludes and o.name in given and o.excludes in given:
                raise OptionError(f"{self.name}: {o.name} {o.refusal}")
            out[o.name] = self._value(o, text)
        return out

    def _value(self, o: Option, text: str) -> Any:
        if o.kind is str:
            if o.choices and text not in o.choices:
                raise OptionError(f"{self.name}: {o.name} must be {' or '.join(o.choices)}, not {text!r}")
            return text
        if text in o.words:
            return None
        try:
            value = o.kind(text)
        except ValueError:
            what = "an integer" if o.kind is int else "a number"
            raise OptionError(f"{self.name}: {o.name}={text} is not {what}") from None
        if not math.isfinite(value) or (o.minimum is not None and value < o.minimum):
            raise OptionError(f"{self.name}: {o.name}={text} must be a finite number >= {o.minimum:g}")
        if o.refusal and value <= 0:
            raise OptionError(f"{self.name}: {o.name} {o.refusal}")
        return value


FLOAT_SCALE = "pr8132.float-scale"
MALLOC_TRIM = "pr8132.malloc-trim"
PIN_REGISTER = "pin.register"
NATIVE_PIN = "ds.native-pin"
# DeepSpeed's own switches for its native pinned backend (both first in 0.19.6: PRs #8211 and #8283)
DS_PIN_BACKEND_ENV = "DS_PIN_MEMORY_BACKEND"
DS_PIN_REGISTER_ENV = "DS_PIN_MEMORY_REGISTER_DEVICE"
INJECT = "testing.inject"
LITTER = "testing.litter"
HOLD = "testing.hold"
ABORT_AT_EXIT = "testing.abort_at_exit"
KEEP_ENGINE = "testing.keep_engine"

_ZERO = "deepspeed.runtime.zero.stage_1_and_2.DeepSpeedZeroOptimizer"
_MIB = {"anon": "a touched anonymous mmap", "stack": "a parked thread's touched stack",
        "malloc": "4 KiB mallocs, kept", "file": "a file written, mapped and read"}

INTERVENTIONS: dict[str, Intervention] = {i.name: i for i in [
    Intervention(FLOAT_SCALE, "PR #8132 part 1: combined_scale as a Python float before the in-place unscale "
                 "multiply (CPU offload only)", counter="float_conversions"),
    Intervention(MALLOC_TRIM, "PR #8132 part 2: malloc_trim(0) once per param group / subgroup on its first CPU "
                 "Adam step", counter="trims"),
    Intervention(PIN_REGISTER, "DeepSpeed's pinned buffers allocated pageable (page-aligned) and registered at "
                 "their exact size with cudaHostRegister, unregistered when the storage is freed, instead of torch's "
                 "power-of-two caching host allocator (CUDA only; on the CPU accelerator a no-op, counted "
                 "did_not_apply)", counter="registered"),
    Intervention(NATIVE_PIN, "DeepSpeed's native pinned backend (DS_PIN_MEMORY_BACKEND=native, PR #8211, DeepSpeed "
                 ">= 0.19.6): page-aligned posix_memalign + mlock at each request's exact size, registered with the "
                 "device where register=on (DS_PIN_MEMORY_REGISTER_DEVICE, PR #8283; a no-op on the CPU "
                 "accelerator, counted register_did_not_apply). Needs `ulimit -l` above the pinned bytes (or "
                 "CAP_IPC_LOCK): checked before the run", counter="native_pins", options=(
                     Option("register", str, "register the locked pages with the device (DeepSpeed's default: on)",
                            default="on", choices=("on", "off")),)),
    Intervention(INJECT, "test only: allocate bytes_per_param x params bytes (or a fixed mib MiB, whatever the "
                 "size) touched, inside a site on one step, kept (mode=retained) or freed before it returns "
                 "(mode=transient)", counter="injections", testing=True, options=(
                     Option("site", str, "the function to allocate in", required="DOTTED.PATH"),
                     Option("bytes_per_param", float, "bytes per parameter of the model", default="3", minimum=0),
                     Option("mib", float, "a fixed size in MiB instead of bytes_per_param", minimum=0,
                            excludes="bytes_per_param",
                            refusal="is an absolute size > 0, instead of bytes_per_param, not with it"),
                     Option("step", int, "the step (0 = during init; every = each call, every step)", default="1",
                            minimum=0, words=("every",)),
                     Option("mode", str, "kept or freed before the site returns", default="retained",
                            choices=("retained", "transient")))),
    Intervention(LITTER, "test only: leave MiB of free-but-retained glibc heap before every call of a site",
                 counter="litters", testing=True, options=(
                     Option("site", str, "dotted path of the function", default=f"{_ZERO}._optimizer_step"),
                     Option("mib", int, "MiB left free but retained per call", default="64", minimum=0))),
    Intervention(HOLD, "test only: after a site returns on one step, hold MiB of four kinds: a touched anonymous "
                 "mmap, a parked thread's touched stack, 4 KiB mallocs, a file mapped and read",
                 counter="holds", testing=True, options=(
                     Option("site", str, "dotted path of the function", default=f"{_ZERO}.__init__"),
                     Option("step", int, "the step it holds after (0 = during init)", default="0", minimum=0),
                     *(Option(f"{kind}_mib", int, f"MiB held as {what}", default="0", minimum=0)
                       for kind, what in _MIB.items()))),
    Intervention(ABORT_AT_EXIT, "test only: abort (SIGABRT, 'terminate called without an active exception') when "
                 "the worker exits, after its end event, as DeepSpeed 0.15.4's rank 0 does", counter="armed",
                 testing=True),
    Intervention(KEEP_ENGINE, "test only: keep every engine deepspeed.initialize returns alive for good (a "
                 "re-initialisation then leaks the old engine whole)", counter="kept", testing=True),
]}

# Named sets: a name that expands to several components.
SETS: dict[str, list[str]] = {"pr8132": [FLOAT_SCALE, MALLOC_TRIM]}
SET_TITLES: dict[str, str] = {"pr8132": "PR #8132"}  # what a sentence calls a whole set


def parse(spec: str) -> tuple[str, dict[str, str]]:
    """'name:key=value,key=value' -> (name, options)."""
    name, _, rest = spec.partition(":")
    options: dict[str, str] = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"option {item!r} of {name!r} is not key=value")
        options[key.strip()] = value.strip()
    return name, options


def expand(names: list[str]) -> list[str]:
    """Patch-set names to component names, order kept, duplicates dropped; KeyError if unknown."""
    out: list[str] = []
    for name in names:
        base = name.split(":", 1)[0]
        for component in SETS.get(base, [name]):
            if component.split(":", 1)[0] not in INTERVENTIONS:
                raise KeyError(component)
            if component not in out:
                out.append(component)
    return out


def option_values(spec: str) -> dict[str, Any]:
    """The typed options of one component spec ('testing.inject:site=...'), as its worker reads them."""
    name, given = parse(spec)
    return INTERVENTIONS[name].values(given)


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
    time_s: NotRequired[float]
    entry_rss: NotRequired[float]
    calls: NotRequired[list[dict[str, Any]]]
    effects: NotRequired[dict[str, Any]]
    smaps: NotRequired[dict[str, int] | None]
    cuda: NotRequired[dict[str, Any] | None]
    locked: NotRequired[float]  # VmLck at the interval's end: bytes page-locked (mlock), runs before it: absent


class Init(Interval):
    pass


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
    status: str  # ok | interrupted | terminated
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


# ---- the manifest and worker.json -------------------------------------------------------------------------

@dataclass
class Manifest:
    """manifest.json: what ran and how it ended. Written whole before the worker starts; the launcher updates
    its later fields (status, orchestrator, node, the end), by these names only."""

    id: str
    label: str | None
    status: str  # prepared | running | ok | failed | timeout | interrupted
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


MANIFEST_REQUIRED = frozenset({"status", "scenario"})
# the most ranks a run may have: a number read from disk is bounded before it drives a loop (one per rank)
MAX_WORLD_SIZE = 65_536
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
    """worker.json: the exact instructions the worker gets (the scenario resolved, sites, patches)."""

    scenario: dict[str, Any]  # a script run's has [script] (path, sha256, args, stop_after)
    deepspeed_config: dict[str, Any] | None  # None: a script run (the script's own config)
    patches: list[str]  # component specs, each a name of INTERVENTIONS with its options
    sites: list[tuple[str, bool]]  # (dotted path, required)
    sites_first_step_only: list[str]
    overlay: str | None  # the run's overlay directory (--patch-file), else None
    memray: bool
    format: int = FORMAT_VERSION

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        return {FORMAT_KEY: out.pop(FORMAT_KEY), **out}


def worker_spec_problem(spec: Any) -> str | None:
    """Why worker.json cannot be run; None when it can (the worker's own check, before anything heavy)."""
    if not isinstance(spec, dict):
        return "not a JSON object"
    version = format_of(spec)
    if version is None:
        return f"{FORMAT_KEY} is not a format version"
    if version > FORMAT_VERSION:
        return too_new(version)
    missing = [f.name for f in fields(WorkerSpec) if f.name not in spec and f.name not in (FORMAT_KEY, "memray",
                                                                                         "sites_first_step_only")]
    return f"{', '.join(missing)} missing" if missing else None


# ---- the lifeline: a child dies with its parent; a session ends whole -------------------------------------

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM, parent: int | None = None) -> bool:
    """Have the kernel send `sig` to this process when its parent dies (Linux only).

    `parent`: the pid the parent had before the call (default: the current parent). If it already
    died before the request took effect (the race every PDEATHSIG user has), the signal is sent now.
    A parent of pid 1 counts as gone only under rssprobe's own launcher (itself not pid 1): started
    some other way, init (or a container's init) may well be the real parent.
    False where the kernel has no prctl (not Linux): the process then lives on as before.
    """
    if not sys.platform.startswith("linux"):
        return False
    expected = os.getppid() if parent is None else parent
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    launched = os.environ.get(ORCHESTRATOR_ENV, "")
    reparented_to_init = expected == 1 and launched.isdigit() and int(launched) != 1
    if os.getppid() != expected or reparented_to_init:  # the parent is already gone
        os.kill(os.getpid(), sig)
    return True


def session_members(sid: int) -> list[int]:
    """Live processes of session `sid` other than this one (ninja puts each compiler in a process group
    of its own, so a signal to the worker's group misses them; the session still holds them all)."""
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if os.getsid(int(entry.name)) == sid:
                    out.append(int(entry.name))
            except OSError:
                continue  # ended meanwhile
    return out


def marked_processes(key: str, value: str) -> list[int]:
    """Live processes (but this one) whose environment has key=value: every process a launcher started, however
    it left the launcher's session (torchrun puts each rank in a session of its own) or lost its parent."""
    want = f"{key}={value}".encode()
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    if want in f.read().split(b"\0"):
                        out.append(int(entry.name))
            except OSError:
                continue  # ended meanwhile, or not ours to read
    return out


def kill_session(sid: int, sig: int = signal.SIGKILL) -> None:
    """Send `sig` to every process of session `sid` (except this one)."""
    for pid in session_members(sid):
        try:
            os.kill(pid, sig)
        except OSError:
            continue

