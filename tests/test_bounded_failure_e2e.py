"""A run whose Beam stages run on SDK workers elsewhere fails within a bound, with one `error:`
line naming what to check, and nothing reaches the serving directory (pipeline/run_bounds.py):
a worker pool, Flink JobManager or job service that does not answer stops it before the first
step; one whose `python` lacks
Beam (its workers never start, and Beam waits for them forever) stops it at
runner.step_timeout_s."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from devtools.beam_worker_pool import portable_beam_args, worker_pool
from devtools.loopback import free_port
from tests.helpers import run_cli, write_config

pytestmark = pytest.mark.e2e


def _error_lines(stderr: str) -> list:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize("flag, runner_args, words", [
    ("environment_config", portable_beam_args, "no Beam worker pool answers there"),
    ("flink_master", lambda address: [
        "--runner=FlinkRunner", "--flink_job_server_jar=job-server.jar",
        f"--flink_master={address}", "--environment_type=EXTERNAL",
        "--environment_config=localhost:50000"], "no Flink JobManager answers there"),
    ("job_endpoint", lambda address: ["--runner=PortableRunner", f"--job_endpoint={address}"],
     "no Beam job service answers there"),
])
def test_an_endpoint_that_does_not_answer_stops_the_run_before_any_step(tmp_path, flag,
                                                                       runner_args, words):
    address = f"127.0.0.1:{free_port()}"
    (tmp_path / "job-server.jar").write_bytes(b"")  # named, never started: the check is first
    config = write_config(tmp_path, {"runner.beam_args": runner_args(address),
                                     "runner.connect_timeout_s": 2})
    # Fresh: the check comes before TensorFlow loads, so a new interpreter is the cheaper one.
    result = run_cli("pipeline.run", "--runner", "local", "--config", str(config), fresh=True)
    assert result.returncode == 1
    [line] = _error_lines(result.stderr)
    assert line.startswith(f"error: runner.beam_args --{flag}={address}: {words}")
    assert "> CsvExampleGen" not in result.stdout
    assert not (tmp_path / "serving").exists()


def _python_without_beam(folder: Path) -> Path:
    """A bin/ whose `python` is the machine's Python 3 outside the venv, which lacks Beam."""
    system = shutil.which("python3", path=os.defpath)
    if system is None or subprocess.run([system, "-c", "import apache_beam"],
                                         capture_output=True).returncode == 0:
        pytest.skip("no Python 3 without Beam outside the venv")
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").symlink_to(system)
    return folder / "bin"


def test_a_worker_pool_whose_python_lacks_beam_stops_the_run_at_the_step_bound(tmp_path):
    without_beam = _python_without_beam(tmp_path / "no-beam")
    pool_log = tmp_path / "worker_pool.log"
    with worker_pool(pool_log, path=f"{without_beam}{os.pathsep}{os.defpath}",
                     check=False) as address:
        config = write_config(tmp_path, {"runner.beam_args": portable_beam_args(address),
                                         "runner.step_timeout_s": 10})
        result = run_cli("pipeline.run", "--runner", "local", "--config", str(config),
                         timeout=300)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    [line] = _error_lines(result.stderr)
    assert line == (f"error: CsvExampleGen ran past runner.step_timeout_s = 10 s: check that "
                    f"the worker pool at {address} starts a `python` with Beam and this project "
                    "(the pool's log)")
    # The negative control: the pool did start workers, which died for want of Beam.
    assert "No module named 'apache_beam'" in pool_log.read_text(errors="replace")
    assert not (tmp_path / "serving").exists()
