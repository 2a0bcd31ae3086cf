"""Each step's part in the run lease (pipeline/kubeflow/step/run_lease_step.py), on a local
pipeline root: which steps release it, how a step without outputs of its own knows its run, and
the flag the compiled spec writes."""
from __future__ import annotations

import json
import os

import pytest

from core import run_lease
from pipeline.kubeflow.step import run_lease_step

from pipeline.kubeflow.step.run_lease_step import LeaseFlagError

RUN = "dddddddd-0000-4000-8000-000000000004"
EXPIRY_S = 3600


def _settings(role: str, task: str) -> dict:
    return {"role": role, "task": task, "expiry_s": EXPIRY_S}


def _outputs(**uris: str) -> dict:
    return {"outputs": {"artifacts": {key: {"artifacts": [{"uri": uri}]}
                                      for key, uri in uris.items()}}}


@pytest.fixture
def run_root(tmp_path) -> str:
    root = f"{tmp_path}/pipeline-root/pipe/{RUN}"
    assert run_lease_step.before(_settings("take", "CsvExampleGenDriver"), _outputs(
        examples=f"{root}/CsvExampleGenDriver/1/examples")) is None
    return root


def _lease(run_root: str) -> dict:
    return json.loads(open(run_lease.lease_uri(run_root)).read())


def test_a_step_that_succeeds_keeps_the_lease_and_the_report_releases_it(run_root):
    run_lease_step.after(_settings("hold", "Trainer"),
                           _outputs(model=f"{run_root}/Trainer/2/model"), 0)
    assert _lease(run_root)["released_at"] is None
    run_lease_step.after(_settings("release", "RunReport"),
                           _outputs(html=f"{run_root}/RunReport/3/html"), 0)
    assert _lease(run_root)["released_at"] is not None


def test_a_failed_gate_knows_its_run_by_the_backends_executor_logs(run_root):
    """The gates declare no output; from 2.5.0 the backend adds executor-logs under the task's
    root (driver/driver.go provisionOutputs), which the entrypoint reads before setting it
    aside."""
    run_lease_step.after(_settings("hold", "AnomalyGate"), _outputs(
        **{"executor-logs": f"{run_root}/AnomalyGate/4/executor-logs"}), 1)
    assert _lease(run_root)["released_at"] is not None


def test_a_failed_gate_without_executor_logs_leaves_the_lease_and_says_so(run_root, capsys):
    """KFP 2.4.1: no executor-logs, so no run to release for; the lease expires."""
    run_lease_step.after(_settings("hold", "AnomalyGate"), _outputs(), 1)
    assert _lease(run_root)["released_at"] is None
    assert "the run lease stays until it expires" in capsys.readouterr().err


def test_a_failed_step_of_another_run_releases_nothing(run_root):
    other = run_root.replace(RUN, "eeeeeeee-0000-4000-8000-000000000005")
    run_lease_step.after(_settings("hold", "Transform"),
                           _outputs(transform_graph=f"{other}/Transform/5/transform_graph"), 1)
    assert _lease(run_root)["run_id"] == RUN and _lease(run_root)["released_at"] is None


def test_the_pushers_step_hands_its_executor_the_lease_to_check(run_root, monkeypatch):
    monkeypatch.setenv(run_lease.PUSH_GUARD_ENV, "")  # so that the test's value is undone
    assert run_lease_step.before(_settings("push", "Pusher"), _outputs(
        pushed_model=f"{run_root}/Pusher/6/pushed_model")) is None
    assert run_lease.push_guard(os.environ) == (run_lease.lease_uri(run_root), run_root)


@pytest.mark.parametrize("value", ['{"role": "grab", "task": "T", "expiry_s": 1}',
                                   '{"role": "take", "expiry_s": 1}', "take"])
def test_a_flag_the_compiler_would_not_write_is_refused(value):
    with pytest.raises(LeaseFlagError, match="--night_lease takes JSON"):
        run_lease_step.split_flag(["--night_lease", value, "--declared_output_artifacts"])
    assert run_lease_step.split_flag(["--declared_output_artifacts", "[]"]) == (
        None, ["--declared_output_artifacts", "[]"])
