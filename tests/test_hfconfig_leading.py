"""DeepSeek-V3's first_k_dense_replace (dense layers before the MoE ones) through every resize rssprobe makes: a
layer's size is measured past the leading dense layers, so the count of a model too deep to build whole, a
`model.params` target's layer count and the calibration's per-layer size are transformers' own.

At 1 and 2 layers both are dense: the "layer" measured was a dense one (62,128 params at this toy size where each
MoE layer holds 41,136), 70 layers counted 4,365,408 where transformers builds 2,958,944, and a target of a
40-layer model's parameters resolved to 27 layers. Truth is the model transformers builds on the meta device from
the same values; counts are exact integers, no tolerance.
"""

from __future__ import annotations

from typing import Any

from rssprobe.config import hfconfig, knownmodels, modelshape
from rssprobe.config.scenariospec import ScenarioSpec

# DeepSeek-V3's architecture at toy size: 3 dense layers, then MoE layers of 8 routed + 1 shared expert
TOY = {"model_type": "deepseek_v3", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 256,
       "moe_intermediate_size": 16, "num_hidden_layers": 70, "num_attention_heads": 4, "num_key_value_heads": 4,
       "n_shared_experts": 1, "n_routed_experts": 8, "num_experts_per_tok": 2, "first_k_dense_replace": 3,
       "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
       "n_group": 1, "topk_group": 1}


def built(values: dict[str, Any]) -> tuple[int, int]:
    """(unique parameters, parameter tensors) of the model transformers builds from `values` on the meta device."""
    import torch
    import transformers

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**values))
    params = list(model.parameters())
    return sum(p.numel() for p in params), len(params)


def resolved(hf: dict[str, Any], params: float | None = None) -> dict[str, Any]:
    scen = ScenarioSpec("t", (), params=params).apply(knownmodels.raw_scenario("t", hf, ""), "t")
    return dict(scen.model._resolved)


def test_a_model_too_deep_to_build_whole_is_counted_past_its_dense_layers() -> None:
    assert TOY["num_hidden_layers"] > hfconfig.WHOLE_BUILD_LAYERS  # counted from a few layers, not built
    got = resolved(TOY)
    assert (got["params"], got["tensors"]) == built(TOY)


def test_a_size_target_resolves_to_the_layers_transformers_would_build() -> None:
    forty = {**TOY, "num_hidden_layers": 40}
    params, tensors = built(forty)
    got = resolved(TOY, params=params)
    assert (got["layers"], got["params"], got["tensors"]) == (40, params, tensors)
    # a target inside the dense layers is built exactly, not extrapolated from the MoE layers' size
    two = {**TOY, "num_hidden_layers": 2}
    assert resolved(TOY, params=built(two)[0])["params"] == built(two)[0]


def test_the_calibrations_layer_size_is_a_moe_layers() -> None:
    scen = ScenarioSpec("t", ()).apply(knownmodels.raw_scenario("t", {**TOY, "num_hidden_layers": 8}, ""), "t")
    per_layer, outside = modelshape.layer_params(scen)
    assert per_layer == built({**TOY, "num_hidden_layers": 5})[0] - built({**TOY, "num_hidden_layers": 4})[0]
    assert outside + 8 * per_layer == built({**TOY, "num_hidden_layers": 8})[0]


def test_the_packaged_deepseek_v3_carries_its_dense_layers() -> None:
    """The published config's first_k_dense_replace is kept (3), so every resize above applies to it."""
    known = knownmodels.load("deepseek-v3")
    assert hfconfig.leading_layers(hfconfig.build_config(known.hf, "deepseek-v3")) == 3
