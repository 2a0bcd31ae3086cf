"""Distributed training in real processes on loopback, on the pipeline's transformed data
(ExampleGen's examples through Transform's graph, as the Trainer reads them)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tests.models.serving_checks import check_serving_model, eval_examples
from tests.models.workers import describe, loopback_cluster, start_task, stop, tf_config, wait

pytestmark = pytest.mark.e2e
TIMEOUT_S = 240  # a task still running then is a hang: ended, and the test fails
# Two epochs of 20 steps: enough for the loss to fall and for two lockstep epochs to be compared;
# more steps show nothing more and cost minutes on a loaded machine.
STEPS = {"training__train_steps": 40, "training__steps_per_epoch": 20}


def _scratch_dirs(log: str) -> list:
    return re.findall(r"removed scratch (\S+)", log)


def test_two_multi_worker_mirrored_workers_train_alike_and_only_the_chief_exports(
        artifacts, exec_properties, tmp_path):
    props = exec_properties(training__distribution_strategy="multi_worker_mirrored",
                            training__collective_implementation="ring",
                            training__startup_timeout_s=120, **STEPS)
    cluster = loopback_cluster(worker=2)
    tasks = [start_task(artifacts, props, tmp_path, f"worker{i}", tf_config(cluster, "worker", i))
             for i in range(2)]
    assert wait(tasks, TIMEOUT_S) == {"worker0": 0, "worker1": 0}, describe(tasks)
    chief, other = (task.summary() for task in tasks)
    assert chief["is_chief"] and not other["is_chief"]
    assert chief["replicas"] == other["replicas"] == 2

    # Exactly one export, the chief's, where the Trainer's model artifact expects it.
    exports = sorted(p.parent for p in tmp_path.rglob("saved_model.pb"))
    assert exports == [tmp_path / "model" / "Format-Serving"]
    assert chief["exported_to"] == str(tmp_path / "model" / "Format-Serving")
    assert other["exported_to"] is None
    # The other worker saved to scratch (saving runs collectives) and removed it.
    scratch = _scratch_dirs(tasks[1].output())
    assert len(scratch) == 2 and not any(Path(p).exists() for p in scratch), scratch
    assert not _scratch_dirs(tasks[0].output())

    # Training worked, in lockstep: loss falls, both workers end with the same weights.
    assert chief["loss"][-1] < chief["loss"][0] < chief["first_loss"]
    assert chief["loss"] == other["loss"]
    first, second = np.load(tasks[0].weights), np.load(tasks[1].weights)
    assert len(first.files) == len(second.files) > 0
    for key in first.files:
        np.testing.assert_array_equal(first[key], second[key])
    assert chief["weights_sha256"] == other["weights_sha256"]

    check_serving_model(tmp_path / "model" / "Format-Serving", artifacts.single_device_model,
                        eval_examples(artifacts.eval_files))


def test_parameter_server_cluster_trains_and_the_chief_exports(artifacts, exec_properties,
                                                               tmp_path):
    props = exec_properties(training__distribution_strategy="parameter_server",
                            training__operator="tfjob",
                            training__startup_timeout_s=120, **STEPS)
    cluster = loopback_cluster(chief=1, worker=2, ps=1)
    servers = [start_task(artifacts, props, tmp_path, f"{job}{i}", tf_config(cluster, job, i))
               for job, count in (("worker", 2), ("ps", 1)) for i in range(count)]
    try:
        chief = start_task(artifacts, props, tmp_path, "chief0", tf_config(cluster, "chief", 0))
        assert wait([chief], TIMEOUT_S) == {"chief0": 0}, describe([chief, *servers])
        # Workers and ps serve until the job ends (TensorFlow's pattern); the job ends here.
        assert all(task.process.poll() is None for task in servers), describe(servers)
        assert all("serving at grpc://" in task.output() for task in servers)
    finally:
        stop(servers)
    summary = chief.summary()
    assert summary["strategy"] == "parameter_server" and summary["is_chief"]
    assert summary["loss"][-1] < summary["loss"][0]
    exports = sorted(p.parent for p in tmp_path.rglob("saved_model.pb"))
    assert exports == [tmp_path / "model" / "Format-Serving"]
    check_serving_model(tmp_path / "model" / "Format-Serving", artifacts.single_device_model,
                        eval_examples(artifacts.eval_files))
