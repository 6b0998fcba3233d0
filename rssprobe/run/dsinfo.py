"""DeepSpeed's own figures for an estimate, asked of the worker's Python (rssprobe.worker.dsinfo): its versions,
the ZeRO config defaults that size the partitions, and its own host-memory estimator's answer.

Asking costs that Python's import of torch and DeepSpeed (about 4 s of CPU here, most of an answer from the
packaged calibration), and the answer is arithmetic of the installed versions: it is kept under the cache root's
dsinfo/, keyed by the Python, the torch and DeepSpeed versions installed in it (read without importing them), the
source of the worker modules that answer, and the request. Another version installed is another key. For
rssprobe's own Python the answer is first read from DeepSpeed's installed source (run/dssource.py), nothing imported."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from ..contract.answers import DS_INFO_ANSWER, DeepSpeedInfo
from ..errors import UserError
from ..store import layout, outputs, reader
from . import ask as asking
from . import dssource, environment
from .host import package_version

# the worker modules whose code decides the answer: a change to them is another key
ANSWERED_BY = ("dsinfo.py", "training.py")


def ask(python: str, request: dict[str, Any]) -> DeepSpeedInfo:
    """The worker's DeepSpeed answer for `request` (params, largest_layer, ranks_per_node, nodes, stage,
    offload_param), from the cache when this Python's versions answered it before; UserError (one line) when that
    Python cannot say."""
    key = _key(python, request)
    path = cache_path(key)
    cached = _read(path)
    if cached is not None:
        return cached
    read = dssource.answer(python, request)  # rssprobe's own Python: read from DeepSpeed's source, not imported
    if read is not None:
        return read
    reply = asking.ask(python, ["-m", "rssprobe.worker.dsinfo", json.dumps(request)], DS_INFO_ANSWER,
                       environment.probe(python))
    if not isinstance(reply.answer, dict):
        why = reply.why or "not a JSON object"
        raise UserError(f"{python}: its DeepSpeed did not answer for the estimate's defaults ({why})")
    answer: DeepSpeedInfo = reply.answer
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            outputs.write_json(path, {"key": key, "answer": answer})
        except (OSError, UserError):
            pass  # a cache that cannot be written is asked again next time
    return answer


def _key(python: str, request: dict[str, Any]) -> dict[str, Any] | None:
    """What the answer depends on; None when the versions cannot be read (no cache then)."""
    own = None if python == sys.executable else python
    try:
        versions = {name: package_version(name, own) for name in ("torch", "deepspeed")}
    except UserError:
        return None
    if None in versions.values():
        return None
    worker = Path(__file__).resolve().parent.parent / "worker"
    code = hashlib.sha256(b"".join((worker / name).read_bytes() for name in ANSWERED_BY)).hexdigest()[:16]
    return {"python": python, **versions, "worker": code, "request": request}


def cache_path(key: dict[str, Any] | None) -> Path | None:
    """Where the answer of `key` (_key: a Python's versions and a request) is kept (None: not kept)."""
    if key is None:
        return None
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return layout.cache_root() / "dsinfo" / f"{digest}.json"


def _read(path: Path | None) -> DeepSpeedInfo | None:
    """A kept answer, or None (none kept, or one that is not an answer: asked again)."""
    if path is None or not path.is_file():
        return None
    try:
        data = reader.read_json_object(path, "dsinfo cache")
    except UserError:
        return None
    answer = data.get("answer")
    wanted = set(DeepSpeedInfo.__annotations__)
    return answer if isinstance(answer, dict) and set(answer) == wanted else None  # type: ignore[return-value]
