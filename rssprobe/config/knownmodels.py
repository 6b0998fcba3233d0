"""The shapes of well-known public models (`estimate --model NAME`) and of a user's Hugging Face config.json
(`estimate --hf-config PATH`), as scenarios to estimate: nothing is downloaded, the model is built on the meta
device.

Each shipped model is a TOML file under rssprobe/data/models/ holding the keys of its published config.json that
decide the parameter tensors, where they come from (`source`), other names it goes by (`aliases`: the Hugging
Face id, say) and the parameter count they build (`params`, which the tests check). A config.json is read as
hostile input (one line, exit 2, for a file that is not a JSON object); of its keys those the transformers config
class knows are kept (`architectures`, `torch_dtype`, `transformers_version`, ... are not shapes), and named.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..store import reader
from . import hfconfig, hfnames

PACKAGE = "rssprobe.data"
FOLDER = "models"
# What a model target trains, where the model does not say: bf16, ZeRO-2 with the optimizer offloaded (the stage
# and the parameters' offload come from the command), a short sequence (activations live on the device on CUDA;
# on the CPU accelerator the calibration's proxy measures its own)
TRAINING = {"precision": "bf16", "steps": 12, "micro_batch": 1}
SEQ_LEN = 32


@dataclass(frozen=True)
class KnownModel:
    name: str
    title: str
    source: str
    aliases: tuple[str, ...]
    params: int
    hf: dict[str, Any]


def _folder() -> Any:
    return resources.files(PACKAGE).joinpath(FOLDER)


def names() -> list[str]:
    return sorted(p.name[:-5] for p in _folder().iterdir() if p.name.endswith(".toml"))


def load(name: str) -> KnownModel:
    """The shipped model NAME (its file name, or an alias such as its Hugging Face id; any case); UserError with
    the close names otherwise."""
    wanted = name.strip().lower()
    for stem in names():
        raw = reader.read_toml(Path(str(_folder().joinpath(f"{stem}.toml"))))
        aliases = tuple(str(a) for a in raw.get("aliases", []))
        if wanted == stem or wanted in (a.lower() for a in aliases):
            return KnownModel(stem, str(raw["title"]), str(raw["source"]), aliases, int(raw["params"]),
                              dict(raw["hf"]))
    close = difflib.get_close_matches(wanted, names(), n=3, cutoff=0.5)
    raise UserError(f"--model {name}: not a model rssprobe ships (" + (f"close: {', '.join(close)}; " if close else "")
                    + f"known: {', '.join(names())}; any other: --hf-config its config.json)")


# a config.json's keys that describe the file, not the model (left out, and named, whatever the model reads)
METADATA = frozenset({"architectures", "transformers_version", "torch_dtype", "dtype", "_name_or_path", "auto_map"})


def from_config_json(path: Path) -> tuple[dict[str, Any], list[str]]:
    """The keys of a Hugging Face config.json that its model reads (its config class's fields and what its
    modeling code reads: hfconfig._known_keys) and the keys left out. What estimate cannot take is refused first,
    before transformers is imported (config/hfnames.py: a multimodal or encoder-decoder config, an unknown type)."""
    data = reader.read_json_object(path, "Hugging Face config.json")
    hfnames.check(data, str(path))
    model_type = data["model_type"]
    known = hfconfig.config_keys(model_type, f"{path}: model_type").keys  # kept: no transformers import
    # None is "the default" in a config.json (and has no TOML form); a nested config is refused above
    kept = {k: v for k, v in data.items() if k in known and k not in METADATA and v is not None
            and not isinstance(v, dict)}
    return kept, sorted(k for k in data if k not in kept and data[k] is not None)


def raw_scenario(name: str, hf: dict[str, Any], description: str) -> dict[str, Any]:
    """A transformers scenario's tables for a model's config (ZeRO-2, optimizer offloaded; --set changes it)."""
    return {"name": name, "description": description, **TRAINING,
            "model": {"kind": "transformers", "seq_len": SEQ_LEN, "hf": dict(hf)},
            "zero": {"stage": 2, "offload_optimizer": "cpu", "gradient_clipping": 1.0}}
