"""[model.hf] of a `kind = "transformers"` scenario, checked and sized before any worker starts.

The config is built here with `transformers.AutoConfig.for_model` (nothing downloaded: HF_HUB_OFFLINE), so a
bad key is one line naming it (exit 2), not a traceback minutes later. Its parameter count is read from the
model built on torch's meta device (no memory, no weights), once with one layer and once with two: every
architecture here is an embedding and a head (fixed) plus equal decoder layers, so a `model.params` target
resolves to a `num_hidden_layers`, the other dimensions kept. Counts are of *unique* parameters (tied
weights once), as everywhere in rssprobe.
"""

from __future__ import annotations

import difflib
import functools
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError
from . import shapecache

# Keys every config accepts that no config lists in to_dict (PretrainedConfig's own keyword arguments)
COMMON_KEYS = frozenset({"model_type", "dtype", "torch_dtype", "attn_implementation", "tie_word_embeddings"})
LAYERS = "num_hidden_layers"
# the most layers a model of either kind may resolve to (the largest published models have ~130): a layer count
# drives loops (a shape per layer, a meta model), so an absurd one (model.params = 1e30) is refused, not run
MAX_LAYERS = 100_000


def _transformers() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # read when huggingface_hub is imported: never download
    try:
        import transformers
    except ImportError:
        raise UserError("kind = \"transformers\" needs the transformers package (pip install 'transformers')") from None
    transformers.logging.set_verbosity_error()  # its config notes (token ids outside a tiny vocab) are not errors
    return transformers


@functools.lru_cache(maxsize=64)
def _known_keys(model_type: str) -> frozenset[str]:
    """The keys a config of `model_type` takes: its class's fields and aliases, and the keys its model's own
    source reads from the config (Qwen3-MoE's head_dim is no field of its config class, yet its attention is
    sized by it: dropping it counted 30.08 B where transformers builds 30.53 B)."""
    tf = _transformers()
    cls = tf.CONFIG_MAPPING[model_type]
    default = cls()
    return (frozenset(default.to_dict()) | frozenset(getattr(cls, "attribute_map", {}) or {}) | COMMON_KEYS
            | _read_by_model(cls))


# `config.NAME`, `self.config.NAME`, `getattr(config, "NAME"` in a modeling file: what the model reads
_READS = re.compile(r"config\.([A-Za-z_][A-Za-z0-9_]*)|getattr\(\s*(?:self\.)?\w*config\s*,\s*[\"']([A-Za-z_]\w*)[\"']")


def _read_by_model(cls: Any) -> frozenset[str]:
    """Names the model's source (modeling_<type>.py beside the config's module) reads from its config."""
    import sys

    module = sys.modules.get(cls.__module__)
    source = getattr(module, "__file__", None)
    if not source:
        return frozenset()
    path = Path(source)
    modeling = path.with_name(path.name.replace("configuration_", "modeling_", 1))
    try:
        text = modeling.read_text(encoding="utf-8")
    except OSError:
        return frozenset()
    return frozenset(a or b for a, b in _READS.findall(text)) - _NOT_KEYS


# what `config.` is followed by that is no setting (methods, the config's own machinery)
_NOT_KEYS = frozenset({"get", "to_dict", "get_text_config", "_attn_implementation", "__class__"})
# lists of layer indices (not one value per layer): resized by dropping the indices past the new count
INDEX_LISTS = ("mlp_only_layers",)


# keys that count leading layers unlike the rest (DeepSeek-V3's first_k_dense_replace: dense MLP layers before its MoE
# ones): a layer's size is measured past them, where the layers repeat (measured at 1 and 2 layers, DeepSeek-V3's
# "layer" was a dense one: 62 k params where its MoE layers hold 41 k, at toy size, and 70 layers counted 4.37 M
# where transformers builds 2.96 M)
LEADING = ("first_k_dense_replace",)


def leading_layers(config: Any) -> int:
    """How many leading layers differ from the repeating ones (0 for most architectures)."""
    values = [v for k in LEADING if isinstance(v := getattr(config, k, None), int) and not isinstance(v, bool)]
    return max([0, *values])


def layers_key(config: Any) -> str:
    """The config's own name for the layer count (GPT-2: n_layer, reached as num_hidden_layers too)."""
    return (getattr(config, "attribute_map", None) or {}).get(LAYERS, LAYERS)


def with_layers(hf: dict[str, Any], config_class: Any, layers: int) -> dict[str, Any]:
    """`hf` with its layer count set to `layers`, under the config's own key (no alias left to contradict it),
    and every per-layer list kept consistent with it: a list of one value per layer (`layer_types`: gpt-oss,
    Gemma-2/3, any config transformers 5 writes) cut to the first `layers` (or repeated to them: its pattern),
    a list of layer indices (`mlp_only_layers`) cut to those below `layers`. Without this a one-layer resize of
    a 24-layer config was refused ("num_hidden_layers (1) must be equal to the number of layer_types (24)")."""
    key = layers_key(config_class)
    now = hf.get(key, hf.get(LAYERS))
    out: dict[str, Any] = {}
    for k, v in hf.items():
        if k in (LAYERS, key):
            continue
        if k in INDEX_LISTS and isinstance(v, list):
            v = [i for i in v if isinstance(i, int) and i < layers]
        elif isinstance(v, list) and v and (k == "layer_types" or (isinstance(now, int) and len(v) == now
                                            and not k.endswith("token_id"))):
            v = [v[i % len(v)] for i in range(layers)]
        out[k] = v
    return {**out, key: layers}


@dataclass(frozen=True)
class Keys:
    """What a model type's config takes: its class's name and keys (_known_keys)."""

    name: str
    keys: frozenset[str]


def config_keys(model_type: str, where: str) -> Keys:
    """The keys of a model type with a causal LM in the installed transformers: kept (config/shapecache.py), so
    that a bad key is refused before transformers is imported; UserError for a type it lacks or with no causal LM."""
    kept = shapecache.get("keys", model_type)
    if isinstance(kept, dict) and isinstance(kept.get("keys"), list) and isinstance(kept.get("name"), str):
        return Keys(kept["name"], frozenset(kept["keys"]))
    tf = _transformers()
    if model_type not in tf.CONFIG_MAPPING:
        close = difflib.get_close_matches(model_type, list(tf.CONFIG_MAPPING.keys()), n=4)
        raise UserError(f"{where}: unknown model type {model_type!r} in transformers {tf.__version__}"
                        + (f" (close: {', '.join(close)})" if close else ""))
    if tf.CONFIG_MAPPING[model_type] not in tf.MODEL_FOR_CAUSAL_LM_MAPPING:
        raise UserError(f"{where}: {model_type!r} has no causal language model in transformers "
                        "(AutoModelForCausalLM)")
    got = Keys(tf.CONFIG_MAPPING[model_type].__name__, _known_keys(model_type))
    shapecache.put("keys", model_type, {"name": got.name, "keys": sorted(got.keys)})
    return got


def build_config(hf: dict[str, Any], label: str, layers: int | None = None) -> Any:
    """The transformers config of [model.hf] (with `layers` decoder layers, when given); a UserError naming
    the key otherwise."""
    where = f"{label}: model.hf"
    kwargs = dict(hf)
    model_type = kwargs.pop("model_type", None)
    if not isinstance(model_type, str):
        raise UserError(f"{where}.model_type: required, a transformers model type such as \"llama\" or \"gpt2\"")
    known = config_keys(model_type, f"{where}.model_type")
    for key, value in kwargs.items():  # before transformers is imported, when its keys are kept (config_keys)
        if key not in known.keys:
            close = difflib.get_close_matches(key, sorted(known.keys), n=3)
            raise UserError(f"{where}.{key}: not a setting of {known.name}"
                            + (f" (close: {', '.join(close)})" if close else ""))
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"{where}.{key}: {value} is not a finite number")
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise UserError(f"{where}.{key}: {value} is negative")
    tf = _transformers()
    if layers is not None:
        kwargs = with_layers(kwargs, tf.CONFIG_MAPPING[model_type], layers)
    try:
        config = tf.AutoConfig.for_model(model_type, **kwargs)
    except Exception as e:  # transformers' strict dataclass validators name the field in their message
        raise UserError(f"{where}{_key_in(str(e), kwargs)}: {_reason(e)}") from None
    _check_attention(config, kwargs, where)
    return config


def _key_in(message: str, kwargs: dict[str, Any]) -> str:
    """'.key' of the key a transformers error is about: its quoted field, else the first key whose words it
    names; '' when it names none of them."""
    quoted = re.search(r"field '(\w+)'", message)
    if quoted and quoted.group(1) in kwargs:
        return f".{quoted.group(1)}"
    flat = message.lower().replace("_", " ")
    named = [k for k in kwargs if k.lower().replace("_", " ") in flat]
    return f".{named[0]}" if named else ""


def _reason(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return (lines[-1] if lines else type(e).__name__)[:300]


def _check_attention(config: Any, given: dict[str, Any], where: str) -> None:
    """GQA: query heads must split evenly over the key/value heads (else the first forward fails)."""
    heads, kv = getattr(config, "num_attention_heads", None), getattr(config, "num_key_value_heads", None)
    if isinstance(heads, int) and isinstance(kv, int) and (kv <= 0 or heads % kv):
        raise UserError(f"{where}.num_key_value_heads: {kv} does not divide num_attention_heads ({heads})")
    if isinstance(heads, int) and heads <= 0:
        key = "num_attention_heads" if "num_attention_heads" in given else "(config)"
        raise UserError(f"{where}.{key}: {heads} attention heads")


def meta_model(config: Any) -> Any:
    """The model the config describes, built on the meta device (shapes only: nothing allocated, nothing
    initialised)."""
    import warnings

    import torch

    tf = _transformers()
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's note on zero-element tensors: refused by key where it matters
        return tf.AutoModelForCausalLM.from_config(config)


def meta_counts(config: Any) -> dict[str, int]:
    """Unique parameters and parameter tensors of the model the config describes (meta_model)."""
    params = list(meta_model(config).parameters())  # unique: a tied weight once
    return {"params": sum(p.numel() for p in params), "tensors": len(params),
            "empty": sum(1 for p in params if p.numel() == 0)}


def resolve(model: Any, label: str) -> None:
    """Check [model.hf] and fill model._resolved: the layer count (from model.params when given), the
    unique parameters and parameter tensors of the model the worker will build."""
    hf = dict(model.hf or {})
    question = {"hf": hf, "params": None if model.params is None else float(model.params)}
    kept = shapecache.get("resolved", question)
    if isinstance(kept, dict) and set(kept) == {"layers", "params", "tensors", "hidden", "vocab"}:
        model._resolved = kept  # transformers accepted this config before and built these counts
        return
    base = build_config(hf, label)
    key = layers_key(base)
    layers = int(getattr(base, key))
    if not 1 <= layers <= MAX_LAYERS:
        raise UserError(f"{label}: model.hf.{key}: {layers:,} layers (1 to {MAX_LAYERS:,})")
    try:
        counts = _counts(hf, label, base, layers) if model.params is None else None
        if model.params is not None:
            first = leading_layers(base) + 1  # the first layer count whose next layer is a repeating one
            one, two = (meta_counts(build_config(hf, label, n)) for n in (first, first + 1))
            per_layer, fixed = two["params"] - one["params"], one["params"] - first * (two["params"] - one["params"])
            layers = max(1, round((float(model.params) - fixed) / per_layer)) if per_layer > 0 else 1
            if layers > MAX_LAYERS:
                raise UserError(f"{label}: model.params {float(model.params):g} needs {layers:,} layers of "
                                f"this architecture (at most {MAX_LAYERS:,})")
            if layers < first:  # among the leading layers: each count built, the nearest taken
                near = {n: meta_counts(build_config(hf, label, n)) for n in range(1, first)} | {first: one}
                layers = min(near, key=lambda n: (abs(near[n]["params"] - float(model.params)), n))
                counts = near[layers]
            else:
                counts = {"params": fixed + layers * per_layer, "empty": one["empty"],
                          "tensors": one["tensors"] + (layers - first) * (two["tensors"] - one["tensors"])}
    except UserError:
        raise
    except Exception as e:  # a config transformers accepts but cannot build a model from
        raise UserError(f"{label}: model.hf: transformers cannot build a model from this config "
                        f"({type(e).__name__}: {_reason(e)})") from None
    assert counts is not None
    if counts.get("empty"):
        zero = next((k for k, v in hf.items() if v == 0 and not isinstance(v, bool)), None)
        raise UserError(f"{label}: model.hf{'.' + zero if zero else ''}: the model would have "
                        f"{counts['empty']} parameter tensor(s) with no elements")
    model._resolved = {"layers": layers, "params": counts["params"], "tensors": counts["tensors"],
                       # what the activations' lower bound needs (run/preflight.check_memory)
                       "hidden": _dimension(base, "hidden_size"), "vocab": _dimension(base, "vocab_size")}
    shapecache.put("resolved", question, model._resolved)


def _dimension(config: Any, key: str) -> int:
    value = getattr(config, key, None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


# Up to this many layers the model is built whole on the meta device; beyond, counted from 1, 2 and 3 layers when
# its layers are equal (a meta layer costs ~10-15 ms to build here: 100,000 of them took minutes before any answer)
WHOLE_BUILD_LAYERS = 64


def _counts(hf: dict[str, Any], label: str, base: Any, layers: int) -> dict[str, int]:
    """meta_counts of the model with `layers` layers: built whole when small, else extrapolated from 1, 2 and 3
    layers when each layer adds the same (every architecture here); refused when they do not (one line)."""
    if layers <= WHOLE_BUILD_LAYERS:
        return meta_counts(base)
    first = leading_layers(base) + 1  # past the leading layers unlike the rest (DeepSeek-V3's dense ones)
    one, two, three = (meta_counts(build_config(hf, label, n)) for n in (first, first + 1, first + 2))
    if any(two[k] - one[k] != three[k] - two[k] for k in ("params", "tensors")):
        raise UserError(f"{label}: model.hf.{layers_key(base)}: {layers:,} layers of an architecture whose layers "
                        f"differ cannot be counted without building it (at most {WHOLE_BUILD_LAYERS} here)")
    return {k: one[k] + (layers - first) * (two[k] - one[k]) for k in ("params", "tensors")} | {"empty": one["empty"]}


def worker_hf(model: Any) -> dict[str, Any]:
    """[model.hf] as the worker builds it: the resolved layer count under the config's own key."""
    hf = dict(model.hf or {})
    return with_layers(hf, _transformers().CONFIG_MAPPING[hf["model_type"]], model.n_layers)
