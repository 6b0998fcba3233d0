"""transformers and accelerate as version axes (issue 31, part 4): an environment pins them (`env create ...
transformers==Z`), a matrix varies them (--transformers), a bisect searches them (--transformers V1,V2,...) through
the campaign engine. What needs no environment build: names, cells, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rssprobe.campaign.matrix import cells
from rssprobe.errors import UserError
from rssprobe.run.envs import EnvSpec, library_requirement

from .conftest import rssprobe


def test_an_env_pinning_transformers_is_named_by_it() -> None:
    spec = EnvSpec.parse(["torch==2.13.0", "deepspeed==0.19.8", "transformers==4.51.3"])
    assert spec.name == "torch2.13.0-ds0.19.8-tf4.51.3"
    assert EnvSpec.parse(["torch==2.13.0 deepspeed==0.19.8 transformers==5.13.0 accelerate==1.10.0"]).name == \
        "torch2.13.0-ds0.19.8-acc1.10.0-tf5.13.0"
    assert EnvSpec.parse(["torch==2.13.0", "deepspeed==0.19.8", "transformers>=5"]).name.startswith("env-")


def test_a_library_value_is_a_release_or_a_local_clone(tmp_path: Path) -> None:
    assert library_requirement("transformers", "4.51.3") == "transformers==4.51.3"
    assert library_requirement("transformers", f"{tmp_path}@v4.51.3") == \
        f"transformers@git+file://{tmp_path.resolve()}@v4.51.3"
    assert library_requirement("transformers", str(tmp_path)) == f"transformers@file://{tmp_path.resolve()}"
    with pytest.raises(UserError, match="not a directory"):
        library_requirement("transformers", str(tmp_path / "missing") + "@abc")
    # the requirement is one word an env spec takes
    assert EnvSpec.parse(["torch==2.13.0", "deepspeed==0.19.8",
                          library_requirement("transformers", f"{tmp_path}@abc")]).extras


def test_matrix_cells_vary_transformers_inside_each_environment() -> None:
    got = cells(["2.13.0"], ["0.19.8"], ["baseline"], ["glibc"], ["4.51.3", "5.24.0"])
    assert [c.id for c in got] == ["torch2.13.0-ds0.19.8-tf4.51.3-baseline-glibc",
                                   "torch2.13.0-ds0.19.8-tf5.24.0-baseline-glibc"]
    assert got[0].extras("1.15.0") == ("transformers==4.51.3", "accelerate==1.15.0")  # HfDeepSpeedConfig needs it
    assert got[0].env_key != got[1].env_key


def test_matrix_dry_run_lists_transformers_cells(tmp_path: Path) -> None:
    proc = rssprobe("matrix", "llama-small", "--transformers", "4.51.3,5.24.0", "--dry-run", "--format", "json",
                    "--out", str(tmp_path / "m"))
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)["cells"]
    assert [c["transformers"] for c in listed] == ["4.51.3", "5.24.0"] and all(c["torch"] for c in listed)
    shown = rssprobe("matrix", "llama-small", "--transformers", "4.51.3,5.24.0", "--dry-run", "--format",
                     "markdown", "--out", str(tmp_path / "m")).stdout
    header = next(line for line in shown.splitlines() if line.startswith("| cell"))
    assert "| transformers |" in header  # the axis the cells differ in is a column of the listing


@pytest.mark.parametrize("args,fragment", [
    (["--transformers", "4.51.3,nope"], "not a version"),
    (["--transformers", "4.51.3,5.0.0", "--deepspeed", "0.19.7,0.19.8"], "one axis at a time"),
    (["--transformers", "/no/such/clone@v1,/no/such/clone@v2"], "not a directory"),
])
def test_a_transformers_bisect_is_refused_before_any_run(tmp_path: Path, args: list[str], fragment: str) -> None:
    proc = rssprobe("bisect", "llama-small", *args, "--out", str(tmp_path / "b"))
    assert proc.returncode == 2 and fragment in proc.stderr and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert not (tmp_path / "b").exists()
