"""The run report as a person sees it: opened from disk in headless chromium, every section
there, nothing failing to load, nothing asked of the network; a broken report fails the check."""
from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

import pytest

from tests.browser import PageCheck, open_page

pytestmark = pytest.mark.slow  # TensorFlow, TFT, TFMA or server work: not in make test-fast


def sample_report(**changes):
    """The facts of a run whose model was refused, as the reader returns them."""
    from components.run_report.facts import (Anomaly, FeatureSplit, HistoryRun, Refusal,
                                             RunFacts, SpanRead, ThresholdRow)

    facts = RunFacts(
        pipeline="demo", run_id="2026-11-30T02:00:00", key_metric="sparse_categorical_accuracy",
        config_hash="ed7393033725a304",
        fingerprints={"CSV reader": "ef8a03f13fe5e547", "Trainer code": "3c1b8c225066eec0"},
        spans=[SpanRead("2009-12-31", [("data/span-20091231/demo.csv", 120)])],
        features={
            "weight": {s: FeatureSplit(n, 1, "numeric", [(2800.0, 3500.0, n // 2),
                                                               (3500.0, 6300.0, n - n // 2)],
                                            4200.0) for s, n in (("train", 260), ("eval", 84))},
            "site": {s: FeatureSplit(n, 0, "categorical", [("north", n // 2),
                                                              ("south", n - n // 2)])
                       for s, n in (("train", 260), ("eval", 84))}},
        anomalies=[Anomaly("eval", "site", "ENUM_TYPE_UNEXPECTED_STRING_VALUES",
                           "Examples contain values missing from the schema: elsewhere",
                           "fix the rows")],
        drift={"action": "warn", "newest_span": "2009-12-31", "previous_span": "2008-12-31",
               "note": "", "features": [
                   {"feature": "weight", "measure": "Jensen-Shannon divergence",
                    "distance": 0.41, "threshold": 0.25, "drifted": True},
                   {"feature": "site", "measure": "L-infinity distance", "distance": 0.07,
                    "threshold": 0.25, "drifted": False}]},
        by_slice={"all": {"sparse_categorical_accuracy": {"candidate": 0.82,
                                                          "baseline": 0.98}},
                  "site=north": {"sparse_categorical_accuracy": {"candidate": 0.8,
                                                                    "baseline": 0.97}}},
        baseline_version="1796014900",
        thresholds=[ThresholdRow("sparse_categorical_accuracy", "at least 0.5", 0.82, True),
                    ThresholdRow("sparse_categorical_accuracy",
                                 "change vs serving at least -0.01", -0.16, False)],
        blessed=False,
        refusals=[Refusal("sparse_categorical_accuracy", "Overall", True, -0.16,
                          higher_is_better=True, absolute=-0.01)],
        training={"loss": [0.9, 0.4, 0.2], "val_loss": [0.8, 0.5, 0.3],
                  "sparse_categorical_accuracy": [0.6, 0.85, 0.95]},
        history=[HistoryRun(f"2026-11-{d}T02:00:00", m, b, {"train": 260, "eval": 84})
                 for d, m, b in (("28", 0.97, True), ("29", 0.98, True), ("30", 0.82, False))])
    return dataclasses.replace(facts, **changes)


def check(html: str, folder: Path) -> PageCheck:
    path = folder / "report.html"
    path.write_text(html)
    page = open_page(path, folder / "report.png")
    print(f"screenshot: {page.screenshot}")
    return page


def problems(page: PageCheck) -> list:
    """What a person would see wrong: a missing section, a broken image, a failed load."""
    from components.run_report import render

    found = [f"section '{s}' missing" for s in render.SECTIONS if s not in page.sections]
    found += [f"broken image {src}" for src in page.broken_images]
    found += [f"failed load {f}" for f in page.failed_loads]
    found += [f"needs the network: {u}" for u in page.external_requests]
    found += [f"console error: {e}" for e in page.console_errors]
    return found


def test_the_report_shows_every_section_and_loads_nothing_from_outside(tmp_path):
    from components.run_report import render

    page = check(render.html(sample_report()), tmp_path)
    assert problems(page) == []
    assert page.sections == list(render.SECTIONS)
    assert page.svgs >= 6  # 2 features, drift-free evaluation bars, 2 training, 2 history
    assert page.screenshot.stat().st_size > 10_000
    assert "Not blessed: 1 threshold(s) failed" in page.text
    assert "version 1796014900 keeps serving" in page.text
    assert "weight" in page.text and "0.4100" in page.text  # the drifted feature


def test_a_stopped_run_says_where_it_stopped_in_every_section(tmp_path):
    from components.run_report import render

    content = sample_report(error="span 2010-12-31 drifted from span 2009-12-31 ...",
                            failed_steps=["DriftGate"], by_slice={}, thresholds=[],
                            blessed=None, refusals=[], training={}, baseline_version=None)
    page = check(render.html(content), tmp_path)
    assert problems(page) == []
    assert "Not evaluated: the run stopped at DriftGate" in page.text
    assert "No training record: the run stopped before the Trainer" in page.text


BROKEN = {
    "missing section": lambda html: html.replace('<section id="drift">', '<section>'),
    "image that does not decode": lambda html: html.replace(
        "</h1>", '</h1><img alt="chart" src="data:image/png;base64,'
        + base64.b64encode(b"not a png").decode() + '">'),
    "image file that is not there": lambda html: html.replace(
        "</h1>", '</h1><img alt="chart" src="missing-chart.png">'),
    "external stylesheet": lambda html: html.replace(
        "</head>", '<link rel="stylesheet" href="https://cdn.example.invalid/x.css"></head>'),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_report_fails_the_check(tmp_path, case):
    """The negative control: each way a report can be broken is caught."""
    from components.run_report import render

    page = check(BROKEN[case](render.html(sample_report())), tmp_path)
    assert problems(page), f"{case} went unnoticed"


def test_markdown_version_has_the_decision_and_the_thresholds():
    from components.run_report import render

    text = render.markdown(sample_report(), "outputs/reports/run/report.html")
    assert "**Not blessed: 1 threshold(s) failed" in text
    assert "| sparse_categorical_accuracy | change vs serving at least -0.01 | -0.1600 | FAIL |" \
        in text
    assert "Drift (span 2009-12-31 vs 2008-12-31): weight (warn)" in text
    assert text.rstrip().endswith("Full report: `outputs/reports/run/report.html`")
