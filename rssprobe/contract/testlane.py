"""The test suite's lane knob (tests/conftest.py): a test not marked `worker` runs with NO_WORKER_ENV set to a file
name; a worker started under it writes that file and stops at once (exitcodes.EXIT_NO_WORKER), so a test that trains
without the marker fails (and `make test-fast`, which leaves those tests out, never trains).

Part of the contract (rssprobe/contract/): stdlib only."""

NO_WORKER_ENV = "RSSPROBE_NO_WORKER"
