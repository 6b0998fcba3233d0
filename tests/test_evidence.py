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
    ranks = _extracted(REPORTS / "estimate" / "ranks.tar.gz", tmp / "ranks")
    return _printed(lambda: estimate.report(REPORTS / "estimate" / "estimate.md.in", REPORTS / "estimate" /
                                            "heldout.toml", root / "out", root / "before", root / "proj", ranks))


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


def test_the_field_page_judges_by_what_happened() -> None:
    """Known answers for reports/field.md's judgement (issue 41 item 6): a job that ran out is judged right only by
    "does not fit"/"may not fit", at the phase it died in when its thread names one (a phase without an estimate is
    never "right"); a job that fit, by its central estimate against what it used; the 15% goal by the provision."""
    from tools.evidence import field
    gib = field.GIB

    def record(*rows: tuple[str, float | None, str]) -> dict:
        ps = [{"key": k, "phase": k, "measured": b is not None, **({"bytes": b * gib, "upper_bytes": b * gib * 1.1,
                                                                   "verdict": w} if b is not None else {})}
              for k, b, w in rows]
        top = max(p["upper_bytes"] for p in ps if p["measured"])
        return {"estimate": {"phases": ps, "provision": {"bytes": top}}}

    oom = field.Case("x", "r", "l", "c", "h", (), "oom", phase=("initialize_peak",))
    fits_init = record(("initialize_peak", 100, "fits"), ("steady", 120, "may not fit"))
    assert (field.judge(fits_init, oom), field.judge_phase(fits_init, oom)) == ("right", "wrong")
    died_saving = field.Case("x", "r", "l", "c", "h", (), "oom", phase=field.SAVES)
    unsaved = record(("steady", 100, "fits"), ("checkpoint_save", None, ""))
    assert field.said(unsaved, died_saving) == "fits; not estimated where it died"
    assert (field.judge(unsaved, died_saving), field.judge_phase(unsaved, died_saving)) == ("wrong", "wrong")
    saved = record(("steady", 100, "fits"), ("model_save", 200, "does not fit"))
    assert (field.judge(saved, died_saving), field.judge_phase(saved, died_saving)) == ("right", "right")
    assert field.judge({"error": "refused"}, died_saving) == "wrong"
    trained = field.Case("x", "r", "l", "c", "h", (), "fit", used=(90, 100))
    assert field.judge(record(("steady", 95, "may not fit")), trained) == "right"  # provision 104.5: within 15%
    assert field.goal_met(record(("steady", 95, "may not fit")), trained) is True
    assert field.judge(record(("steady", 101, "does not fit")), trained) == "wrong"
    assert field.goal_met(record(("steady", 80, "fits")), trained) is False  # provision 88 < what it used
