"""The Markdown report escapes what comes from the data (issue 25): the KFP UI renders it, so a
column named `<img src=x onerror=...>` or `[x](javascript:...)`, a file name with backticks or an
error message holding a code fence must come out as text, not markup."""
from __future__ import annotations

import html

from markdown_it import MarkdownIt

HOSTILE = ["<img src=x onerror=alert(1)>", "[click](javascript:alert(1))", "**bold**",
           "a|b", "<script>alert(2)</script>", "~~gone~~", "![i](http://evil/x.png)"]


def render():
    """Imported when a test runs, not at collection (tests/README.md)."""
    from components.run_report import render

    return render


def _facts():
    from components.run_report.facts import Anomaly, RunFacts, SpanRead, ThresholdRow

    return RunFacts(
        pipeline="<b>pipe</b>", run_id="run`1`", key_metric="AUC",
        error="Traceback\n```\n<script>alert(3)</script>\n````",
        spans=[SpanRead("span-1", [("data/`x`/<i>f</i>.csv", 3)])],
        thresholds=[ThresholdRow("AUC", "at least 0.7 [x](javascript:alert(4))", 0.5, False)],
        anomalies=[Anomaly("train", name, "SCHEMA_NEW_COLUMN", "d", "a") for name in HOSTILE])


# CommonMark with GFM's tables and strikethrough, HTML allowed (as a UI that renders HTML would):
# markdown-it-py (in requirements.lock).
RENDERER = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


def _rendered() -> str:
    return RENDERER.render(render().markdown(_facts(), html_path="<x>.html"))


def test_no_markup_comes_out_of_data_derived_text():
    page = _rendered()
    for tag in ("<img", "<script", "<b>", "<i>", "<s>", "<del>", "<a "):
        assert tag not in page, (tag, page)
    assert page.count("<strong>") == 1  # the decision line's own, not the column **bold**
    assert "href" not in page and "javascript:alert(1)" in page  # shown, not linked


def test_the_text_reads_as_it_was():
    page = html.unescape(_rendered())
    for name in HOSTILE:
        assert name in page, name
    assert "<script>alert(3)</script>" in page  # the error, whole, in its code block
    assert "data/`x`/<i>f</i>.csv" in page


def test_a_backtick_run_cannot_close_its_fence():
    assert render().md_code("a``b") == "```a``b```"
    assert render().md_block("x\n````\ny")[0] == "`````"


def test_negative_control_unescaped_text_makes_markup():
    """What the report did before: the same names, interpolated as they are, give tags."""
    page = RENDERER.render("; ".join(HOSTILE))
    assert "<img" in page and "<script" in page and "<strong>" in page and "<s>" in page
