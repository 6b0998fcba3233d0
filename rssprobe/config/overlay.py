"""Source patches (--patch-file): unified diffs applied to an overlay, never to installed files.

The overlay holds copies of the Python modules a diff touches, patched; the worker's
import hook (rssprobe.worker.overlay_import) loads those modules from the overlay and
everything else from the installed package. Only the touched modules are copied because
DeepSpeed JIT-compiles its C++ ops from paths inside its package: a whole-package copy
in every run directory would recompile the ops (~2 minutes) for every patched run. For
the same reason a diff that touches non-Python files is refused.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
from pathlib import Path, PurePosixPath

from ..errors import UserError
from ..store import outputs, reader

PATCHABLE = ("deepspeed", "torch")


def _targets(diff: Path, text: str) -> list[str]:
    """Package-relative paths a diff writes to ('deepspeed/runtime/x.py'), checked for escapes."""
    paths = []
    for line in text.splitlines():
        if not line.startswith(("--- ", "+++ ")):
            continue
        raw = line[4:].split("\t")[0].strip()
        if raw == "/dev/null":
            continue
        if raw.startswith("/"):
            raise UserError(f"{diff}: path {raw} is absolute; it would escape the overlay")
        parts = PurePosixPath(raw).parts
        if raw.startswith(("a/", "b/")):
            parts = parts[1:]
        if ".." in parts:
            raise UserError(f"{diff}: path {raw} contains '..'; it would escape the overlay")
        if not parts or parts[0] not in PATCHABLE:
            raise UserError(f"{diff}: path {raw} is not inside an installed package ({', '.join(PATCHABLE)}); "
                            "diff paths are relative to site-packages, e.g. a/deepspeed/runtime/...")
        if not raw.endswith(".py"):
            raise UserError(f"{diff}: {raw} is not a Python file; only Python modules can be overlaid")
        rel = "/".join(parts)
        if rel not in paths:
            paths.append(rel)
    if not paths:
        raise UserError(f"{diff}: no file headers (---/+++) found; not a unified diff")
    return paths


def site_packages_of(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"{package}: not installed for this Python")
    return Path(next(iter(spec.submodule_search_locations))).parent


def read_diffs(diffs: list[Path]) -> dict[Path, str]:
    """Each diff's text, read and its file headers checked (UserError otherwise): done before a run
    directory exists, so a diff that cannot be used leaves nothing behind."""
    texts = {}
    for diff in diffs:
        outputs.note(diff)  # an input (store/outputs.py)
        texts[diff] = reader.read_text(diff)
        _targets(diff, texts[diff])
    return texts


def prepare(diffs: list[Path], overlay: Path) -> list[dict[str, str]]:
    """Copy the touched modules into `overlay`, apply every diff there; returns manifest records.

    Fails before any run starts, naming the diff and the hunk that does not apply.
    """
    records = []
    texts = read_diffs(diffs)
    overlay.mkdir(parents=True, exist_ok=True)
    for diff, text in texts.items():
        for rel in _targets(diff, text):
            source = site_packages_of(rel.split("/")[0]) / rel
            dest = overlay / rel
            if not dest.exists():
                if not source.exists():
                    raise UserError(f"{diff}: {rel} does not exist in the installed package")
                dest.parent.mkdir(parents=True, exist_ok=True)
                outputs.replace(dest, reader.read_bytes(source))  # a link left at dest: replaced
                shutil.copystat(source, dest)
    for diff, text in texts.items():
        strip = "1" if any(line.startswith("--- a/") for line in text.splitlines()) else "0"
        for check in (True, False):
            args = ["git", "apply", f"-p{strip}", "--verbose", *(["--check"] if check else []), str(diff.resolve())]
            proc = subprocess.run(args, cwd=overlay, capture_output=True, text=True)
            if proc.returncode != 0:
                errors = [ln.removeprefix("error: ") for ln in proc.stderr.splitlines() if ln.startswith("error:")]
                hunk = next((e for e in errors if e.startswith("patch failed:")), None)
                why = hunk or (errors[-1] if errors else proc.stderr.strip())
                raise UserError(f"{diff}: does not apply to the installed package: {why}")
        records.append({"file": str(diff), "sha256": hashlib.sha256(text.encode()).hexdigest(),
                        "touches": ", ".join(_targets(diff, text))})
    return records
