"""Issue 41's timing goals, held by what makes them (speed itself is a benchmark, not a timed test): what
transformers and DeepSpeed say of a config is kept (config/shapecache.py, run/dsinfo.py), so that a refusal of a
bad key comes before torch, transformers or DeepSpeed is imported, and a kept answer is the computed one.

Checked in a fresh interpreter's sys.modules, never by a clock.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rssprobe.config import hfconfig, knownmodels, modelshape, shapecache
from rssprobe.config.scenariospec import ScenarioSpec

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "deepspeed")


def cli_in_fresh_process(args: list[str], cache: Path) -> tuple[str, list[str]]:
    """The CLI's one-line error and the heavy modules imported, in a fresh interpreter."""
    code = ("import sys\nfrom rssprobe.cli import main\n"
            f"try:\n    main({args!r})\nexcept SystemExit as e:\n    print('EXIT', e.code)\n"
            f"print('HEAVY', [m for m in {HEAVY!r} if m in sys.modules])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**_env(), "RSSPROBE_CACHE": str(cache)})
    heavy = next(line for line in proc.stdout.splitlines() if line.startswith("HEAVY"))
    assert "EXIT 2" in proc.stdout, proc.stdout + proc.stderr
    return proc.stderr.strip(), json.loads(heavy.removeprefix("HEAVY ").replace("'", '"'))


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "RSSPROBE_CACHE"}


@pytest.mark.parametrize(("args", "says"), [
    (["--hf-config", "{tmp}/config.json"], "model.hf.hidden_size: -64 is negative"),
    (["--model", "llama-2-7b", "--set", "model.hf.hidden_sizee=64"], "not a setting of LlamaConfig"),
])
def test_a_bad_key_is_refused_before_torch_transformers_or_deepspeed(tmp_path: Path, args: list[str], says: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Once transformers has said which keys a llama config takes (kept under the cache root), a bad value or an
    unknown key is one line, exit 2, with none of them imported (it imported torch and transformers first:
    4-5 s of CPU)."""
    monkeypatch.setenv("RSSPROBE_CACHE", str(tmp_path / "cache"))
    hfconfig.config_keys("llama", "t")  # what an earlier estimate of any llama config kept
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": -64}))
    words = ["estimate", *[a.replace("{tmp}", str(tmp_path)) for a in args], "--gpus-per-node", "8"]
    error, heavy = cli_in_fresh_process(words, tmp_path / "cache")
    assert says in error and len(error.splitlines()) == 1, error
    assert heavy == []


def test_kept_counts_and_shapes_are_the_computed_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second resolve, shape and layer size come from the cache and equal the first (computed) ones; the key
    holds the installed transformers version and the computing modules' source."""
    monkeypatch.setenv("RSSPROBE_CACHE", str(tmp_path / "cache"))
    hf = {**knownmodels.load("qwen3-30b-a3b").hf, "num_hidden_layers": 3}

    def target() -> tuple[dict[str, int], modelshape.Shape, tuple[int, int]]:
        scen = ScenarioSpec("t", ()).apply(knownmodels.raw_scenario("t", hf, ""), "t")
        return dict(scen.model._resolved), modelshape.of(scen), modelshape.layer_params(scen)

    computed = target()
    kept = list((tmp_path / "cache" / "shapes").glob("*.json"))
    # the type's keys too, unless read from the packaged models' shipped answers (config/shippedshapes.py)
    assert {"resolved", "shape", "layer_params"} <= {p.name.split("-")[0] for p in kept} <= {
        "keys", "resolved", "shape", "layer_params"}
    assert target() == computed
    assert computed[0]["params"] == computed[1].params  # and both are transformers' (test_hfconfig_meta.py)
    assert shapecache.path("shape", {"hf": hf, "layers": 3}) in kept


def test_a_damaged_entry_is_computed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RSSPROBE_CACHE", str(tmp_path / "cache"))
    hf = {**knownmodels.load("llama-2-7b").hf, "num_hidden_layers": 1}
    first = modelshape.transformers(hf, "t", 1)
    where = shapecache.path("shape", {"hf": hf, "layers": 1})
    assert where is not None and where.is_file()
    where.write_text("{not json")
    assert modelshape.transformers(hf, "t", 1) == first
