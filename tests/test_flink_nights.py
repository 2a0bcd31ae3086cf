"""The nights on a real Flink 1.16.3 cluster (`make flink-up`, devtools/flink_cluster.py): two
TaskManagers, each with its own bare-env Beam worker pool on its own localhost (a network
namespace each, as a pod and its sidecar), Beam's job server from beam-runners-flink-1.16:2.56.0,
the pipeline's Beam 2.59.0 SDK. Each test gets a fresh cluster and runs the README's command in a
fresh interpreter.

- Failures first, in one output folder: a worker pool killed mid-stage, the job server and the
  JobManager killed mid-run each fail the run with one `error:` line within the bound and serve
  nothing; then the bundled night in that same folder pushes (the next run completes), each
  Beam step a FINISHED Flink job, both pools ran SDK work.
- A TaskManager killed during Transform: Flink's restart strategy (flink-conf.yaml: fixed-delay,
  3 attempts, 5 s apart) reruns the job on the other one and the night pushes.
- Both bundled nights: every Beam step's artifacts equal the in-memory run's (examples,
  statistics, vocabularies, transformed features: tests/beam_artifacts.py), which is what holds
  Beam 2.59.0's SDK and the 2.56.0 job server to account. The metrics agree to 0.02, not to the
  last digit: the Trainer reads the examples in the order the runner wrote them (Flink's two
  subtasks write two files, the in-memory runner one), and SGD's result depends on that order.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devtools import flink_cluster, netns
from tests.beam_artifacts import assert_same_beam_artifacts
from tests.flink_fixture import Cluster, _get
from tests.helpers import REPO, example_config, versions, write_config

pytestmark = [
    pytest.mark.e2e, pytest.mark.timeout(2400),  # a night on the cluster, with its in-memory twin
    pytest.mark.skipif(bool(flink_cluster.jar_problem() or netns.available()),
                       reason=str(flink_cluster.jar_problem() or netns.available())),
]

BEAM_STEPS = ("csvexamplegen", "statisticsgen", "transform", "evaluator")
NAME = example_config().pipeline_name  # its jobs are <pipeline>-<step>; its model's folder
RUN_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def night(tmp_path_factory) -> Path:
    """One output and serving folder for the failures and then the night that pushes; no cache,
    so that night runs every Beam step on Flink."""
    folder = tmp_path_factory.mktemp("flink-night")
    return write_config(folder, {"runner.enable_cache": False, "runner.step_timeout_s": 300})


def _start(config: Path, cluster: Cluster, env: dict = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline.run", "--config", str(config), "--beam-args",
         str(cluster.beam_args)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env)


def _finish(run: subprocess.Popen) -> tuple:
    stdout, stderr = run.communicate(timeout=RUN_TIMEOUT_S)
    return run.returncode, stdout, stderr


def _when_running(cluster: Cluster, step: str, on: str = None, limit_s: float = 600) -> None:
    """Returns once the step's Flink job runs (with a subtask RUNNING on TaskManager `on`)."""
    name = f"{NAME}-{step}"
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        job = cluster.jobs().get(name)
        if job and job["state"] == "RUNNING":
            if on is None:
                return
            detail = _get(f"{cluster.rest}/jobs/{job['jid']}")
            for vertex in detail["vertices"]:
                tasks = _get(f"{cluster.rest}/jobs/{job['jid']}/vertices/{vertex['id']}"
                             "/taskmanagers")["taskmanagers"]
                if any(t["taskmanager-id"] == on and t["status"] == "RUNNING" for t in tasks):
                    return
        time.sleep(0.5)
    pytest.fail(f"{name} did not run{f' on {on}' if on else ''} within {limit_s} s")


def metrics(output: str) -> dict:
    """The run summary's candidate metrics."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if "metric (all eval data)" in line) + 1
    table = {}
    for line in lines[start:]:
        if not line.startswith("  ") or line.startswith("  baseline:") or ":" in line:
            break
        name, candidate = line.split()[:2]
        table[name] = float(candidate)
    return table


def assert_metrics_agree(ours: dict, in_memory: dict) -> None:
    assert sorted(ours) == sorted(in_memory) and ours["example_count"] == in_memory[
        "example_count"]
    assert all(abs(ours[m] - in_memory[m]) <= 0.02 for m in ours), (ours, in_memory)


def _failed_with_one_error_line(result: tuple, serving: Path) -> str:
    returncode, stdout, stderr = result
    assert returncode == 1, stdout[-3000:] + stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr[-3000:]
    assert versions(serving) == []
    return errors[0]


def test_a_worker_pool_killed_mid_stage_fails_the_run_within_the_bound(night, flink):
    run = _start(night, flink)
    _when_running(flink, "statisticsgen")
    flink.kill("worker-pool-2")  # the pool and the SDK workers it started
    began = time.monotonic()
    line = _failed_with_one_error_line(_finish(run), night.parent / "serving" / NAME)
    assert time.monotonic() - began < 300, "within runner.step_timeout_s"
    assert f"the Beam job {NAME}-statisticsgen ended FAILED" in line, line
    assert flink.jobs()[f"{NAME}-statisticsgen"]["state"] == "FAILED"


@pytest.mark.parametrize("part", ["job-server", "jobmanager"])
def test_the_job_server_or_jobmanager_lost_mid_run_fails_it_within_the_bound(night, flink,
                                                                            part):
    run = _start(night, flink)
    _when_running(flink, "statisticsgen")
    flink.kill(part)
    began = time.monotonic()
    line = _failed_with_one_error_line(_finish(run), night.parent / "serving" / NAME)
    assert time.monotonic() - began < 330, "within runner.step_timeout_s and its exit"
    assert line.startswith({
        "job-server": "error: the Beam job service stopped answering mid-run (UNAVAILABLE: ",
        "jobmanager": f"error: the Beam job {NAME}-statisticsgen ended FAILED on the runner: ",
    }[part]), line


def test_after_the_failures_the_bundled_night_pushes_the_in_memory_artifacts(night, flink,
                                                                           pushed_run,
                                                                           tmp_path):
    before = flink.workers_started()
    # The run's temporary folder its own: TFX's sdist for Beam's workers would land there
    # (tfx/utils/dependency_utils.py, 49 MB a step), which the pools never install
    # (pipeline/beam_step.py).
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    returncode, stdout, stderr = _finish(_start(night, flink, {**os.environ,
                                                               "TMPDIR": str(scratch)}))
    assert returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert not list(scratch.glob("*/build/tfx/dist/tfx_ephemeral-*")), "TFX's sdist was built"
    assert "blessed:    yes" in stdout
    assert len(versions(night.parent / "serving" / NAME)) == 1
    assert_same_beam_artifacts(night.parent / "outputs", pushed_run.folder / "outputs")
    assert_metrics_agree(metrics(stdout), metrics(pushed_run.output))
    jobs = flink.jobs()
    assert {name: job["state"] for name, job in jobs.items()} == {
        f"{NAME}-{step}": "FINISHED" for step in BEAM_STEPS}
    # Both pools ran SDK work: each started workers during the night, and every Beam step's job
    # had subtasks on both TaskManagers (and so on both pools: each TaskManager asks only its own
    # localhost).
    after = flink.workers_started()
    assert all(after[pool] > before[pool] for pool in after), (before, after)
    for job in jobs.values():
        seen = set()
        for vertex in _get(f"{flink.rest}/jobs/{job['jid']}")["vertices"]:
            seen |= {t["taskmanager-id"] for t in _get(
                f"{flink.rest}/jobs/{job['jid']}/vertices/{vertex['id']}/taskmanagers"
            )["taskmanagers"]}
        assert seen == {"taskmanager-1", "taskmanager-2"}, (job["name"], seen)


def test_a_taskmanager_killed_during_transform_is_rerun_by_the_restart_strategy(tmp_path,
                                                                               flink):
    config = write_config(tmp_path, {"runner.enable_cache": False, "runner.step_timeout_s": 300})
    run = _start(config, flink)
    _when_running(flink, "transform", on="taskmanager-2")
    flink.kill("taskmanager-2")
    returncode, stdout, stderr = _finish(run)
    assert returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert len(versions(tmp_path / "serving" / NAME)) == 1
    transform = flink.jobs()[f"{NAME}-transform"]
    assert transform["state"] == "FINISHED"
    history = _get(f"{flink.rest}/jobs/{transform['jid']}/exceptions")
    assert "taskmanager-2" in json.dumps(history["exceptionHistory"]["entries"])
    # It went through RESTARTING (the job's metrics are gone once it finished).
    assert _get(f"{flink.rest}/jobs/{transform['jid']}")["timestamps"]["RESTARTING"] > 0


def test_the_recommender_night_writes_the_in_memory_artifacts_and_pushes(tmp_path, flink,
                                                            pushed_recommender):
    config = write_config(tmp_path, {"runner.enable_cache": False, "runner.step_timeout_s": 600},
                          name="recommender.yaml",
                          source=REPO / "configs" / "recommender.yaml")
    returncode, stdout, stderr = _finish(_start(config, flink))
    assert returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert "blessed:    yes" in stdout
    assert_same_beam_artifacts(tmp_path / "outputs", pushed_recommender.config_path.parent
                               / "outputs")
    assert_metrics_agree(metrics(stdout), metrics(pushed_recommender.output))
    assert all(flink.jobs()[f"recommender-{step}"]["state"] == "FINISHED"
               for step in BEAM_STEPS)
    assert all(started > 0 for started in flink.workers_started().values())
