"""A multi-worker task with a bad or missing cluster ends with a clear error, never a hang.

Real `python -m models.train_worker` processes; the artifacts need not exist, since every check
runs before any data is read.
"""
from __future__ import annotations

import json
import time

from tests.helpers import write_config
from tests.models.workers import PipelineArtifacts, describe, loopback_cluster, start_task
from tests.models.workers import tf_config, wait


def test_bad_clusters_fail_fast_with_a_clear_error(tmp_path):
    from models.trainer_properties import trainer_exec_properties
    from pipeline.config import load_config

    config = load_config(write_config(tmp_path, {
        "training.distribution_strategy": "multi_worker_mirrored",
        "training.startup_timeout_s": 10}))
    props = tmp_path / "trainer.json"
    props.write_text(json.dumps(trainer_exec_properties(config)))
    nowhere = PipelineArtifacts(tmp_path / "config.yaml", tmp_path / "no-examples",
                                tmp_path / "no-transform-graph", tmp_path / "no-model")
    lonely = loopback_cluster(worker=2)  # worker 1 never starts
    cases = {
        "unset": (None, "needs the cluster in the TF_CONFIG environment variable"),
        "malformed": ('{"cluster": {"worker": ["127.0.0.1:1"]}', "TF_CONFIG is malformed"),
        "no_peer": (tf_config(lonely, "worker", 0), "did not come up within 10s"),
    }
    started = time.monotonic()
    tasks = [start_task(nowhere, props, tmp_path / name, name, value)
             for name, (value, _) in cases.items()]
    codes = wait(tasks, timeout=180)
    assert time.monotonic() - started < 180
    for task in tasks:
        assert codes[task.name] != 0, describe([task])
        assert cases[task.name][1] in task.output(), describe([task])
        assert not (tmp_path / task.name / "model").exists()
    assert codes["unset"] == codes["malformed"] == 2
