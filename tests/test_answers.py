"""Every output opens with the sentence that answers its user's question, in words and numbers, and never
contradicts the figures under it (rssprobe/analysis/answers.py). The real comparison is the demo's
(reports/readme/runs.tar.gz: default scenario, 3 baseline vs 3 PR #8132 runs); the other verdicts are that same
comparison with one figure's verdict changed, so each sentence is checked against the case it must describe.
No test here trains."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from rssprobe import verdicts
from rssprobe.analysis import answers

from .conftest import rssprobe

TRIM = "budget.rss_after_trim_above_baseline"


@pytest.fixture(scope="module")
def demo(demo_runs: Path) -> Path:
    return demo_runs


@pytest.fixture(scope="module")
def compared(demo_compared: dict[str, Any]) -> dict[str, Any]:
    return demo_compared


def first_line(text: str) -> str:
    return text.splitlines()[0].strip()


def test_diff_gate_and_show_print_their_answer_first(demo: Path, compared: dict[str, Any], tmp_path: Path) -> None:
    a, b = str(demo / "baseline"), str(demo / "patched")
    assert compared["verdict"] == "pass" and compared["answer"][0].startswith("PR #8132 leaves DeepSpeed's live")
    # the terminal wraps at its width (COLUMNS=200 in these tests): the first line is the answer's beginning
    assert compared["answer"][0].startswith(first_line(rssprobe("diff", a, b, check=True).stdout))
    summary_file = tmp_path / "summary.md"
    gate = rssprobe("gate", "--reference", a, "--candidate", b, env={"GITHUB_STEP_SUMMARY": str(summary_file)})
    # the gate's answer is its word and exit code, then diff's lead
    gate_answer = answers.comparison({k: v for k, v in compared.items() if k != "answer"}, gate_first=True)
    assert gate_answer[0].startswith("Gate: PASS (exit 0): no gated figure") and gate_answer[1] == compared["answer"][0]
    assert gate.returncode == 0 and first_line(gate.stdout).startswith("Gate: PASS (exit 0)")
    assert summary_file.read_text().startswith("**Gate: PASS (exit 0)")
    for ref in (demo / "baseline" / "run-01", demo / "baseline"):
        data = json.loads(rssprobe("show", str(ref), "--format", "json", check=True).stdout)
        assert data["answer"][0].startswith(first_line(rssprobe("show", str(ref), check=True).stdout))
    run = json.loads(rssprobe("show", str(demo / "baseline" / "run-01"), "--format", "json", check=True).stdout)
    m = run["metrics"]
    assert f"holds {m['budget.rss_above_baseline']:.2f} B/param" in run["answer"][0]
    assert f"{m['budget.live']:.2f} of it live ZeRO buffers" in run["answer"][0]


def test_the_lead_names_every_figure_with_its_interval(compared: dict[str, Any]) -> None:
    """The lead answers "does PR #8132 change host RAM, where, by how much": each of its figures by the reviewer's
    words with B - A and the simultaneous interval the key table prints; the patches' firing reads as English."""
    text = " ".join(compared["answer"])
    for e in compared["lead"]["effects"]:
        assert f"{answers.lead_words(e['metric'])} ({answers.interval_text(e)})" in text, e["metric"]
    assert "PR #8132 took effect in every run of patched: pr8132.float-scale 12 times per run, pr8132.malloc-trim " \
           "once per run." in text
    assert "The patches of" not in text


def _with(compared: dict[str, Any], metric: str, verdict: str, delta: float, problems: list[str] | None = None
          ) -> dict[str, Any]:
    """The demo's comparison with one figure's verdict (and change) set, the overall verdict recomputed."""
    r = copy.deepcopy(compared)
    for group in r["comparisons"].values():
        for c in group:
            if c["metric"] == metric:
                c.update(verdict=verdict, delta=delta, mean_b=c["mean_a"] + delta)
    r["problems"] = problems or []
    r["verdict"] = verdicts.overall([c["verdict"] for g in r["comparisons"].values() for c in g if c["gated"]],
                                    bool(r["problems"]))
    return r


@pytest.mark.parametrize(("verdict", "delta", "says"), [
    ("regression", 0.8, "Gate: FAIL (exit 1): RSS after a final trim +0.80"),
    ("improvement", -0.8, "Gate: PASS (exit 0), an improvement: RSS after a final trim -0.80"),
    ("~", 0.4, "Gate: UNDECIDED (exit 125): RSS after a final trim +0.40 B/param, past the 0.25 B/param threshold, "
               "but 3 vs 3 runs cannot confirm it"),
])
def test_each_verdict_is_worded_as_the_gate_decides_it(compared: dict[str, Any], verdict: str, delta: float,
                                                       says: str) -> None:
    """The gate's sentence says its word as the gate decides it: first in `gate`, after the lead in `diff`."""
    r = _with(compared, TRIM, verdict, delta)
    assert answers.comparison(r, gate_first=True)[0].startswith(says), answers.comparison(r, gate_first=True)[0]
    assert any(s.startswith(says) for s in answers.comparison(r)[1:])


def test_an_undecided_comparison_says_why_in_its_first_sentence(compared: dict[str, Any]) -> None:
    r = _with(compared, TRIM, "same", 0.03, problems=["patched: 1 of 3 runs did not finish"])
    assert r["verdict"] == "undecided"
    assert answers.comparison(r)[0] == ("Undecided whether patched (PR #8132) changes host memory against baseline: "
                                        "patched: 1 of 3 runs did not finish.")


def test_a_set_of_patches_is_named_by_its_title() -> None:
    assert answers.patches_phrase(["pr8132.float-scale", "pr8132.malloc-trim"]) == "PR #8132"
    assert answers.patches_phrase(["pr8132.float-scale"]) == "pr8132.float-scale"
    assert answers.size_words(16_785_408) == "16.8 M" and answers.size_words(7e9) == "7.0 B"


def test_a_matrix_of_versions_alone_names_its_lowest_and_highest_configuration() -> None:
    """A matrix with no patched cell (transformers releases only, as reports/your-job.md's #47514 one) compares
    configurations: its answer names the lowest and highest RSS after trim with each cell's versions, the library
    axis included (it read "no patched cell has a finished baseline beside it yet", and the cells were not told
    apart). With a patched cell and no baseline finished, that older sentence stays."""
    def cell(tf: str, trim: float, patch: str = "baseline") -> dict[str, Any]:
        return {"status": "done", "patch": patch, "torch": "2.13.0", "deepspeed": "0.19.8", "transformers": tf,
                "accelerate": None, "allocator": "glibc", "effects": {}, "figures": {TRIM: trim}}

    data = {"cells": [cell("4.51.3", 26.18), cell("5.13.0", 24.52), cell("5.24.0", 24.70)], "failed": []}
    [sentence] = answers.campaign("matrix", data)
    assert "no cell is patched" in sentence and "24.52 B/param at the lowest" in sentence
    assert "transformers 5.13.0 glibc [baseline]) and 26.18 at the highest" in sentence
    assert sentence.index("transformers 5.13.0") < sentence.index("transformers 4.51.3")
    data["cells"].append(cell("5.24.0", 24.0, patch="pr8132"))
    assert answers.campaign("matrix", data)[0].endswith("no patched cell has a finished baseline beside it yet.")
