"""memray captures (--memray) -> top native allocation sites per phase, in bytes per parameter.

Each record's stack (native and Python frames, innermost first) is attributed to the
innermost instrumented DeepSpeed site on it, else to the first DeepSpeed frame, else to
the innermost Python frame: the same question the site table answers, from stacks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..contract.files import MEMRAY_PHASES, memray_file
from ..store.reader import check_regular
from .metrics import short_name

KINDS = {"leaked": "get_leaked_allocation_records", "high_watermark": "get_high_watermark_allocation_records"}


def _site_frames(sites: list[str]) -> list[tuple[tuple[str, ...], str, str]]:
    """(file suffixes, function name, label) per site: 'a.b.Class.meth' -> (('a/b.py',), 'meth', 'Class.meth')."""
    out = []
    for path in sites:
        parts = path.split(".")
        cut = next((i for i, p in enumerate(parts) if p[:1].isupper()), len(parts) - 1)
        module = "/".join(parts[:cut])
        suffixes = (f"{module}.py",) if cut < len(parts) - 1 else (f"{module}.py", f"{module}/__init__.py")
        out.append((suffixes, parts[-1], short_name(path)))
    return out


def attribute(stack: list[tuple[str, str, int]], site_frames: list[tuple[tuple[str, ...], str, str]]) -> str:
    for func, filename, _line in stack:
        for suffix, name, label in site_frames:
            if func == name and filename.endswith(suffix):  # str.endswith takes a tuple
                return label
    for func, filename, line in stack:
        if "/deepspeed/" in filename:
            return f"deepspeed/{filename.split('/deepspeed/', 1)[1]}:{line} {func}"
    for func, filename, line in stack:
        if filename.endswith(".py"):
            return f"{Path(filename).name}:{line} {func}"
    return stack[0][0] if stack else "(no stack)"


def analyse(run_dir: Path, sites: list[str], top: int = 10) -> dict[str, Any] | None:
    """{phase: {kind: [{where, bytes, allocations}]}} or None when no capture exists."""
    files = {phase: run_dir / memray_file(phase) for phase in MEMRAY_PHASES}
    if not any(f.exists() for f in files.values()):
        return None
    from memray import FileReader

    frames = _site_frames(sites)
    out: dict[str, Any] = {}
    for phase, path in files.items():
        if not path.exists():
            continue
        check_regular(path)  # memray opens it itself: a FIFO or a directory is refused here first
        reader = FileReader(path)
        try:
            out[phase] = {}
            for kind, getter in KINDS.items():
                totals: dict[str, list[int]] = {}
                for record in getattr(reader, getter)(merge_threads=True):
                    where = attribute(list(record.hybrid_stack_trace()), frames)
                    entry = totals.setdefault(where, [0, 0])
                    entry[0] += record.size
                    entry[1] += record.n_allocations
                ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]
                out[phase][kind] = [{"where": w, "bytes": b, "allocations": n} for w, (b, n) in ranked]
        finally:
            reader.close()
    return out
