"""Nightly data with the local runner: a new dated span is new work. (No new span is all cache:
tests/test_pipeline_e2e.py, on the session's pushed run.)"""
from __future__ import annotations

import pytest

from tests.helpers import add_span, copy_spans, run_cli, write_config

pytestmark = pytest.mark.e2e


def ran(output: str, key: str = "ran") -> list:
    return next(line for line in output.splitlines() if line.startswith(f"  {key}:"))[
        len(f"  {key}:"):].strip().split(", ")


def test_a_new_span_is_new_work(tmp_path):
    data = copy_spans(tmp_path)
    config = str(write_config(tmp_path, data_dir=data))
    first = run_cli("pipeline.run", "--config", config)
    assert first.returncode == 0, first.stdout + first.stderr

    add_span(data, "span-20101231")
    night = run_cli("pipeline.run", "--config", config)
    assert night.returncode == 0, night.stdout + night.stderr
    assert {"CsvExampleGen", "StatisticsGen", "Transform", "Trainer"} <= set(ran(night.stdout))
    assert "no new span" not in night.stdout
