"""Nightly data with the local runner: a new dated span is new work, no new span is all cache."""
from __future__ import annotations

import pytest

from tests.helpers import add_span, copy_spans, run_cli, write_config

pytestmark = pytest.mark.e2e


def ran(output: str, key: str = "ran") -> list:
    return next(line for line in output.splitlines() if line.startswith(f"  {key}:"))[
        len(f"  {key}:"):].strip().split(", ")


def test_a_new_span_is_new_work_and_no_new_span_is_all_cache(tmp_path):
    data = copy_spans(tmp_path)
    config = str(write_config(tmp_path, data_dir=data))
    first = run_cli("pipeline.run", "--config", config)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "no new span" not in first.stdout

    again = run_cli("pipeline.run", "--config", config)
    assert again.returncode == 0, again.stdout + again.stderr
    assert ran(again.stdout) == ["-"]
    # ... because all of it came from cache, not because progress parsing matched nothing.
    assert sorted(ran(again.stdout, "from cache")) == sorted(ran(first.stdout)) != ["-"]
    assert "  data:       no new span since the last run" in again.stdout

    add_span(data, "span-20101231")
    night = run_cli("pipeline.run", "--config", config)
    assert night.returncode == 0, night.stdout + night.stderr
    assert {"CsvExampleGen", "StatisticsGen", "Transform", "Trainer"} <= set(ran(night.stdout))
    assert "no new span" not in night.stdout
