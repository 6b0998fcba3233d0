"""The contract between the worker (inside the training process) and the orchestrator: one package, stdlib only.

Both sides import it and nothing of each other. Import from the module that owns a name (`from
rssprobe.contract.files import MANIFEST`), not from this package; one module per concept:

* files: the format version every file rssprobe writes carries (FORMAT_VERSION; a file without one is format 0)
  and the run directory's file names;
* events: the event kinds and their fields, as TypedDicts (and the items of a list field, EVENT_ITEMS): the worker's
  writer refuses an event that does not match its kind (event_problem), the orchestrator's reader leaves out
  and reports a line that does not (a run with such a line is incomplete: store/judgement.py);
* manifest: the manifest and worker.json (Manifest, WorkerSpec), each defined once; status: the status words they
  and the campaign indexes carry (status.Status);
* names: the census roles (data/roles.toml), memory-map parts and their metric keys;
* interventions: their names, options, counters and sets (their implementations live in the worker and register
  by these names);
* environment: the variables the orchestrator sets or clears (torch's allocator setting among them);
  exitcodes; testlane: the test suite's knob that makes a worker train nothing; glibc: the steady mmap threshold
  and glibc's in-use formula; answers: the prefixed answer lines of the worker's Python (run/ask.py);
* lifeline: what both sides keep: a child dies with its parent, a session is ended whole.

A field added to an event, or a new event kind, is declared here first (README: "The contract").

The names below are the package's face for the modules that still read `contract.NAME` (store/upgrade, store/campaign,
store/rundir, run/launch, run/preflight, campaign/plan: they are being rewritten by others as
this is written). No new import goes through it (tests/test_contract_imports.py); it goes when they name the module.
"""

from .answers import ALLOC_CONF_ANSWER, SITES_ANSWER
from .events import event_problem
from .files import (
    EVENTS_GLOB,
    FORMAT_KEY,
    FORMAT_VERSION,
    NATIVE,
    OVERLAY,
    WORKER_LOG,
    WORKER_SPEC,
    events_file,
    format_of,
    rank_log,
    rank_of_events,
    steps_file,
    too_new,
)
from .interventions import DS_PIN_BACKEND_ENV, NATIVE_PIN, PIN_REGISTER
from .manifest import MANIFEST_TYPES, Manifest, WorkerSpec, manifest_problem

__all__ = [
    "ALLOC_CONF_ANSWER",
    "DS_PIN_BACKEND_ENV",
    "EVENTS_GLOB",
    "FORMAT_KEY",
    "FORMAT_VERSION",
    "MANIFEST_TYPES",
    "NATIVE",
    "NATIVE_PIN",
    "OVERLAY",
    "PIN_REGISTER",
    "SITES_ANSWER",
    "WORKER_LOG",
    "WORKER_SPEC",
    "Manifest",
    "WorkerSpec",
    "event_problem",
    "events_file",
    "format_of",
    "manifest_problem",
    "rank_log",
    "rank_of_events",
    "steps_file",
    "too_new",
]
