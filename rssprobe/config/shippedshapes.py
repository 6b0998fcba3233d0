"""What transformers says of the packaged models (rssprobe/data/models), shipped so that the first estimate on a
fresh machine (an empty cache root) need not import torch and transformers nor build a model on the meta device.

rssprobe/data/shapes.json holds config/shapecache.py's answers (the keys of every model type with a causal language
model, the packaged models' counts and exact shapes) as tools/shapes.py computed them, with the transformers
version and the computing modules' code (shapecache.stamp) they were computed under. It is read only when both
equal the installed ones: another transformers, or a change to hfconfig/modelshape/shapecache, and every answer is
computed as before (tests/test_shippedshapes.py fails until the file is written again).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

FILE = "shapes.json"
# False while tools/shapes.py computes the file's answers: computed, never read back from the file itself
READ = True


def entry_key(kind: str, question: Any) -> str:
    """One answer's name in the shipped file: its kind and question as JSON."""
    return json.dumps({"kind": kind, "question": question}, sort_keys=True, default=str)


@functools.lru_cache(maxsize=1)
def _entries(stamp: tuple[str, str]) -> dict[str, Any]:
    try:
        data = json.loads(resources.files("rssprobe.data").joinpath(FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or (data.get("transformers"), data.get("code")) != stamp:
        return {}  # computed for another transformers or other code: not the answer here
    entries = data.get("entries")
    if not isinstance(entries, list):
        return {}
    return {entry_key(e["kind"], e["question"]): e["answer"] for e in entries
            if isinstance(e, dict) and {"kind", "question", "answer"} <= set(e)}


def get(kind: str, question: Any, stamp: tuple[str, str]) -> Any:
    """The shipped answer to `question` of `kind` when it was computed under `stamp` (transformers version, code),
    else None."""
    return _entries(stamp).get(entry_key(kind, question)) if READ else None
