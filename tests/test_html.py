"""The HTML report as a reader opens it: rendered by a real browser (Debian's headless Chromium), the answer on
the first screen, every chart loaded. The comparison is the demo's real one (reports/readme/runs.tar.gz), so no
test here trains. Skipped, with the reason, where Chromium is not installed (.ci/run installs it as root)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import rssprobe

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH, HEIGHT = 1280, 800  # a laptop's first screen
# what the page is asked once loaded: where the answer sits, and whether every image decoded
PROBE = """<script>
window.addEventListener('load', () => {
  const answer = document.getElementById('answer').getBoundingClientRect();
  const images = [...document.images];
  document.body.setAttribute('data-probe', JSON.stringify({
    top: answer.top, bottom: answer.bottom, viewport: window.innerHeight, width: window.innerWidth,
    text: document.getElementById('answer').innerText,
    images: images.length, loaded: images.filter(i => i.complete && i.naturalWidth > 0).length,
    openRuns: document.querySelectorAll('details.run[open]').length,
    runs: document.querySelectorAll('details.run').length,
    firstImageTop: images.length ? images[0].getBoundingClientRect().top : null}));
});
</script>"""

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (apt-get install chromium; .ci/run does as root)")


def browse(page: Path, tmp: Path) -> dict[str, object]:
    """The probe's answer from the page as Chromium lays it out at WIDTH x HEIGHT, and a screenshot beside it."""
    probed = tmp / "probed.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp / 'profile'}", f"--window-size={WIDTH},{HEIGHT}", "--hide-scrollbars",
             "--virtual-time-budget=10000"]
    dom = subprocess.run([*flags, "--dump-dom", probed.as_uri()], capture_output=True, text=True, timeout=120)
    subprocess.run([*flags, f"--screenshot={tmp / 'first-screen.png'}", page.as_uri()], capture_output=True,
                   timeout=120)
    found = re.search(r'data-probe="([^"]*)"', dom.stdout)
    assert found, f"the page never finished loading in Chromium:\n{dom.stderr[-2000:]}"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory, demo_runs: Path) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("report")
    a, b = str(demo_runs / "baseline"), str(demo_runs / "patched")
    rssprobe("report", a, b, "--out", str(root / "out"), check=True)
    answer = json.loads(rssprobe("diff", a, b, "--format", "json", check=True).stdout)["answer"]
    return root / "out" / "report.html", answer


def test_the_answer_is_on_the_first_screen_and_every_chart_loads(report: tuple[Path, list[str]],
                                                                 tmp_path: Path) -> None:
    page, answer = report
    got = browse(page, tmp_path)
    assert got["width"] == WIDTH
    assert 0 <= got["top"] < got["bottom"] <= got["viewport"], got  # the whole answer, unscrolled
    assert " ".join(str(got["text"]).split()).endswith(" ".join(" ".join(answer).split()))
    assert got["images"] == 6 and got["loaded"] == got["images"], got  # change, 4 per-step charts, budget
    assert got["runs"] == 6 and got["openRuns"] == 0  # the runs finished ok: their detail folded


def test_the_change_chart_comes_before_the_tables(report: tuple[Path, list[str]]) -> None:
    page, _answer = report
    html = page.read_text(encoding="utf-8")
    assert html.index('id="answer"') < html.index('id="chart-change"') < html.index("Key figures") \
        < html.index('id="chart-rss"') < html.index('<details class="run"')
    assert 'class="answer pass"' in html  # the verdict's colour: PR #8132 changes no gated figure
