"""python -m tools.readme [--check]: the README's demo excerpt and its picture, made from real runs.

The excerpt between `<!-- demo-output:start -->` and `<!-- demo-output:end -->` is what `rssprobe diff` prints for
the runs in reports/readme/runs.tar.gz (the default scenario, 3 baseline and 3 PR #8132 runs made by `make demo`),
at 110 columns; docs/img/change.png is that comparison's chart from `rssprobe report`. --check changes nothing and
exits 1 when the README's excerpt is not what today's rssprobe prints (tests/test_readme.py runs it), so the
README cannot go stale. To refresh the runs themselves: `make demo`, then
`tar czf reports/readme/runs.tar.gz -C reports/demo baseline patched` and this script.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
RUNS = ROOT / "reports" / "readme" / "runs.tar.gz"
PICTURE = ROOT / "docs" / "img" / "change.png"
START, END = "<!-- demo-output:start -->", "<!-- demo-output:end -->"
COLUMNS = "110"


def rssprobe(*args: str, cwd: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "rssprobe", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": COLUMNS, "PYTHONPATH": str(ROOT)}, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"rssprobe {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return proc.stdout


def excerpt(work: Path, picture: Path | None = None) -> str:
    """The README block: the diff of the recorded runs as a terminal shows it (and, given `picture`, its chart)."""
    with tarfile.open(RUNS) as tar:
        tar.extractall(work, filter="data")
    text = rssprobe("diff", "baseline", "patched", cwd=work)
    if picture is not None:
        rssprobe("report", "baseline", "patched", "--out", "report", cwd=work)
        picture.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(work / "report" / "change.png", picture)
    lines = [line.rstrip() for line in text.splitlines()]
    cut = next((i for i, line in enumerate(lines) if line.startswith("What differs")), len(lines))
    body = "\n".join([*lines[:cut], "(then what differs between A and B; every figure's table with --all)"])
    return f"{START}\n```text\n$ rssprobe diff reports/demo/baseline reports/demo/patched\n{body}\n```\n{END}"


def current() -> str:
    text = README.read_text(encoding="utf-8")
    return text[text.index(START): text.index(END) + len(END)]


@click.command()
@click.option("--check", is_flag=True, help="Change nothing; exit 1 if the README's excerpt is stale.")
def main(check: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = excerpt(Path(tmp), None if check else PICTURE)
    if check:
        if fresh != current():
            raise SystemExit("README.md: the demo excerpt is not what rssprobe prints now: run python -m tools.readme")
        return
    README.write_text(README.read_text(encoding="utf-8").replace(current(), fresh), encoding="utf-8")
    click.echo(f"README.md excerpt and {PICTURE.relative_to(ROOT)} written")


if __name__ == "__main__":
    main()
