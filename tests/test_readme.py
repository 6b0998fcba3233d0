"""The README is the user's guide: short, its task sections where a newcomer looks, and its demo excerpt what
today's rssprobe prints for the recorded demo runs (tools/readme.py). No test here trains."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
TASKS = ("Does this PR change host RAM?", "Gate it in CI", "How much host RAM will my run need?",
         "Where does my script's memory go?", "Which release changed it?")


def test_the_readme_is_a_guide() -> None:
    lines = README.splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: reference belongs in docs/"
    assert lines[0] == "# rssprobe" and "make demo" in "\n".join(lines[:12]) and "make test" in "\n".join(lines[:12])
    headings = [line[3:] for line in lines if line.startswith("## ")]
    assert all(task in headings for task in TASKS), headings
    assert not re.search(r"\b(DEMO_COLD|DEMO_WARM|ANSWER_7693|ESTIMATE_SECTION)\b", README), "a placeholder is left"
    assert " here" not in README.replace("where", ""), "say which machine a figure was measured on, not 'here'"


def test_every_link_in_the_readme_exists() -> None:
    for target in re.findall(r"\]\(([^)#]+)", README):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target


def test_the_demo_excerpt_is_what_rssprobe_prints() -> None:
    proc = subprocess.run([sys.executable, "-m", "tools.readme", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "patched\nPR #8132 leaves DeepSpeed's live buffers" in README  # the lead, the excerpt's first line
    assert "Gate: PASS (exit 0)" in README  # the answer is in the excerpt, the gate's word after the lead
