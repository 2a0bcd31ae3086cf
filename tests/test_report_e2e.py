"""The run report of real runs, opened in headless chromium: a pushed run (the bundled spans, which
do not drift) and a run the drift gate stops (a span whose drifted_feature() moves up)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.browser import open_page
from tests.helpers import (add_drifted_span, copy_spans, drifted_feature, example_data,
                           report_path, run_cli, span_day, span_files, tree_digest, write_config)
from tests.pipeline.test_report_browser import problems

pytestmark = pytest.mark.e2e


def test_a_pushed_run_ends_with_its_report_which_a_browser_shows_whole(pushed_run, tmp_path):
    from components.run_report import render

    report = report_path(pushed_run.output)
    page = open_page(report, tmp_path / "pushed-run-report.png")
    print(f"screenshot: {page.screenshot}")
    assert problems(page) == []
    assert page.sections == list(render.SECTIONS)
    assert "Blessed: every threshold held, and the model serves as " \
        f"{pushed_run.version_dir}" in page.text
    assert "No feature drifted beyond its threshold." in page.text
    # The newest span against the older spans of the window of 3 it trains with.
    *older, newest = [span_day(p.name) for p in sorted(example_data().iterdir())][-3:]
    assert (f"Span {newest} against spans {', '.join(older)} together (reported, not a "
            "gate): within every threshold") in page.text
    [file] = span_files(sorted(example_data().iterdir())[-1])
    rows = len(file.read_text().splitlines()) - 1
    assert f"{file.parent.name}/{file.name} ({rows} rows)" in page.text
    assert "epoch" in page.text and "val_loss" in page.text  # the Trainer's record
    markdown = (report.parent / "report.md").read_text()
    assert "**Blessed: every threshold held" in markdown
    assert f"Drift against the training window ({', '.join(older)}): none" in markdown


def test_make_report_prints_the_newest_report(pushed_run):
    result = run_cli("pipeline.report", "--config", str(pushed_run.config_path))
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).name == "report.html"
    assert Path(result.stdout.strip()).parent.parent == pushed_run.folder / "outputs" / "reports"


def test_a_drifting_span_stops_the_run_pushes_nothing_and_the_report_says_why(pushed_run,
                                                                             tmp_path):
    data = copy_spans(tmp_path)
    previous = span_day(sorted(data.iterdir())[-1].name)
    add_drifted_span(data, "span-20991231")
    serving = tmp_path / "serving"
    shutil.copytree(pushed_run.model_base_path.parent, serving)
    before = tree_digest(serving)
    config = write_config(tmp_path, {"serving.serving_dir": str(serving)}, data_dir=data)
    result = run_cli("pipeline.run", "--config", str(config))
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.startswith(
        f"error: span 2099-12-31 drifted from span {previous} in 1 feature(s): "
        f"'{drifted_feature()}' Jensen-Shannon divergence 0."), result.stderr
    assert tree_digest(serving) == before
    page = open_page(report_path(result.stdout), tmp_path / "drift-stop-report.png")
    print(f"screenshot: {page.screenshot}")
    assert problems(page) == []
    assert f"1 feature(s) drifted: {drifted_feature()} (on drift: stop)" in page.text
    assert "Not evaluated: the run stopped at DriftGate" in page.text
