"""Format versions and the run directory's file names (and the most ranks a run directory may hold).

Part of the contract (rssprobe/contract/): stdlib only. Environment variables, exit codes, the test lane's knob,
glibc's defaults and the worker's answer lines each have their module beside this one."""

from typing import Any

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


# the most ranks a run may have: a number read from disk is bounded before it drives a loop (one per rank)
MAX_WORLD_SIZE = 65_536
