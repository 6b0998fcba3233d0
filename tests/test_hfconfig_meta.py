"""Issue 41 item 1: a config.json is counted as transformers builds it, and what estimate cannot take is refused
before torch and transformers are imported.

Truth is transformers itself: the model it builds on the meta device from the very same values
(AutoConfig.for_model + AutoModelForCausalLM.from_config, as a Trainer job's from_pretrained builds it, minus the
weights), for every packaged model, for Qwen3-30B-A3B's published config.json whole (tests/data), and for configs
transformers 5 writes itself (save_pretrained: `layer_types` included). Counts are exact integers: no tolerance.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rssprobe.config import hfconfig, knownmodels
from rssprobe.config.scenariospec import ScenarioSpec
from rssprobe.errors import UserError

DATA = Path(__file__).parent / "data"


def transformers_count(values: dict[str, Any]) -> int:
    """Unique parameters of the model transformers builds from `values` on the meta device."""
    import torch
    import transformers

    config = transformers.AutoConfig.for_model(**values)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def rssprobe_count(name: str, hf: dict[str, Any], params: float | None = None) -> int:
    scen = ScenarioSpec(name, (), params=params).apply(knownmodels.raw_scenario(name, hf, ""), name)
    return int(scen.model._resolved["params"])


@pytest.mark.parametrize("name", knownmodels.names())
def test_each_packaged_model_counts_as_transformers_builds_it(name: str) -> None:
    known = knownmodels.load(name)
    assert rssprobe_count(name, known.hf) == transformers_count(known.hf) == known.params


def test_the_common_models_ship() -> None:
    shipped = set(knownmodels.names())
    assert {"llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "qwen3-8b", "qwen3-30b-a3b", "mixtral-8x7b",
            "gpt-oss-20b", "gpt-oss-120b", "gemma-2-9b", "gemma-2-27b", "gemma-3-27b", "phi-4",
            "deepseek-v3"} <= shipped


def test_qwen3_moe_published_config_keeps_head_dim() -> None:
    """head_dim (128) is no field of Qwen3MoeConfig, yet its attention is sized by it: it was dropped and the
    model counted 30.08 B where transformers builds 30.53 B."""
    path = DATA / "qwen3-30b-a3b.config.json"
    hf, _left_out = knownmodels.from_config_json(path)
    assert hf["head_dim"] == 128
    whole = json.loads(path.read_text())
    assert rssprobe_count("qwen3-30b-a3b", hf) == transformers_count(whole) == 30_532_122_624


def test_head_dim_can_be_set() -> None:
    hf = {**knownmodels.load("qwen3-30b-a3b").hf, "num_hidden_layers": 2}
    config = hfconfig.build_config({**hf, "head_dim": 64}, "t")
    assert config.head_dim == 64


def transformers_written(tmp_path: Path, model_type: str, **values: Any) -> Path:
    """A config.json as transformers 5 writes it (save_pretrained: every field, layer_types among them)."""
    import transformers

    transformers.AutoConfig.for_model(model_type, **values).save_pretrained(tmp_path)
    return tmp_path / "config.json"


@pytest.mark.parametrize("model_type,values", [
    ("qwen3", {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 24,
               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32}),
    ("qwen2", {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 24,
               "num_attention_heads": 4, "num_key_value_heads": 2}),
    ("gemma2", {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 24,
                "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}),
    ("gpt_oss", {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 24,
                 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_local_experts": 4}),
])
def test_transformers_written_configs_count_and_resize(tmp_path: Path, model_type: str,
                                                       values: dict[str, Any]) -> None:
    """Every per-layer list (layer_types) follows a resize: the one-layer build of the calibration, and a size
    target, were refused with "num_hidden_layers (1) must be equal to the number of layer_types (24)"."""
    path = transformers_written(tmp_path, model_type, **values)
    whole = json.loads(path.read_text())
    assert len(whole["layer_types"]) == 24
    hf, _left_out = knownmodels.from_config_json(path)
    assert rssprobe_count("t", hf) == transformers_count({k: v for k, v in whole.items()
                                                          if k not in ("architectures", "transformers_version")})
    one = hfconfig.with_layers(hf, type(hfconfig.build_config(hf, "t")), 1)
    assert len(one["layer_types"]) == 1 and one["num_hidden_layers"] == 1
    per_layer = transformers_count({**whole, "num_hidden_layers": 2, "layer_types": whole["layer_types"][:2]}) \
        - transformers_count({**whole, "num_hidden_layers": 1, "layer_types": whole["layer_types"][:1]})
    outside = transformers_count({**whole, "num_hidden_layers": 1, "layer_types": whole["layer_types"][:1]}) \
        - per_layer
    assert rssprobe_count("t", hf, params=outside + 5 * per_layer) == outside + 5 * per_layer


def test_index_lists_follow_a_resize() -> None:
    hf = {"model_type": "qwen3_moe", "num_hidden_layers": 8, "mlp_only_layers": [0, 5]}
    assert hfconfig.with_layers(hf, type(hfconfig.build_config(hf, "t")), 3)["mlp_only_layers"] == [0]


REFUSED = {
    "gemma3": ({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "hidden_size": 5376},
                "vision_config": {"model_type": "siglip_vision_model"}}, "text_config"),
    "t5": ({"model_type": "t5", "is_encoder_decoder": True, "d_model": 512}, "encoder-decoder"),
    "vit": ({"model_type": "vit", "hidden_size": 64}, "no causal language model"),
    "unknown": ({"model_type": "lllama"}, "close: llama"),
    "no model_type": ({"hidden_size": 64}, "no model_type"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refusals_come_before_torch_and_transformers(tmp_path: Path, case: str) -> None:
    """Refused in one line with nothing heavy imported (what made a refusal take 16-47 s): checked in a fresh
    interpreter's sys.modules, not by a clock."""
    data, says = REFUSED[case]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    code = ("import sys\nfrom pathlib import Path\nfrom rssprobe.config import knownmodels\n"
            "from rssprobe.errors import UserError\n"
            f"try:\n    knownmodels.from_config_json(Path({str(path)!r}))\nexcept UserError as e:\n"
            "    print('REFUSED', e)\n"
            "print('HEAVY', sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    refused = next(line for line in out.splitlines() if line.startswith("REFUSED"))
    assert says in refused and "\n" not in refused
    assert "HEAVY []" in out


def test_multimodal_refusal_says_what_to_pass(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(REFUSED["gemma3"][0]))
    with pytest.raises(UserError, match=r"--hf-config text_config.json \(model_type gemma3_text\)"):
        knownmodels.from_config_json(path)
