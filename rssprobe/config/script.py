"""A training script as a run configuration: `rssprobe run --script train.py [-- ARGS]`.

A script run is a scenario whose model is the script's (model.kind = "script") and whose [script] table names
the file, its sha256 and its arguments, so every command that takes a scenario (run, gate, matrix, bisect,
prepare) takes a script the same way and the manifest records it whole. The script's own DeepSpeed config
decides ZeRO stage, precision, batch and accumulation: the engine's figures are written into the manifest's
scenario when the run concludes (rssprobe/run/scriptrun.py), and `--set` takes only what rssprobe decides
(steps: stop after N optimizer steps, world_size, timeout_s, probes.*, patches.*). The worker side is
rssprobe/worker/script.py.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tokenize
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..store import outputs, reader

# --set keys a script run takes (a prefix ending in "." takes the whole table)
SCRIPT_SETS = ("steps", "world_size", "timeout_s", "seed", "name", "description", "probes.", "patches.",
               "torch_alloc_conf",
               "script.args", "script.stop_after", "script.command")


# The most a script may weigh: it is read whole and compiled before any worker starts (a FIFO or /dev/zero
# named as a script is refused by the damaged-file reader: only a regular file is read). 16 MiB of Python
# source is far beyond any training script; a larger file is not read into memory.
MAX_SCRIPT_BYTES = 16 << 20


def check_file(path: Path, sha256: str | None = None) -> tuple[Path, str, str]:
    """(absolute path, sha256, text) of a script that can run; one line naming it and why otherwise. Read through
    the damaged-file reader (a regular file, opened without blocking, at most MAX_SCRIPT_BYTES); decoded as
    Python decodes source (UTF-8, a byte-order mark, or the encoding a coding line declares); `sha256`: the
    hash a [script] table declares, which the file must still have."""
    outputs.note(path)  # an input: nothing this command writes may land over it (store/outputs.py)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise UserError(f"{path}: no such script") from None
    except OSError as e:
        raise UserError(f"{path}: cannot be read ({e.strerror or e})") from None
    if stat.S_ISDIR(mode):
        raise UserError(f"{path}: is a directory, not a training script")
    data = reader.read_bytes(path, MAX_SCRIPT_BYTES)
    digest = hashlib.sha256(data).hexdigest()
    if sha256 is not None and sha256 != digest:
        raise UserError(f"{path}: its sha256 is {digest[:12]}..., not the {str(sha256)[:12]}... its [script] table "
                        "declares (the file changed since; drop sha256 to take it as it is)")
    try:
        encoding = tokenize.detect_encoding(io.BytesIO(data).readline)[0]
    except SyntaxError as e:  # a first line not UTF-8, a coding line naming no encoding, or contradicting a BOM
        encoding = "utf-8"
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            pass  # named below, with the byte
        else:
            raise UserError(f"{path}: not Python source ({e.msg})") from None
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as e:
        name = "UTF-8" if encoding in ("utf-8", "utf-8-sig") else encoding
        raise UserError(f"{path}: not {name} (byte {e.start}); Python source must be UTF-8 or declare its "
                        "encoding") from None
    try:
        compile(text, str(path), "exec", dont_inherit=True)
    except SyntaxError as e:
        raise UserError(f"{path.name}:{e.lineno}: SyntaxError: {e.msg}") from None
    except ValueError as e:  # a NUL byte
        raise UserError(f"{path}: not Python source ({e})") from None
    return path.resolve(), digest, text


def raw_scenario(path: Path) -> tuple[str, dict[str, Any]]:
    """(label for messages, the raw scenario of a script run)."""
    resolved, sha256, _text = check_file(path)
    return str(path), {"name": resolved.stem, "description": f"the script {resolved}", "steps": None,
                       "model": {"kind": "script"}, "script": {"path": str(resolved), "sha256": sha256}}


def check_overrides(overrides: list[str], label: str) -> list[str]:
    """--set values a script run takes; `steps=N` becomes script.stop_after (the script's loop decides
    the count; rssprobe stops it after N optimizer steps)."""
    out = []
    for item in overrides:
        key = item.partition("=")[0].strip()
        if not any(key == k or (k.endswith(".") and key.startswith(k)) for k in SCRIPT_SETS):
            raise UserError(f"{label}: --set {key}: a script run takes its model and DeepSpeed config from the "
                            "script; --set takes steps, world_size, timeout_s, torch_alloc_conf, probes.* "
                            "and patches.*")
        out.append("script.stop_after" + item[len(key):] if key == "steps" else item)
    return out


def split_command(command: list[str]) -> tuple[str, list[str]]:
    """(the training script, its arguments) in a launch command line (`deepspeed --num_gpus 2 train.py --x 1`,
    `torchrun ... train.py`, `accelerate launch ... train.py`, `python train.py`): the first word naming a .py
    file; one line when there is none (rssprobe probes the ranks that run a Python script)."""
    for i, word in enumerate(command):
        if word.endswith(".py") and Path(word).is_file():
            return word, command[i + 1:]
    if any(word == "-m" for word in command):
        raise UserError(f"{' '.join(command)}: a module (-m) is not a script rssprobe can probe; name the .py file")
    raise UserError(f"{' '.join(command)}: no training script (an existing .py file) in the command")


def different(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Why two runs' scenarios ran different scripts (path or content), or None."""
    sa, sb = a.get("script"), b.get("script")
    if not sa or not sb:
        return None
    if sa.get("path") != sb.get("path"):
        return f"A ran {sa.get('path')} but B ran {sb.get('path')}"
    if sa.get("sha256") != sb.get("sha256"):
        return (f"{Path(sa.get('path') or '').name} changed between the runs (sha256 {str(sa.get('sha256'))[:12]} "
                f"against {str(sb.get('sha256'))[:12]})")
    return None
