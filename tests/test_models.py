"""Real transformer models in scenarios (model.kind = "transformers"): known answers on a tiny config.

One real run, shared by the tests that read it: a Llama (GQA, untied) sized by model.params. (GPT-2's tied
weight is checked on a script run in tests/test_script.py, to keep the suite short.) Census figures are exact
(allocated sizes, resident pages from pagemap): their tolerance is one page per storage of the role, divided by
the parameter count. Call counts are counts: exact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rssprobe.config import scenario
from rssprobe.errors import UserError

from .conftest import STEADY_GLIBC, rssprobe, summary
from .noise import PAGE

LLAMA = """
name = "llama-tiny"
steps = 3
micro_batch = 2
[model]
kind = "transformers"
seq_len = 16
params = 3.6e6
[model.hf]
model_type = "llama"
vocab_size = 4096
hidden_size = 256
intermediate_size = 688
num_hidden_layers = 1
num_attention_heads = 4
num_key_value_heads = 2
tie_word_embeddings = false
"""

PER_TENSOR = ("copy_grads_in_partition", "async_inplace_copy_grad_to_fp32_buffer_from_gpu", "setup_buckets")


def _events(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], str]:
    """(run directory, its summary, its `show --all-sites` text)."""
    tmp = tmp_path_factory.mktemp("models")
    path, out = tmp / "llama.toml", tmp / "llama"
    path.write_text(LLAMA)
    rssprobe("run", str(path), "--out", str(out), *STEADY_GLIBC, check=True)
    return out, summary(out), rssprobe("show", str(out), "--all-sites", check=True).stdout


def _page_tolerance(s: dict[str, Any], role: str) -> float:
    """An exact census figure can differ from its known answer by the partial pages of its storages."""
    storages = next(e for e in _events(Path(s["path"])) if e["event"] == "census" and e["at"] == "end")
    return storages["roles"][role]["storages"] * PAGE / s["params"]


def _meta_model(text: str, tmp: Path) -> Any:
    """The scenario's model on the meta device, built here from the config: the test's own count."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    path = tmp / "s.toml"
    path.write_text(text)
    scen = scenario.load(str(path))
    hf = dict(scen.model.hf or {})
    hf["num_hidden_layers"] = scen.model.n_layers
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(AutoConfig.for_model(hf.pop("model_type"), **hf))


@pytest.mark.worker
def test_llama_buffers_by_role_are_deepspeeds_per_parameter_buffers(llama: tuple[Path, dict[str, Any], str],
                                                                    tmp_path: Path) -> None:
    _run_dir, s, _text = llama
    assert s["status"] == "ok" and s["steps_done"] == 3
    meta = _meta_model(LLAMA, tmp_path)
    assert s["params"] == sum(p.numel() for p in meta.parameters())
    roles = s["budget"]["roles"]
    # the architecture changes the tensors, not the per-parameter buffers ...
    for role, known in (("fp32_master", 4), ("fp32_grad", 4), ("adam_exp_avg", 4), ("adam_exp_avg_sq", 4),
                        ("bit16_params", 2), ("h2d_staging", 2)):
        assert abs(roles[role] - known) <= _page_tolerance(s, role), (role, roles[role])
    # ... except the two scratch gradient buffers, each the size of the largest tensor: here the embedding
    largest = max(p.numel() for p in meta.parameters())
    temp = 2 * largest * 2 / s["params"]
    assert abs(roles["temp_grad_buffers"] - temp) <= _page_tolerance(s, "temp_grad_buffers")
    assert largest == 4096 * 256  # the embedding (and the untied head): no Linear stack has that shape
    assert abs(s["budget"]["live_bytes_per_param"] - (20 + temp)) <= 0.01


@pytest.mark.worker
def test_llama_sized_by_params_resolves_layers_and_show_says_so(llama: tuple[Path, dict[str, Any], str],
                                                                 tmp_path: Path) -> None:
    _run_dir, s, text = llama
    path = tmp_path / "s.toml"
    path.write_text(LLAMA)
    resolved = scenario.load(str(path)).model
    assert resolved.n_layers == 2 and s["model"]["layers"] == 2  # the file says 1; model.params = 3.6e6 decides
    assert s["params"] == resolved.n_params
    assert "model LlamaForCausalLM" in text and "model.params 3.6e+06 resolved to 2" in text
    assert "per unique parameter (no tied weights)" in text


@pytest.mark.worker
def test_per_tensor_sites_are_called_once_per_parameter_tensor(llama: tuple[Path, dict[str, Any], str],
                                                               tmp_path: Path) -> None:
    _run_dir, s, text = llama
    tensors = len(list(_meta_model(LLAMA, tmp_path).parameters()))
    assert s["model"]["param_tensors"] == tensors == 21  # embedding, head, final norm, 2 x 9 per layer
    rows = {r["name"].split(".")[-1]: r for r in s["sites"] if r["phase"] == "first_step"}
    for site in PER_TENSOR:
        assert rows[site]["calls"] == tensors, site
    assert f"parameter tensor ({tensors} in this model)" in text


@pytest.mark.worker
def test_transformers_is_imported_before_the_baseline(llama: tuple[Path, dict[str, Any], str]) -> None:
    run, s, _text = llama
    imports = next(e for e in _events(run) if e["event"] == "model_imports")
    assert imports["architecture"] == "LlamaForCausalLM" and imports["modules"] > 100
    after = s["budget"]["imported_since_baseline"]
    assert after is not None and "transformers" not in after  # not one transformers module after the baseline


@pytest.mark.parametrize("setting,key,reason", [
    ('model.hf.model_type="lama"', "model.hf.model_type", "unknown model type 'lama'"),
    ("model.hf.hiden_size=64", "model.hf.hiden_size", "not a setting of LlamaConfig (close: hidden_size"),
    ('model.hf.hidden_size="wide"', "model.hf.hidden_size", "expected int"),
    ("model.hf.num_key_value_heads=3", "model.hf.num_key_value_heads", "does not divide num_attention_heads (4)"),
    ("model.hf.rms_norm_eps=nan", "model.hf.rms_norm_eps", "not a finite number"),
    ("model.hf.vocab_size=-5", "model.hf.vocab_size", "negative"),
    ("model.hf.vocab_size=0", "model.hf.vocab_size", "no elements"),
    ('model.hf.model_type="vit"', "model.hf.model_type", "no causal language model"),
    ("model.width=64", "model", "width applies to kind = \"linear\""),
    ("model.seq_len=0", "model.seq_len", "greater than 0"),
])
def test_bad_hf_config_is_one_line_naming_the_key(tmp_path: Path, setting: str, key: str, reason: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text(LLAMA)
    with pytest.raises(UserError) as e:
        scenario.load(str(path), [setting])
    assert str(e.value).startswith(f"{path}: {key}:") and reason in str(e.value), str(e.value)


def test_bad_hf_config_exits_2_before_any_worker(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(LLAMA)
    out = tmp_path / "run"
    proc = rssprobe("run", str(path), "--set", "model.hf.num_attention_heads=3", "--out", str(out))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "model.hf" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()  # refused before a run directory, let alone a worker


def test_linear_keys_refused_for_a_linear_model(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('name = "t"\n[model]\nlayers = 2\nwidth = 64\nseq_len = 8\n')
    with pytest.raises(UserError, match=r"model: seq_len applies to kind = \"transformers\""):
        scenario.load(str(path))


@pytest.mark.worker
def test_a_damaged_model_event_is_shown_without_its_model_line(llama: tuple[Path, dict[str, Any], str],
                                                               tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "damaged"
    shutil.copytree(llama[0], run)
    lines = []
    for line in (run / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "model":
            event.update(param_tensors="many", tied="wte", layers=[1], architecture=7)
        lines.append(json.dumps(event))
    (run / "events.jsonl").write_text("\n".join(lines) + "\n")
    proc = rssprobe("show", str(run))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and "parameter tensors" not in proc.stdout



def test_a_transformers_worker_gets_the_hubs_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a transformers model's worker is told offline (a user's script may load from a hub), and that
    whatever this process's environment says (the worker's environment is built in run/environment.py)."""
    import sys

    from rssprobe.run import environment

    for key in environment.HUB_OFFLINE:
        monkeypatch.setenv(key, "0")
    on, off = (environment.worker(sys.executable, 1, "glibc", {}, "t", "d", hub_offline=flag) for flag in (True, False))
    assert all(on[k] == "1" for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    assert all(off[k] == "0" for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))  # left as the user has it


def test_a_transformers_run_prepared_for_other_launchers_exports_the_hubs_off(tmp_path: Path) -> None:
    """The launcher asks for it (a transformers scenario), and a launch rssprobe does not control is told."""
    path = tmp_path / "s.toml"
    path.write_text(LLAMA)
    proc = rssprobe("prepare", str(path), "--world-size", "2", "--out", str(tmp_path / "run"), check=True,
                    env={"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0"})
    exports = next(line for line in proc.stdout.splitlines() if line.strip().startswith("export "))
    assert "HF_HUB_OFFLINE=1" in exports and "TRANSFORMERS_OFFLINE=1" in exports, exports
