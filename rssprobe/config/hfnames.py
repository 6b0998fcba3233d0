"""What a Hugging Face config.json is, decided before torch and transformers are imported (3-4 s of CPU here).

The installed transformers' own tables of model types (`CONFIG_MAPPING_NAMES`) and of causal language models
(`MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`) are literals in its source (models/auto/auto_mappings.py, modeling_auto.py):
read here with `ast`, nothing imported, so a config.json that estimate cannot take (no model_type, a multimodal
config with a nested `text_config`, an encoder-decoder, a type this transformers does not know) is refused in one
line in well under a second. Where the source cannot be read (another layout), None: the caller imports
transformers and asks it (the same answer, slower).
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
from pathlib import Path
from typing import Any

from ..errors import UserError

# a config.json's keys that hold another model's config (a composite model: vision + text, encoder + decoder)
NESTED = ("text_config", "vision_config", "audio_config", "encoder", "decoder", "llm_config")


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def _root() -> Path | None:
    spec = importlib.util.find_spec("transformers")
    return Path(spec.origin).parent if spec and spec.origin else None


def _literal_mapping(path: Path, name: str) -> dict[str, str] | None:
    """The top-level `NAME = OrderedDict([(k, v), ...])` of a source file, as a dict (None: not found as such)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == name and isinstance(node.value, ast.Call) and node.value.args):
            try:
                pairs = ast.literal_eval(node.value.args[0])
            except ValueError:
                return None
            if isinstance(pairs, list) and all(isinstance(p, tuple) and len(p) == 2 for p in pairs):
                return {str(k): str(v) for k, v in pairs}
    return None


@functools.lru_cache(maxsize=1)
def tables() -> tuple[dict[str, str], dict[str, str]] | None:
    """(model type -> config class, model type -> causal LM class) of the installed transformers, or None."""
    root = _root()
    if root is None:
        return None
    configs = _literal_mapping(root / "models" / "auto" / "auto_mappings.py", "CONFIG_MAPPING_NAMES") \
        or _literal_mapping(root / "models" / "auto" / "configuration_auto.py", "CONFIG_MAPPING_NAMES")
    causal = _literal_mapping(root / "models" / "auto" / "modeling_auto.py", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES")
    return (configs, causal) if configs and causal else None


def check(data: dict[str, Any], where: str) -> None:
    """Refuse (one line, before any heavy import) a config.json estimate cannot take: no model_type, a composite
    (nested text_config: estimate its text model), an encoder-decoder, a type this transformers lacks or one with
    no causal language model."""
    model_type = data.get("model_type")
    if not isinstance(model_type, str):
        raise UserError(f"{where}: no model_type (a Hugging Face config.json names its model_type, e.g. \"llama\")")
    nested = [k for k in NESTED if isinstance(data.get(k), dict)]
    if "text_config" in nested:
        inner = data["text_config"].get("model_type")
        raise UserError(
            f"{where}: a multimodal config ({model_type}: its language model in text_config"
            + (f", beside {', '.join(k for k in nested if k != 'text_config')}" if len(nested) > 1 else "")
            + "); rssprobe estimates the text model alone: pass its text_config as a config.json of its own, "
            f"e.g. python -c \"import json; json.dump(json.load(open('{where}'))['text_config'], "
            "open('text_config.json', 'w'))\" then --hf-config text_config.json"
            + (f" (model_type {inner})" if isinstance(inner, str) else
               " (add its model_type, the text model's: e.g. gemma3_text)") + "; the other towers are not counted")
    if data.get("is_encoder_decoder") is True or {"encoder", "decoder"} <= set(nested):
        raise UserError(f"{where}: {model_type} is an encoder-decoder model; rssprobe estimate sizes decoder-only "
                        "causal language models (those AutoModelForCausalLM builds: llama, qwen3, mistral, gpt2, ...)")
    known = tables()
    if known is None:
        return  # transformers itself is asked (hfconfig.build_config), with the same refusals
    configs, causal = known
    if model_type not in configs and model_type not in causal:
        close = difflib.get_close_matches(model_type, list(configs), n=4)
        raise UserError(f"{where}: model_type {model_type!r} is not one transformers {_version()} knows"
                        + (f" (close: {', '.join(close)})" if close else ""))
    if model_type not in causal:
        raise UserError(f"{where}: {model_type!r} has no causal language model in the installed transformers "
                        "(AutoModelForCausalLM); rssprobe estimate sizes decoder-only causal language models")
