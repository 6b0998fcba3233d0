"""The type checker over the typed core (issue 44): mypy, pinned in the dev extras, on the paths pyproject.toml's
[tool.mypy] names (the contract, the declared results and their nested parts, the configuration, the reporters that
read them). `make lint` runs the same.

A TypedDict whose subclass redeclares a key, a functional TypedDict built by unpacking a dict, a value a guard did
not narrow: each passed at run time and each is what this catches (it failed with 15 errors before they were fixed).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_typed_core_passes_mypy(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[dev]' pins it)")
    # a fresh cache: a stale one from another checkout must not answer for this one (~1.5 s of CPU cold)
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success" in proc.stdout


def test_mypy_checks_what_the_issue_names() -> None:
    """The contract, the declared results and the reporters at least; the paths exist (mypy names a missing one an
    error, but a path dropped from the list would pass silently)."""
    files = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]["files"]
    assert {"rssprobe/contract", "rssprobe/analysis/results.py"} <= set(files)
    assert {"rssprobe/analysis/resultparts.py", "rssprobe/reporters"} <= set(files)  # results typed where read
    assert all((ROOT / f).exists() for f in files)
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert any(d.startswith("mypy==") for d in dev["dev"]), "mypy is pinned in the dev extras"
