"""pipeline/beam_step.py: a Beam step on s3:// builds no TFX sdist that its workers
would never install, and opens one boto3 session for its S3 calls instead of one per call; a runner
whose workers do install staged packages keeps TFX's package. The process is a fresh one
(tests/kubeflow/beam_step_probe.py) against the loopback S3 server."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO
from tests.s3_server import s3  # noqa: F401  (fixture)

PROBE = REPO / "tests" / "kubeflow" / "beam_step_probe.py"


@pytest.mark.parametrize("beam_args, stages", [
    ([], False), (["--runner=DirectRunner", "--direct_running_mode=multi_processing"], False),
    (["--runner=apache_beam.runners.direct.direct_runner.DirectRunner"], False),
    (["--runner=FlinkRunner", "--environment_type=EXTERNAL",
      "--environment_config=localhost:50000"], False),
    (["--runner=PortableRunner", "--environment_type=LOOPBACK"], False),
    (["--runner=FlinkRunner"], True),  # Beam's default environment: DOCKER, which installs them
    (["--runner=PortableRunner", "--environment_type=PROCESS"], True),
    (["--runner=DataflowRunner"], True)])
def test_only_runners_whose_workers_install_staged_packages_get_tfxs_package(beam_args, stages):
    from pipeline.beam_step import stages_packages

    assert stages_packages(beam_args) is stages


@pytest.mark.e2e
def test_a_direct_runner_step_on_s3_builds_no_sdist_and_opens_one_session(s3):  # noqa: F811
    from core import storage

    env = {**os.environ, **s3.env, "PYTHONPATH": str(REPO)}
    folder = f"s3://{s3.bucket}/beam-step"
    result = subprocess.run([sys.executable, str(PROBE), folder, *storage.beam_s3_args(env)],
                            capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    record = json.loads(result.stdout.strip().splitlines()[-1])
    for name in ("tfx", "staged", "step"):
        assert record[name]["read"] == "row 2\n", record
        assert record[name]["listed"] == [f"{folder}/{name}/part-0.txt"], record
    # The negative control: TFX and Beam as they are package TFX for the in-process runner and
    # open a session per S3 call (3 rounds of create, exists, open, match).
    assert record["tfx"]["packaged"] and record["tfx"]["sessions"] >= 9, record
    # A runner whose workers install staged packages keeps TFX's package.
    assert record["staged"]["packaged"], record
    assert record["staged"]["sessions"] == 1, record  # the shared client's one session
    assert not record["step"]["packaged"] and record["step"]["sessions"] == 0, record


@pytest.mark.slow
def test_other_tfx_or_beam_versions_get_tfx_and_beam_as_they_are(monkeypatch, caplog):
    from apache_beam.io.aws.clients.s3 import boto3_client
    from tfx.utils import dependency_utils

    from pipeline import beam_step


    monkeypatch.setitem(beam_step.READ_AGAINST, "apache_beam", ("2.0.0",))
    before = (dependency_utils.make_beam_dependency_flags, boto3_client.boto3)
    assert beam_step.prepare(["--s3_region_name=us-east-1"]) == ["--s3_region_name=us-east-1"]
    assert (dependency_utils.make_beam_dependency_flags, boto3_client.boto3) == before
    assert "was read against TFX 1.16.0 and Beam 2.0.0" in caplog.text
