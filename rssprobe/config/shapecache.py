"""What transformers says of a config, kept so that the next estimate need not import it: the keys a model type
takes, a config's resolved counts, a model's exact tensor shapes.

Importing transformers (and torch under it) and building a model on the meta device is most of an answer's CPU
time (issue 41: 6.6 s for one from the packaged calibration) and all of a refusal's. Each answer is kept under the
cache root's shapes/, keyed by the installed transformers version (read without importing it), the source of the
modules that compute it (hfconfig, modelshape: a fix there is another key) and the question; an entry that is not
one is ignored and computed again. Only what transformers accepted is kept: a refusal is always computed.
"""

from __future__ import annotations

import hashlib
import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..store import layout, outputs, reader
from . import shippedshapes

COMPUTED_BY = ("hfconfig.py", "modelshape.py", "shapecache.py")


def _version() -> str | None:
    try:
        return version("transformers")
    except PackageNotFoundError:
        return None


def _code() -> str:
    here = Path(__file__).resolve().parent
    return hashlib.sha256(b"".join((here / name).read_bytes() for name in COMPUTED_BY)).hexdigest()[:16]


def stamp() -> tuple[str, str] | None:
    """(installed transformers version, the computing modules' code): what every kept answer is keyed by."""
    tf = _version()
    return None if tf is None else (tf, _code())


def path(kind: str, question: Any) -> Path | None:
    """Where the answer to `question` (JSON) of `kind` is kept; None without transformers."""
    now = stamp()
    if now is None:
        return None
    key = json.dumps({"kind": kind, "transformers": now[0], "code": now[1], "question": question}, sort_keys=True,
                     default=str)
    return layout.cache_root() / "shapes" / f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def get(kind: str, question: Any) -> Any:
    """The kept answer, else the shipped one (config/shippedshapes.py), or None."""
    where = path(kind, question)
    if where is None:
        return None
    if where.is_file():
        try:
            return reader.read_json_object(where, "shape cache").get("answer")
        except UserError:
            pass
    now = stamp()
    return None if now is None else shippedshapes.get(kind, question, now)


def put(kind: str, question: Any, answer: Any) -> None:
    """Keep `answer`; a cache that cannot be written is computed again next time."""
    where = path(kind, question)
    if where is None:
        return
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        outputs.write_json(where, {"kind": kind, "question": question, "answer": answer})
    except (OSError, UserError):
        pass
