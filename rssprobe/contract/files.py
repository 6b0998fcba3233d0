"""Format versions, the run directory's file names, environment variables, exit codes, glibc's in-use formula.

Part of the contract (rssprobe/contract/__init__.py): stdlib only."""

import signal
from typing import Any, TypedDict

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
# the save phase (worker/saves.py): a save event's kind, the outermost save entry point that ran (or the scenario's
# [save] kind); a figure per kind (save.<kind>.peak, ...)
SAVE_KINDS = ("save_checkpoint", "save_16bit_model", "model_16bit", "trainer_checkpoint", "trainer_save_model")
SAVE_AT_END = ("checkpoint", "model_16bit")  # what a scenario's [save] at_end may ask for
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
# the other answers of the worker's Python (run/ask.py): whether the code sites resolve (path -> why missing), what
# its probes can read (`python -m rssprobe.worker.selfcheck`), a distribution's version (null: not installed)
SITES_ANSWER = "RSSPROBE-SITES "
SELF_CHECK_ANSWER = "RSSPROBE-SELF-CHECK "
VERSION_ANSWER = "RSSPROBE-VERSION "


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

# the most ranks a run may have: a number read from disk is bounded before it drives a loop (one per rank)
MAX_WORLD_SIZE = 65_536
