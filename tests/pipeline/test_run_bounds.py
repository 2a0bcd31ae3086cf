"""pipeline.run_bounds and the config's Flink checks: a run whose Beam stages run elsewhere
fails within a bound, with one line naming what to check (end to end:
tests/test_bounded_failure_e2e.py)."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from core.config import ConfigError, load_config
from devtools.loopback import free_port
from pipeline import run_bounds
from tests.helpers import write_config

POOL = ["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=EXTERNAL"]


@pytest.mark.parametrize("beam_args, wanted", [
    ([*POOL, "--environment_config=127.0.0.1:5"], [("environment_config", "127.0.0.1", 5)]),
    (["--environment_type=DOCKER", "--environment_config=apache/beam_python3.10_sdk:2.59.0"], []),
    (["--runner=FlinkRunner", "--flink_master=[local]"], []),
    (["--flink_master", "localhost:8081", "--job_endpoint=embed"],
     [("flink_master", "localhost", 8081)]),
    (["--job_endpoint=127.0.0.1:8099"], [("job_endpoint", "127.0.0.1", 8099)]),
    # A cluster's job service: the pool is each TaskManager's own localhost, not probed here
    # (the printed arguments of `make flink-up`, and deploy/flink's).
    (["--runner=PortableRunner", "--job_endpoint=127.0.0.1:8099",
      "--flink_master=10.213.1.10:8081", "--environment_type=EXTERNAL",
      "--environment_config=localhost:50000"],
     [("job_endpoint", "127.0.0.1", 8099), ("flink_master", "10.213.1.10", 8081)]),
    (["--runner=FlinkRunner", "--flink_master=10.0.0.5:8081", "--environment_type=EXTERNAL",
      "--environment_config=localhost:50000"], [("flink_master", "10.0.0.5", 8081)]),
    ([], []),
])
def test_the_endpoints_that_must_answer_first(beam_args, wanted):
    assert run_bounds.endpoints(beam_args) == wanted


def test_a_taskmanager_side_pool_is_named_as_not_probed_and_a_local_one_is_not():
    cluster = ["--job_endpoint=127.0.0.1:8099", "--environment_type=EXTERNAL",
               "--environment_config=localhost:50000"]
    assert run_bounds.unprobed(cluster) == (
        "the worker pool at --environment_config=localhost:50000 is resolved on each "
        "TaskManager (its own localhost on a cluster), so it is not probed from here; a pool "
        "that never starts a worker stops the run at runner.step_timeout_s")
    assert run_bounds.unprobed([*POOL, "--environment_config=127.0.0.1:5"]) is None
    assert run_bounds.unprobed(["--job_endpoint=127.0.0.1:8099"]) is None


def test_an_endpoint_that_does_not_answer_names_its_flag_value_and_what_to_do():
    port = free_port()
    problem = run_bounds.unreachable([*POOL, f"--environment_config=127.0.0.1:{port}"], 2)
    assert problem.startswith(f"runner.beam_args --environment_config=127.0.0.1:{port}: no Beam "
                              "worker pool answers there")
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        answering = f"--flink_master=127.0.0.1:{listening.getsockname()[1]}"
        assert run_bounds.unreachable([answering], 2) is None


class _Progress:
    """A step that started long ago and never finishes (core.progress.ProgressHandler's API)."""

    def current_step(self):
        return "Transform", time.monotonic() - 60


def test_a_step_past_its_bound_interrupts_the_main_threads_wait_naming_step_and_pool():
    never = threading.Event()
    with pytest.raises(run_bounds.StepTimedOut) as stopped:
        with run_bounds.step_bound(_Progress(), 10, [*POOL, "--environment_config=h:1"]):
            never.wait(30)  # as a Beam job's wait: only the bound ends it
    assert str(stopped.value).startswith(
        "Transform ran past runner.step_timeout_s = 10 s: check that the worker pool at h:1")


def test_flink_without_a_pinned_job_server_jar_is_refused_naming_the_key(tmp_path):
    config = write_config(tmp_path, {"runner.beam_args": ["--runner=FlinkRunner"]})
    with pytest.raises(ConfigError, match=r"runner\.beam_args: --runner=FlinkRunner without "
                                          r"--flink_job_server_jar: Beam would download"):
        load_config(config)
    missing = write_config(tmp_path, {"runner.beam_args": [
        "--runner=FlinkRunner", "--flink_job_server_jar=nowhere/job-server.jar"]})
    with pytest.raises(ConfigError, match=r"--flink_job_server_jar=nowhere/job-server\.jar: "
                                          "no such file"):
        load_config(missing)
    (tmp_path / "job-server.jar").write_bytes(b"")
    pinned = write_config(tmp_path, {"runner.beam_args": [
        "--runner=FlinkRunner", "--flink_job_server_jar=job-server.jar"]})
    assert load_config(pinned).runner.beam_args[1] == "--flink_job_server_jar=job-server.jar"
