"""Markdown is read as GitHub renders it: through cmark-gfm (GitHub's own renderer, the cmarkgfm bindings), with
raw HTML allowed and GitHub's tag filter, as a PR review or an issue comment shows it.

The comparison is the demo's real one (reports/readme/runs.tar.gz: the default scenario, 3 baseline and 3 PR
#8132 runs made by `make demo`), so what is checked is what a reviewer pastes. No test here trains.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options

from rssprobe.reporters import markdown
from rssprobe.reporters.table import Table

from .conftest import rssprobe


def gfm(text: str) -> ET.Element:
    """The HTML GitHub makes of `text`, parsed (cmark-gfm writes well-formed XHTML)."""
    html = cmarkgfm.github_flavored_markdown_to_html(text, options=Options.CMARK_OPT_UNSAFE)
    return ET.fromstring(f"<root>{html}</root>")


def text(el: ET.Element) -> str:
    return " ".join("".join(el.itertext()).split())


@pytest.fixture(scope="module")
def demo(demo_runs: Path) -> Path:
    return demo_runs


@pytest.mark.parametrize("plain", [
    "role.*, zero3.*", "pinned.*_predicted", "a | b", "~ (not significant)", "~~gone~~", "<script>x</script>",
    "`code`", "[link](http://x)", "# not a heading", "1. not a list", "- not a list", "+ glibc in use",
    "> * = gated figure", "&amp; &lt;", "back\\slash", "*emphasis* and _this_", "29.08 ± 0.01",
])
def test_escaped_text_renders_as_itself(plain: str) -> None:
    """Every text rssprobe writes (figure names, labels, errors from files) renders as exactly that text: in a
    paragraph line and in a table cell, with no emphasis, code, link, strikethrough, list, quote or heading."""
    page = gfm(markdown.render([plain], [Table("t " + plain, ["c", plain], [[plain, plain]])]))
    assert [el.tag for el in page] == ["p", "p", "table"], ET.tostring(page, encoding="unicode")
    assert text(page[0]) == " ".join(plain.split())
    assert {el.tag for el in page.iter()} <= {"root", "p", "strong", "table", "thead", "tbody", "tr", "th", "td", "a"}
    # GitHub links a bare URL in any text (its autolink extension, as it does in every comment): only that
    assert all(text(a) == a.get("href") and text(a) in plain for a in page.iter("a"))
    cells = [text(td) for td in page.iter("td")]
    assert cells == [" ".join(plain.split())] * 2


def test_diff_markdown_as_github_renders_it(demo: Path) -> None:
    """`diff --format markdown` pasted into a review: the answer sentence first, no stray emphasis or
    strikethrough, every table a table of at most 6 columns, the full tables folded in <details>."""
    md = rssprobe("diff", str(demo / "baseline"), str(demo / "patched"), "--format", "markdown", check=True).stdout
    answer = json.loads(rssprobe("diff", str(demo / "baseline"), str(demo / "patched"), "--format", "json",
                                 check=True).stdout)["answer"]
    page = gfm(md)
    first = page[0]
    assert first.tag == "p" and text(first) == " ".join(answer)
    assert text(first.find("strong")) == answer[0]  # the answer's first sentence, bold
    assert answer[0].startswith("PR #8132 leaves DeepSpeed's live buffers") and "Gate: PASS (exit 0)" in text(first)
    assert not list(page.iter("em")) and not list(page.iter("del")), "stray emphasis or strikethrough"
    # <strong> only for the answer and table titles: nothing else became bold
    assert all(text(s) == answer[0] or text(s).startswith(("Key figures", "What differs", "Phases", "Live-buffer",
                                                             "Pinned", "Parts of RSS", "Code sites", "The node"))
               for s in page.iter("strong"))
    tables = list(page.iter("table"))
    assert len(tables) == sum(1 for line in md.splitlines() if line.startswith("|---"))
    key = tables[0]
    assert [text(th) for th in key.iter("th")] == ["figure", "A: baseline", "B: patched", "B - A [interval]", "p",
                                                   "claim"]
    assert all(len(list(t.iter("th"))) <= 6 for t in tables)
    rows = {text(tr[0]): [text(td) for td in tr] for tr in key.iter("tr") if tr[0].tag == "td"}
    assert rows["RSS after a final trim (gated)"][-1] == "unchanged"
    details = page.find("details")
    assert details is not None and text(details.find("summary")).startswith("Every figure")
    names = [text(tr[0]) for t in details.iter("table") for tr in t.iter("tr") if tr[0].tag == "td"]
    assert "role.fp32_master (gated)" in names and "pinned.slack_predicted" in names  # names kept literally
    assert "~ (not significant)" in [text(td) for td in page.iter("td")]


def test_show_markdown_of_a_run_and_a_group(demo: Path) -> None:
    """`show --format markdown` (a run, a group): the answer first, every table a table, no stray emphasis."""
    for ref in (demo / "baseline" / "run-01", demo / "baseline"):
        data = json.loads(rssprobe("show", str(ref), "--format", "json", check=True).stdout)
        md = rssprobe("show", str(ref), "--format", "markdown", check=True).stdout
        page = gfm(md)
        assert text(page[0]) == " ".join(data["answer"])
        assert not list(page.iter("em")) and not list(page.iter("del"))
        assert len(list(page.iter("table"))) == sum(1 for line in md.splitlines() if line.startswith("|---"))
