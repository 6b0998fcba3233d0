"""diff and gate on real tiny runs: A/A passes, a known 2 B/param regression is caught,
a failed run is undecided (125), and the markdown and JSON outputs parse back."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from .conftest import STEADY_GLIBC, rssprobe

LEAK = "testing.inject:site=deepspeed.runtime.zero.stage_1_and_2.DeepSpeedZeroOptimizer.unscale_and_clip_grads," \
       "bytes_per_param=2,step=1,mode=retained"


@pytest.fixture(scope="module")
def groups(runs_dir: Path) -> dict[str, Path]:
    out = {}
    for name, extra in (("a1", []), ("a2", []), ("leak", ["--patch", LEAK])):
        out[name] = runs_dir / f"group-{name}"
        rssprobe("run", "tiny", "--steps", "3", "--repeat", "3", "--trim-at-end", "--out", str(out[name]),
                 *STEADY_GLIBC, *extra, check=True)
    return out


def test_a_a_passes_the_gate(groups: dict[str, Path], tmp_path: Path) -> None:
    junit = tmp_path / "gate.xml"
    proc = rssprobe("gate", "--reference", str(groups["a1"]), "--candidate", str(groups["a2"]),
                    "--junit", str(junit), "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["verdict"] == "pass" and result["a"]["ok"] == 3 and result["b"]["ok"] == 3
    suite = ET.parse(junit).getroot()
    assert int(suite.get("failures")) == 0 and int(suite.get("tests")) > 10


def test_a_retained_2_bytes_per_param_is_a_regression(groups: dict[str, Path], tmp_path: Path) -> None:
    junit = tmp_path / "gate.xml"
    summary_file = tmp_path / "step-summary.md"
    proc = rssprobe("gate", "--reference", str(groups["a1"]), "--candidate", str(groups["leak"]),
                    "--junit", str(junit), "--format", "json", env={"GITHUB_STEP_SUMMARY": str(summary_file)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    phases = {c["metric"]: c for c in result["comparisons"]["phases"]}
    trimmed = phases["budget.rss_after_trim_above_baseline"]
    assert trimmed["verdict"] == "regression" and abs(trimmed["delta"] - 2) < 0.1
    assert phases["budget.live"]["verdict"] == "same"  # an mmap, not a tensor: the census must not see it
    failures = [c for c in ET.parse(junit).getroot() if c.find("failure") is not None]
    assert "budget.rss_after_trim_above_baseline" in {c.get("name") for c in failures}
    assert "**Verdict: regression**" in summary_file.read_text()


def test_markdown_diff_parses_back(groups: dict[str, Path]) -> None:
    text = rssprobe("diff", str(groups["a1"]), str(groups["leak"]), "--format", "markdown", check=True).stdout
    assert text.startswith("**Verdict: regression**")
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("|") and len(cells) == 6 and not set(cells[1]) <= {"-", ":"}:
            rows[cells[0]] = cells
    row = rows["* budget.rss_after_trim_above_baseline"]
    assert float(row[3]) == pytest.approx(2.0, abs=0.1) and row[5] == "REGRESSION"
    a_mean = float(re.match(r"([\d.]+) ± ([\d.]+) \(n=3\)", row[1]).group(1))
    assert a_mean > 0


def test_failed_run_makes_the_gate_undecided(groups: dict[str, Path], runs_dir: Path) -> None:
    failed = runs_dir / "timed-out"
    proc = rssprobe("run", "tiny", "--set", "timeout_s=0.5", "--out", str(failed))
    assert proc.returncode == 1
    assert json.loads((failed / "manifest.json").read_text())["status"] == "timeout"
    gate = rssprobe("gate", "--reference", str(groups["a1"]), "--candidate", str(failed))
    assert gate.returncode == 125, gate.stdout + gate.stderr
    assert "did not finish" in gate.stdout


def test_gate_usage_errors_exit_2() -> None:
    proc = rssprobe("gate")
    assert proc.returncode == 2 and "needs --reference" in proc.stderr


def test_limits_pass_fail_and_bad_file(groups: dict[str, Path], tmp_path: Path) -> None:
    limits = tmp_path / "limits.toml"
    limits.write_text('[limits]\n"budget.live" = 30.0\n"budget.rss_after_trim_above_baseline" = 500.0\n')
    ok = rssprobe("gate", "--candidate", str(groups["a1"]), "--limits", str(limits), "--format", "json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert {c["verdict"] for c in json.loads(ok.stdout)["checks"]} == {"pass"}
    limits.write_text('[limits]\n"budget.live" = 5.0\n')  # the census alone is 21 B/param: every repeat above
    over = rssprobe("gate", "--candidate", str(groups["a1"]), "--limits", str(limits), "--format", "json")
    assert over.returncode == 1 and json.loads(over.stdout)["checks"][0]["verdict"] == "regression"
    limits.write_text('[limitz]\n"budget.live" = 5.0\n')
    bad = rssprobe("gate", "--candidate", str(groups["a1"]), "--limits", str(limits))
    assert bad.returncode == 2 and "limitz: unknown key" in bad.stderr


def test_diff_refuses_different_scenarios_unless_forced(groups: dict[str, Path], tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(groups["a1"] / "run-01", other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["scenario"]["name"] = "other-scenario"
    (other / "manifest.json").write_text(json.dumps(manifest))
    refused = rssprobe("diff", str(groups["a1"]), str(other))
    assert refused.returncode == 2 and "needs --force" in refused.stderr
    forced = rssprobe("diff", str(groups["a1"]), str(other), "--force", "--format", "json", check=True)
    differences = {d["what"] for d in json.loads(forced.stdout)["differences"]}
    assert "scenario name" in differences


def test_gate_run_checks_its_metric_names_before_any_run(tmp_path: Path) -> None:
    proc = rssprobe("gate", "tiny", "--run", "--metric", "budget.livee", env={"RSSPROBE_RUNS": str(tmp_path)})
    assert proc.returncode == 2 and "budget.live" in proc.stderr and "Traceback" not in proc.stderr
    assert not any(tmp_path.iterdir())  # nothing ran
    limits = tmp_path / "limits.toml"
    limits.write_text('[limits]\n"steady.rsss" = 30.0\n')
    proc = rssprobe("gate", "tiny", "--limits", str(limits), env={"RSSPROBE_RUNS": str(tmp_path / "runs")})
    assert proc.returncode == 2 and "steady.rss" in proc.stderr and not (tmp_path / "runs").exists()
