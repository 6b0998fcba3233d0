"""The tests' in-process CLI (tests/conftest.py: rssprobe()) answers as `python -m rssprobe` does: same exit code,
same stdout, same stderr line, for an answer and for a refusal. Without this, the hundreds of tests that read
through it could pass on an answer no user ever sees."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import rssprobe


@pytest.mark.integration
@pytest.mark.parametrize("args", [
    ["diff", "{demo}/baseline", "{demo}/patched", "--format", "markdown"],
    ["show", "{demo}/baseline/run-01", "--format", "json"],
    ["show", "{demo}/no-such-run"],  # a refusal: one line, exit 2
    ["diff", "{demo}/baseline"],  # click's own usage error
    ["run", "tiny", "--set", "steps=0"],  # a launching command's refusal, before any worker
    ["scale", "tiny", "--params", "4e6,4e6"],
    ["matrix", "tiny", "--patch", "baseline,pr8132", "--dry-run", "--out", "{demo}/../matrix-listing"],
])
def test_in_process_answers_as_a_fresh_process(demo_runs: Path, args: list[str]) -> None:
    argv = [a.replace("{demo}", str(demo_runs)) for a in args]
    here, fresh = rssprobe(*argv), rssprobe(*argv, fresh=True)
    assert (here.returncode, here.stdout, here.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert here.stdout or here.stderr  # it said something
