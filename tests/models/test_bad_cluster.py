"""A multi-worker task with a bad or missing cluster ends with a clear error, never a hang.

Real `python -m pipeline.kubeflow.training_job.worker` processes; the artifacts need not exist,
since every
check runs before any data is read.
"""
from __future__ import annotations

import json
import time

import pytest

from tests.helpers import write_config
from tests.helpers import run_cli
from tests.models.workers import (PipelineArtifacts, describe, loopback_cluster, start_task,
                                  tf_config, wait)

pytestmark = pytest.mark.e2e  # real training processes (and a pipeline run): not `make test-fast`


def _properties(tmp_path, strategy: str):
    from pipeline.kubeflow.training_job.properties import trainer_exec_properties
    from core.config import load_config

    config = load_config(write_config(tmp_path / strategy, {
        "training.distribution_strategy": strategy, "training.startup_timeout_s": 10,
        # parameter_server has chief, worker and ps replicas: a TFJob only.
        **({"training.operator": "tfjob"} if strategy == "parameter_server" else {})}))
    path = tmp_path / f"{strategy}.json"
    path.write_text(json.dumps(trainer_exec_properties(config)))
    return path


def test_bad_clusters_fail_fast_with_a_clear_error(tmp_path):
    mirrored = _properties(tmp_path, "multi_worker_mirrored")
    parameter_server = _properties(tmp_path, "parameter_server")
    nowhere = PipelineArtifacts(tmp_path / "config.yaml", tmp_path / "no-examples",
                                tmp_path / "no-transform-graph", tmp_path / "no-model")
    lonely = loopback_cluster(worker=2)  # worker 1 never starts
    no_servers = loopback_cluster(chief=1, worker=1, ps=1)  # only the chief starts
    cases = {
        "unset": (mirrored, None, "needs the cluster in the TF_CONFIG environment variable"),
        "malformed": (mirrored, '{"cluster": {"worker": ["127.0.0.1:1"]}',
                      "TF_CONFIG is malformed"),
        "no_peer": (mirrored, tf_config(lonely, "worker", 0), "did not come up within 10s"),
        "no_ps": (parameter_server, tf_config(no_servers, "chief", 0),
                  "did not come up within 10s"),
    }
    started = time.monotonic()
    tasks = [start_task(nowhere, props, tmp_path / name, name, value)
             for name, (props, value, _) in cases.items()]
    codes = wait(tasks, timeout=240)
    assert time.monotonic() - started < 240
    for task in tasks:
        assert codes[task.name] != 0, describe([task])
        assert cases[task.name][2] in task.output(), describe([task])
        assert not (tmp_path / task.name / "model").exists()
    assert codes["unset"] == codes["malformed"] == 2  # permanent: a TFJob does not retry them
    assert codes["no_peer"] == codes["no_ps"] == -9  # killed: a TFJob retries (exit 137)


def test_pipeline_with_a_multi_worker_strategy_but_no_cluster_stops_at_the_trainer(pushed_run,
                                                                                   tmp_path):
    # The session run's metadata store: every step before the Trainer is a cache hit (its
    # artifacts stay in the session's root), the Trainer's changed strategy is new work.
    pushed_run.copy_metadata(tmp_path / "outputs")
    path = write_config(tmp_path, {"training.distribution_strategy": "multi_worker_mirrored"})
    result = run_cli("pipeline.run", "--config", str(path), env={"TF_CONFIG": None})
    assert result.returncode == 1, result.stdout + result.stderr
    assert ("error: distribution_strategy 'multi_worker_mirrored' needs the cluster in the "
            "TF_CONFIG environment variable") in result.stderr
    assert "Trainer" in result.stdout and not (tmp_path / "serving").exists()
