"""The night with its Beam stages in SDK workers of an EXTERNAL worker pool whose environment is
PATH alone (no TF_USE_LEGACY_KERAS): Beam's portable runner, as on Flink (README: Flink). The
workers get Keras 2 from the project (components/keras2.py), and the metrics are the in-memory
run's to the printed digit."""
from __future__ import annotations

import re

import pytest

from devtools.beam_worker_pool import portable_beam_args, worker_pool
from tests.helpers import example_config, run_cli, versions, write_config

pytestmark = pytest.mark.e2e


def metric_lines(output: str) -> list:
    """The run summary's metric table (candidate and baseline columns as printed), up to the
    next labelled line (`  skew:`, `  baseline:`, `  blessed:`: the skew line names this run's
    own folder)."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if "metric (all eval data)" in line)
    end = next(i for i in range(start + 1, len(lines))
               if re.match(r"  [a-z ]+:( |$)", lines[i]))
    return lines[start:end]


def test_a_bare_worker_pool_runs_the_night_with_the_in_memory_metrics(pushed_run, tmp_path):
    pool_log = tmp_path / "worker_pool.log"
    with worker_pool(pool_log, bare=True) as address:
        config = write_config(tmp_path, {"runner.beam_args": portable_beam_args(address)})
        result = run_cli("pipeline.run", "--runner", "local", "--config", str(config))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # The stages ran in the pool's workers, not in the runner's process.
    assert "Starting worker with command" in pool_log.read_text(errors="replace")
    assert "blessed:    yes" in result.stdout
    assert versions(tmp_path / "serving" / example_config().serving.model_name)
    assert metric_lines(result.stdout) == metric_lines(pushed_run.output)
