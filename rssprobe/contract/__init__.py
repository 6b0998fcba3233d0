"""The contract between the worker (inside the training process) and the orchestrator: one package, stdlib only.

Both sides import it and nothing of each other. Import from the module that owns a name (`from
rssprobe.contract.files import MANIFEST`), not from this package; one module per concept:

* files: the format version every file rssprobe writes carries (FORMAT_VERSION; a file without one is format 0)
  and the run directory's file names;
* events: the event kinds and their fields, as TypedDicts (and the items of a list field, EVENT_ITEMS): the worker's
  writer refuses an event that does not match its kind (event_problem), the orchestrator's reader leaves out
  and reports a line that does not (a run with such a line is incomplete: store/judgement.py);
* manifest: the manifest and worker.json (Manifest, WorkerSpec), each defined once; status: the status words they
  and the campaign indexes carry (status.Status); workerscenario: the scenario worker.json gives the worker, typed,
  every default filled by the orchestrator (the ZeRO stage default, DEFAULT_ZERO_STAGE, written there once);
* names: the census roles (data/roles.toml), memory-map parts and their metric keys;
* interventions: their names, options, counters and sets (their implementations live in the worker and register
  by these names);
* environment: the variables the orchestrator sets or clears (torch's allocator setting among them);
  exitcodes; testlane: the test suite's knob that makes a worker train nothing; glibc: the steady mmap threshold
  and glibc's in-use formula; answers: the prefixed answer lines of the worker's Python (run/ask.py);
* lifeline: what both sides keep: a child dies with its parent, a session is ended whole.

A field added to an event, or a new event kind, is declared here first (README: "The contract").

The package has no face: every import names the module that owns the name (tests/test_contract_imports.py; the last
modules reading `contract.NAME` named their submodules in issue 44's fifth round).
"""
