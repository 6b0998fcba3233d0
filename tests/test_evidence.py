"""The evidence pages stay reproducible through refactors (issue 44): reports/ holds pages, archives, inputs and
shell scripts that call the command line; the Python that reads runs through rssprobe's library lives in
tools/evidence/, where this file reaches it.

The pages whose generators take seconds are regenerated here from their committed archives and compared byte for
byte: a change to a figure, a reader or a word they print fails here, and the page is regenerated on purpose
(its command is on the page). The answer page of issue 7693 is held by tests/test_fixes.py (it asks `rssprobe diff`
in fresh processes: the integration lane); the packed H200 calibration is data, not a page.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports"
EVIDENCE = ROOT / "tools" / "evidence"


def test_no_script_under_reports_imports_rssprobe() -> None:
    """The rule (docs/developing.md, "Evidence"): reports/ reads runs through the command line only."""
    offenders = []
    for path in sorted(REPORTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in ("rssprobe", "tools")]
    assert offenders == []


def test_every_evidence_module_imports() -> None:
    """A renamed or removed name it imports fails here, not on the day its page is regenerated."""
    for path in sorted(EVIDENCE.rglob("*.py")):
        importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))


def _extracted(archive: Path, into: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into


def _printed(call: Callable[[], object]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        returned = call()
    return returned if isinstance(returned, str) else out.getvalue()


def _your_job(tmp: Path) -> str:
    from tools.evidence import your_job
    root = _extracted(REPORTS / "your-job" / "runs.tar.gz", tmp)
    return _printed(lambda: your_job.main(root))


def _cuda_pinned(table: str, names: tuple[str, ...]) -> Callable[[Path], str]:
    def make(tmp: Path) -> str:
        from tools.evidence import cuda_pinned
        root = _extracted(REPORTS / "cuda-pinned" / "runs.tar.gz", tmp)
        return _printed(lambda: getattr(cuda_pinned, table)([str(root / n) for n in names]))
    return make


def _estimate(tmp: Path) -> str:
    from tools.evidence import estimate
    root = _extracted(REPORTS / "estimate" / "heldout.tar.gz", tmp)
    return _printed(lambda: estimate.report(REPORTS / "estimate" / "estimate.md.in", REPORTS / "estimate" /
                                            "heldout.toml", root / "out", root / "before", root / "proj"))


def _field(tmp: Path) -> str:
    from tools.evidence import field
    return field.page(REPORTS / "field")


PAGES: dict[str, Callable[[Path], str]] = {
    "field.md": _field,
    "your-job.md": _your_job,
    "cuda-pinned/releases.md": _cuda_pinned("releases", ("release-ws1", "release-ws2", "release-ws8")),
    "cuda-pinned/fixes.md": _cuda_pinned("runs", ("fix-baseline", "fix-pin.register", "fix-knob")),
    "estimate.md": _estimate,
}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_page_regenerates_byte_for_byte_from_its_archive(page: str, tmp_path: Path) -> None:
    assert PAGES[page](tmp_path) == (REPORTS / page).read_text(encoding="utf-8")
