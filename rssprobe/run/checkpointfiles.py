"""Whether a cached checkpoint (run/checkpoints.py) is whole, read from its files without loading a tensor: its
config.json, its index (when sharded), every shard the index names, and each shard's own framing (a safetensors
header: 8 bytes little-endian length, then that much JSON whose tensors' data_offsets must cover the rest of the
file exactly; a .bin: a zip whose central directory and members lie inside the file). A truncated, missing or
damaged file would otherwise be loaded by every run of that shape, each failing in the worker after its start
("SafetensorError ... incomplete metadata"), naming no path."""

from __future__ import annotations

import json
import os
import stat
import struct
import zipfile
from pathlib import Path
from typing import Any

# a safetensors header larger than this is not one (the format's own reader caps it at 100 MB)
MAX_HEADER_BYTES = 100_000_000
# config.json and an index are small JSON files; a larger one is not what save_pretrained wrote
MAX_JSON_BYTES = 64 << 20

FILES = {"safetensors": ("model.safetensors", "model.safetensors.index.json"),
         "bin": ("pytorch_model.bin", "pytorch_model.bin.index.json")}


def _regular(path: Path) -> int:
    """The size of a regular file; ValueError naming what it is otherwise."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise ValueError(f"{path.name} is missing") from None
    except OSError as e:
        raise ValueError(f"{path.name} cannot be read ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{path.name} is not a regular file")
    return st.st_size


def _json(path: Path) -> Any:
    size = _regular(path)
    if size > MAX_JSON_BYTES:
        raise ValueError(f"{path.name} is {size:,} bytes, not a checkpoint's JSON")
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError, RecursionError) as e:
        raise ValueError(f"{path.name} is not JSON ({str(e)[:80]})") from None


def safetensors_tensors(path: Path) -> set[str]:
    """The tensor names of a whole safetensors file; ValueError saying how it is damaged."""
    size = _regular(path)
    if size < 8:
        raise ValueError(f"{path.name} is {size} bytes: shorter than a safetensors header")
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > MAX_HEADER_BYTES or 8 + n > size:
            raise ValueError(f"{path.name}: its header claims {n:,} bytes, the file has {size:,} (truncated)")
        try:
            header = json.loads(f.read(n))
        except (ValueError, RecursionError):
            raise ValueError(f"{path.name}: its header is not JSON") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path.name}: its header is not a JSON object")
    data = size - 8 - n
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            raise ValueError(f"{path.name}: tensor {name!r} has no valid data_offsets")
        end = max(end, offsets[1])
    if end != data:
        raise ValueError(f"{path.name}: its tensors need {end:,} bytes of data, the file holds {data:,} "
                         f"({'truncated' if end > data else 'trailing bytes'})")
    return {k for k in header if k != "__metadata__"}


def bin_tensors(path: Path) -> None:
    """A torch.save zip whose central directory and every member lie inside the file; ValueError otherwise."""
    size = _regular(path)
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if info.header_offset + info.compress_size > size:
                    raise ValueError(f"{path.name}: member {info.filename} runs past the end of the file")
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise ValueError(f"{path.name} is not a whole torch checkpoint ({e})") from None


def damage(directory: Path, fmt: str) -> str | None:
    """Why the checkpoint in `directory` cannot be loaded as it is (None: it is whole)."""
    try:
        if not directory.is_dir() or directory.is_symlink():
            return "not a directory"
        config = _json(directory / "config.json")
        if not isinstance(config, dict) or "model_type" not in config:
            return "config.json is not a model's config"
        single, index = FILES[fmt]
        if (directory / index).exists():
            found = _json(directory / index)
            weights = found.get("weight_map") if isinstance(found, dict) else None
            if not isinstance(weights, dict) or not weights or not all(isinstance(v, str) and "/" not in v
                                                                       for v in weights.values()):
                return f"{index} has no weight_map of shard files"
            shards: dict[str, set[str]] = {}
            for tensor, shard in weights.items():
                shards.setdefault(shard, set()).add(tensor)
        else:
            shards = {single: set()}
        for shard, tensors in shards.items():
            if fmt == "safetensors":
                missing = tensors - safetensors_tensors(directory / shard)
                if missing:
                    return f"{shard} lacks {len(missing)} tensor(s) its index names, e.g. {sorted(missing)[0]}"
            else:
                bin_tensors(directory / shard)
    except ValueError as e:
        return str(e)
    return None
