"""Write rssprobe/data/shapes.json (config/shippedshapes.py): what transformers says of the packaged models, so
that a first estimate on a fresh machine imports neither torch nor transformers (python -m tools.shapes [--check]).

Every answer is computed by the package's own code (config/hfconfig.py, config/modelshape.py) into an empty cache
root, exactly as an estimate of `--model NAME` computes it, and read back from there: the keys of every model type
with a causal language model in the installed transformers (a refusal of any config.json's key or value needs no
import), and each packaged model's counts and shapes. Run it after a change to those modules or another
transformers; --check compares instead of writing (exit 1 when the shipped file differs).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

FILE = Path(__file__).resolve().parent.parent / "rssprobe" / "data" / "shapes.json"


def causal_types() -> list[str]:
    """The model types with a causal language model in the installed transformers (config/hfnames.py's tables)."""
    from rssprobe.config import hfnames

    known = hfnames.tables()
    if known is None:
        raise SystemExit("transformers' auto tables cannot be read from its source")
    configs, causal = known
    return sorted(t for t in causal if t in configs)


def compute(models: list[str] | None = None, types: list[str] | None = None) -> dict[str, Any]:
    """The shipped file's content, computed now in an empty cache root (models: the packaged ones by default;
    types: every causal model type by default)."""
    from rssprobe.config import shapecache, shippedshapes

    stamp = shapecache.stamp()
    if stamp is None:
        raise SystemExit("transformers is not installed")
    with tempfile.TemporaryDirectory() as root:
        before = os.environ.get("RSSPROBE_CACHE")
        os.environ["RSSPROBE_CACHE"] = root
        shippedshapes.READ = False  # computed, never read back from the file being written
        try:
            _fill(models, types)
            kept = sorted((Path(root) / "shapes").glob("*.json"))
            entries = [json.loads(p.read_text(encoding="utf-8")) for p in kept]
        finally:
            shippedshapes.READ = True
            if before is None:
                os.environ.pop("RSSPROBE_CACHE", None)
            else:
                os.environ["RSSPROBE_CACHE"] = before
    entries.sort(key=lambda e: shippedshapes.entry_key(e["kind"], e["question"]))
    return {"transformers": stamp[0], "code": stamp[1], "entries": entries}


def _fill(models: list[str] | None, types: list[str] | None) -> None:
    """Ask every question the shipped file answers, as an estimate asks it: each answer is kept under the cache
    root in force (config/shapecache.py)."""
    from rssprobe.config import hfconfig, knownmodels, modelshape
    from rssprobe.config.scenariospec import ScenarioSpec

    for model_type in causal_types() if types is None else types:
        try:
            hfconfig.config_keys(model_type, model_type)
        except Exception:  # a type transformers cannot build a default config of: not shipped
            continue
    for name in knownmodels.names() if models is None else models:
        known = knownmodels.load(name)
        raw = knownmodels.raw_scenario(known.name, known.hf, known.title)
        scen = ScenarioSpec(ref=name).apply(raw, name)
        modelshape.layer_params(scen)
        modelshape.of(scen, scen.name)


def shipped_stamp() -> tuple[str, str] | None:
    """(transformers, code) the shipped file was computed under; None when it cannot be read."""
    try:
        data = json.loads(FILE.read_text(encoding="utf-8"))
        return str(data["transformers"]), str(data["code"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def warm() -> str:
    """Where the shipped file is not read (another transformers or code), compute its answers into the cache root
    in force (RSSPROBE_CACHE, else the user's); one line saying what was done."""
    from rssprobe.config import shapecache
    from rssprobe.store import layout

    now = shapecache.stamp()
    if now is None:
        return "shapes: transformers is not installed; nothing to compute"
    if shipped_stamp() == now:
        return f"shapes: the shipped file is for transformers {now[0]}; nothing to compute"
    _fill(None, None)
    kept = len(list((layout.cache_root() / "shapes").glob("*.json")))
    return (f"shapes: computed for transformers {now[0]} (the shipped file is for another) under "
            f"{layout.cache_root() / 'shapes'} (it holds {kept} answers)")


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n"


def main(argv: list[str]) -> int:
    if "--warm" in argv:
        print(warm())
        return 0
    text = render(compute())
    if "--check" in argv:
        same = FILE.is_file() and FILE.read_text(encoding="utf-8") == text
        print(f"{FILE}: {'up to date' if same else 'differs from what is computed now: python -m tools.shapes'}")
        return 0 if same else 1
    FILE.write_text(text, encoding="utf-8")
    print(f"wrote {FILE} ({len(text):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
