"""rssprobe report: one self-contained HTML page (and PNGs + markdown with --out) from synthetic runs
whose figures are known, so the page can be checked for exact bytes-per-parameter values."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from rssprobe.analysis.summary import Summary
from rssprobe.cli import Group, main
from rssprobe.commands.report import command, write_report
from rssprobe.errors import UserError
from rssprobe.reporters import plots
from rssprobe.store import rundir as storage
from rssprobe.worker import glibc, procfs
from rssprobe.worker.sites import SiteTotals
from rssprobe.workflows.report import steps_table

from .fakes_rundir import PARAMS, SITE, Step, make_run

PNG = b"\x89PNG\r\n\x1a\n"
CHARTS = ["rss", "peak", "glibc_in_use", "glibc_free", "budget"]
DATA_URI = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def images(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in DATA_URI.findall(page)]


def report(tmp_path: Path, *runs: Path, **kwargs: object) -> str:
    out = write_report([str(r) for r in runs], html_file=tmp_path / "r.html", **kwargs)  # type: ignore[arg-type]
    return out.html.read_text()


def test_html_is_self_contained_with_one_valid_png_per_chart(tmp_path: Path) -> None:
    a = make_run(tmp_path, run_id="a")
    b = make_run(tmp_path, run_id="b", label="patched", steps=[Step(rss=6.0), Step(rss=5.0)])
    page = report(tmp_path, a, b)
    pngs = images(page)
    charts = ["change", *CHARTS]  # two runs: the comparison's change chart leads
    assert len(pngs) == len(charts)
    assert all(p.startswith(PNG) for p in pngs)
    for chart in charts:
        assert f'id="chart-{chart}"' in page
    # nothing fetched from elsewhere: opens offline
    assert not re.search(r'(src|href)="(?!data:|#)', page)
    assert "<link" not in page and "<script" not in page
    assert "baseline (a)" in page and "patched (b)" in page  # legend/run names: label + id


def test_tables_show_the_known_bytes_per_parameter(tmp_path: Path) -> None:
    run = make_run(tmp_path, steps=[Step(rss=10.0, peak=12.0, in_use=6.0, free=1.0)] * 3)
    page = report(tmp_path, run)
    phases = page[page.index("<caption>Phases"):]
    phases = phases[:phases.index("</table>")]
    assert "<tr><td>steady</td>" in phases
    for figure in ("10.00", "12.00", "6.00", "1.00"):
        assert f'<td class="num">{figure}</td>' in phases, figure
    # budget: 4+4+2 at init, +8 for the Adam states after the first step; RSS above baseline 10 -> unexplained -8
    assert '<td class="num">18.00</td>' in page and '<td class="num">-8.00</td>' in page
    assert "DeepSpeedCPUAdam.step" in page  # the site table, short names as in the terminal


def test_plotted_values_are_bytes_per_parameter_above_the_runs_own_baseline(tmp_path: Path) -> None:
    path = make_run(tmp_path, steps=[Step(rss=10.0, peak=12.5, in_use=6.0, free=1.5), Step(rss=11.0)])
    summary = Summary(storage.RunDir(path))
    series = plots.RunSeries.of(summary.as_dict(), summary.baseline, steps_table(summary.run, summary))
    expected = {"rss": [10.0, 11.0], "peak": [12.5, 12.0], "glibc_in_use": [6.0, 6.0], "glibc_free": [1.5, 1.0]}
    for measure, values in expected.items():
        got = plots.per_param(series, measure)
        assert not isinstance(got, str), got
        assert list(got[0]) == [1, 2]
        assert got[1] == pytest.approx(values, abs=1e-6), measure


def test_missing_steps_parquet_falls_back_to_the_events(tmp_path: Path) -> None:
    with_file = make_run(tmp_path, run_id="with")
    without = make_run(tmp_path, run_id="without", write_parquet=False)
    frames = []
    for path in (with_file, without):
        summary = Summary(storage.RunDir(path))
        frames.append(steps_table(summary.run, summary))
    assert list(frames[0]["rss"]) == list(frames[1]["rss"])
    assert len(images(report(tmp_path, without))) == len(CHARTS)


def test_failed_run_is_marked_and_still_reported(tmp_path: Path) -> None:
    ok = make_run(tmp_path, run_id="good")
    bad = make_run(tmp_path, run_id="bad", status="failed", error="RuntimeError: out of pinned memory",
                   steps=[Step()], steps_requested=4)
    page = report(tmp_path, ok, bad)
    section = page[page.index('id="run-bad"'):]
    section = section[:section.index("</details>")]
    assert '<div class="banner">FAILED: RuntimeError: out of pinned memory</div>' in section
    assert 'class="run bad"' in page and "1 of 2 runs did not finish ok" in page
    assert "steps 1/4" in section
    good = page[page.index('id="run-good"'):]
    assert "FAILED" not in good[:good.index("</details>")]
    # no 'end' census for the failed run: left out of the budget chart, and the caption says why
    assert "Not shown: baseline (bad): no live-buffer census at &#x27;end&#x27;" in page
    assert len(images(page)) == len(CHARTS)


def test_run_without_glibc_is_left_off_the_glibc_charts_with_a_reason(tmp_path: Path) -> None:
    glibc = make_run(tmp_path, run_id="glibc")
    jemalloc = make_run(tmp_path, run_id="je", label="jemalloc", glibc=False)
    summary = Summary(storage.RunDir(jemalloc))
    series = plots.RunSeries.of(summary.as_dict(), summary.baseline, steps_table(summary.run, summary))
    assert plots.per_param(series, "glibc_in_use") == "glibc mallinfo2 not available"
    assert not isinstance(plots.per_param(series, "rss"), str)
    page = report(tmp_path, glibc, jemalloc)
    for chart in ("glibc_in_use", "glibc_free"):
        fig = page[page.index(f'id="chart-{chart}"'):]
        caption = fig[fig.index("<figcaption>"):fig.index("</figcaption>")]
        assert "Not shown: jemalloc (je): glibc mallinfo2 not available" in caption
    rss = page[page.index('id="chart-rss"'):]
    assert "Not shown" not in rss[:rss.index("</figcaption>")]


def test_patches_say_whether_they_took_effect(tmp_path: Path) -> None:
    run = make_run(tmp_path, patches=["pr8132.float-scale", "pr8132.malloc-trim"],
                   effects={"pr8132.float-scale": {"float_conversions": 3}, "pr8132.malloc-trim": {"trims": 0}})
    page = report(tmp_path, run)
    assert "pr8132.float-scale (took effect, 3 float_conversions)" in page
    assert "pr8132.malloc-trim (NEVER took effect, 0 trims)" in page
    assert 'class="warn"' in page and "never took effect: pr8132.malloc-trim" in page


def test_text_from_run_files_is_escaped(tmp_path: Path) -> None:
    run = make_run(tmp_path, label="<script>alert(1)</script>", status="failed", error="a < b & c")
    page = report(tmp_path, run)
    assert "<script>" not in page
    assert "&lt;script&gt;" in page and "a &lt; b &amp; c" in page


def test_out_dir_has_pngs_and_markdown_linking_to_them(tmp_path: Path) -> None:
    a, b = make_run(tmp_path, run_id="a"), make_run(tmp_path, run_id="b", status="failed", error="boom")
    out = tmp_path / "rep"
    written = write_report([str(a), str(b)], out=out)
    assert written.html == out / "report.html" and written.html.exists()
    assert sorted(p.name for p in written.images) == sorted(f"{c}.png" for c in CHARTS)
    md = (out / "report.md").read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert sorted(links) == sorted(f"{c}.png" for c in CHARTS)
    for link in links:
        assert (out / link).read_bytes().startswith(PNG)
    assert "| steady | 10.00 | 12.00 | 6.00 | 1.00 |" in md  # same tables as `show --format markdown`
    assert "status FAILED: boom" in md


def test_html_option_wins_and_default_goes_under_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = make_run(tmp_path / "runs")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(command, [str(run)])
    assert result.exit_code == 0, result.output
    made = list((tmp_path / "reports").glob("report-*.html"))
    assert len(made) == 1 and str(made[0].relative_to(tmp_path)) in result.output
    result = CliRunner().invoke(command, [str(run), "--out", "o", "--html", "x/page.html"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "x" / "page.html").exists() and not (tmp_path / "o" / "report.html").exists()
    assert (tmp_path / "o" / "report.md").exists()


def test_bad_refs_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="nope: no such run"):
        write_report([str(tmp_path / "nope")], html_file=tmp_path / "r.html")
    with pytest.raises(UserError, match="at least one run"):
        write_report([], html_file=tmp_path / "r.html")
    assert not (tmp_path / "r.html").exists()
    broken = make_run(tmp_path, run_id="broken")
    (broken / "steps.parquet").write_bytes(b"not parquet")
    with pytest.raises(UserError, match=r"steps\.parquet: unreadable per-step table"):
        write_report([str(broken)], html_file=tmp_path / "r.html")


def test_cli_turns_a_bad_ref_into_one_line_and_exit_2(tmp_path: Path) -> None:
    group = Group("rssprobe", commands={"report": command})  # the real CLI's error handling, without cli.py
    result = CliRunner().invoke(group, ["report", str(tmp_path / "nope")])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rssprobe: error: ") and "no such run" in lines[0]
    result = CliRunner().invoke(group, ["report"])
    assert result.exit_code == 2 and "at least one run" in result.stderr
    # the command tested here is the one the real CLI runs (commands load lazily: ask, do not look)
    assert main.get_command(click.Context(main), "report") is command


def test_site_fixture_is_what_the_summary_reads(tmp_path: Path) -> None:
    """The fakes are evidence only if they have the shape the worker writes: checked against the worker's own
    code (its site totals, its smaps and mallinfo readers), then a per-step site figure comes back unchanged."""
    run = make_run(tmp_path, steps=[Step(rss=10.0), Step(rss=13.0)])
    step = next(e for e in storage.RunDir(run).events() if e["event"] == "step")
    assert set(step["sites"][SITE]) == set(SiteTotals().as_dict())
    assert set(step["smaps"]) == set(procfs.smaps_rollup() or {})
    if glibc.STATUS.available:
        assert set(step["mallinfo"]) == set(glibc.mallinfo2() or {})
    sites = Summary(storage.RunDir(run)).as_dict()["sites"]
    steady = next(s for s in sites if s["site"] == SITE and s["phase"] == "steady")
    assert steady["retained_bytes_per_param"] == pytest.approx(3.0)
    assert PARAMS == Summary(storage.RunDir(run)).params


def test_run_that_died_before_its_first_step_still_gets_a_page(tmp_path: Path) -> None:
    run = make_run(tmp_path, run_id="init", status="failed", error="the worker was killed by SIGKILL", steps=[],
                   steps_requested=4)
    page = report(tmp_path, run)
    assert len(images(page)) == len(CHARTS)
    assert "Not shown: baseline (init): no finished steps" in page
    assert "FAILED: the worker was killed by SIGKILL" in page and "steps 0/4" in page
