"""The packaged models' shapes shipped for the pinned transformers (config/shippedshapes.py, written by
tools/shapes.py): on a fresh machine (an empty cache root) a refusal and an answer's shapes need neither torch nor
transformers, the shipped answers are what the code computes now (a stale file fails here), and they are read only
under the transformers version and code they were computed with.

Behaviour, not speed: checked in a fresh interpreter's sys.modules and by recomputing, never by a clock.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rssprobe.config import knownmodels, shapecache, shippedshapes
from tests.test_estimate_fast import HEAVY, ROOT, _env, cli_in_fresh_process
from tools import shapes

SHIPPED = json.loads(shapes.FILE.read_text(encoding="utf-8"))


def _shipped_here() -> tuple[str, str]:
    """The stamp the shipped file was computed under; skip where another transformers is installed (there the
    file is not read: test_another_stamp_is_not_read)."""
    now = shapecache.stamp()
    if now is None or now[0] != SHIPPED["transformers"]:
        pytest.skip(f"shapes shipped for transformers {SHIPPED['transformers']}, installed {now and now[0]}")
    return now


def test_the_shipped_file_is_for_this_code() -> None:
    """A change to hfconfig/modelshape/shapecache changes the stamp: the file must be written again (held under
    any transformers: the code's half of the stamp is rssprobe's own)."""
    now = shapecache.stamp()
    if now is None:
        pytest.skip("transformers is not installed")
    assert SHIPPED["code"] == now[1], "rssprobe/data/shapes.json is stale: python -m tools.shapes"


def test_shipped_answers_are_the_computed_ones_for_two_models() -> None:
    """Every answer computed now (empty cache root, shipped file not read) for two packaged models and their
    model types is the shipped one: the fast lane's share of the full check below."""
    _shipped_here()
    models = ["llama-3-8b", "qwen3-30b-a3b"]
    now = shapes.compute(models, sorted({knownmodels.load(m).hf["model_type"] for m in models}))
    shipped = {shippedshapes.entry_key(e["kind"], e["question"]): e["answer"] for e in SHIPPED["entries"]}
    assert len(now["entries"]) >= 2 * 3 + 2  # keys of 2 types; resolved, layer_params and 3 shapes each
    for entry in now["entries"]:
        assert shipped.get(shippedshapes.entry_key(entry["kind"], entry["question"])) == entry["answer"], entry


@pytest.mark.slow
def test_the_whole_shipped_file_is_the_computed_one() -> None:
    """python -m tools.shapes --check: every packaged model and every causal model type, recomputed."""
    _shipped_here()
    assert shapes.render(shapes.compute()) == shapes.FILE.read_text(encoding="utf-8")


def test_another_stamp_is_not_read() -> None:
    """Another transformers version or other code: the shipped answer is not the answer (computed instead)."""
    entry = SHIPPED["entries"][0]
    stamp = (SHIPPED["transformers"], SHIPPED["code"])
    assert shippedshapes.get(entry["kind"], entry["question"], stamp) == entry["answer"]
    assert shippedshapes.get(entry["kind"], entry["question"], ("0.0.0", stamp[1])) is None
    assert shippedshapes.get(entry["kind"], entry["question"], (stamp[0], "0" * 16)) is None


def test_a_cold_refusal_imports_neither_torch_nor_transformers(tmp_path: Path, fresh_cache: Path) -> None:
    """A fresh machine's cache root (empty, or what make install's `tools.shapes --warm` computed where the shipped
    file is for another transformers): a config.json's bad value is one line, exit 2, from the kept keys of its
    type (it imported torch and transformers first: 3-5 s of CPU)."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": -64}))
    error, heavy = cli_in_fresh_process(["estimate", "--hf-config", str(tmp_path / "config.json"),
                                         "--gpus-per-node", "8"], fresh_cache)
    assert "model.hf.hidden_size: -64 is negative" in error and len(error.splitlines()) == 1, error
    assert heavy == []


def test_a_cold_packaged_model_is_shaped_without_torch_or_transformers(fresh_cache: Path) -> None:
    """A fresh machine's cache root (as above): the target's resolved counts, layer size and exact shape of a
    packaged model come from the shipped file (or the warmed root), and equal the packaged count."""
    code = ("import sys, json\nfrom rssprobe.config import knownmodels, modelshape\n"
            "from rssprobe.config.scenariospec import ScenarioSpec\n"
            "k = knownmodels.load('gpt-oss-20b')\n"
            "scen = ScenarioSpec(ref=k.name).apply(knownmodels.raw_scenario(k.name, k.hf, k.title), k.name)\n"
            "shape = modelshape.of(scen, scen.name)\n"
            "print(json.dumps([scen.model._resolved['params'], shape.params, modelshape.layer_params(scen),\n"
            f"                  [m for m in {HEAVY!r} if m in sys.modules]]))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**_env(), "RSSPROBE_CACHE": str(fresh_cache)})
    assert proc.returncode == 0, proc.stderr
    resolved, params, _layer, heavy = json.loads(proc.stdout.splitlines()[-1])
    assert heavy == []
    assert resolved == params == knownmodels.load("gpt-oss-20b").params
