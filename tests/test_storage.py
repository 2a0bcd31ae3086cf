"""core.storage: which paths the steps can open, s3:// against a real S3-protocol server.

Everything that touches s3:// through tensorflow-io runs in a subprocess: a process that did
aborts at exit (status 134), which would turn this pytest run into a failure.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from core import storage
from tests.helpers import REPO
from tests.s3_server import s3  # noqa: F401  (fixture)

# What ServingBaseline reads on s3:// (components/serving_baseline/component.py latest_version), as
# a serving dir fills: nothing yet, an empty makedirs folder, a version still being copied, a
# complete one.
_STEP = textwrap.dedent("""
    import json, sys
    import pipeline  # noqa: F401
    from core import storage
    base, exit_now = sys.argv[1], sys.argv[2] == "1"
    from pipeline.kubeflow.step import file_systems

    file_systems.enable([base])
    import tensorflow as tf
    from components.serving_baseline.component import latest_version
    seen = {"nothing": latest_version(base)}
    tf.io.gfile.makedirs(base + "/7")
    seen["makedirs"] = [latest_version(base), tf.io.gfile.isdir(base + "/7")]
    with tf.io.gfile.GFile(base + "/7/variables/variables.index", "w") as f:
        f.write("x")
    seen["partial"] = latest_version(base)
    with tf.io.gfile.GFile(base + "/7/saved_model.pb", "w") as f:
        f.write("x")
    seen["complete"] = [latest_version(base), tf.io.gfile.listdir(base)]
    print(json.dumps(seen))
    if exit_now:
        storage.exit_now(0)
""")


def _step(s3, prefix: str, exit_now: bool) -> subprocess.CompletedProcess:  # noqa: F811
    return subprocess.run(
        [sys.executable, "-c", _STEP, f"s3://{s3.bucket}/{prefix}/demo", str(int(exit_now))],
        cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, **s3.env})


def _result(process: subprocess.CompletedProcess) -> dict:
    lines = [line for line in process.stdout.splitlines() if line.startswith("{")]
    assert lines, process.stdout + process.stderr
    return json.loads(lines[-1])


@pytest.mark.parametrize("uri", ["/data/demo", "file:///data", "gs://b/root", "s3://b/root",
                                 "relative/dir"])
def test_paths_the_steps_can_open(uri):
    assert storage.problem(uri) is None


def test_minio_scheme_is_refused_with_the_s3_form():
    message = storage.problem("minio://mlpipeline/v2/artifacts")
    assert "TensorFlow cannot open minio://" in message
    assert "s3://mlpipeline/v2/artifacts" in message and "kubeflow.object_store" in message
    with pytest.raises(storage.StorageError, match="minio://"):
        storage.check(["s3://b/x", "minio://mlpipeline/v2/artifacts"])


def test_unknown_scheme_is_refused():
    with pytest.raises(storage.StorageError, match=r"hdfs:// is not a file system"):
        storage.check(["hdfs://namenode/data"])


def test_beam_args_carry_endpoint_and_region_never_credentials():
    env = {"S3_ENDPOINT": "http://minio-service.kubeflow:9000", "AWS_REGION": "eu-west-1",
           "AWS_ACCESS_KEY_ID": "AKIA-EXAMPLE", "AWS_SECRET_ACCESS_KEY": "do-not-leak"}
    args = storage.beam_s3_args(env)
    assert args == ["--s3_endpoint_url=http://minio-service.kubeflow:9000",
                    "--s3_region_name=eu-west-1"]
    assert not any("AKIA" in a or "do-not-leak" in a for a in args)


def test_beam_args_follow_tensorflow_io_host_port_form():
    assert storage.beam_s3_args({"S3_ENDPOINT": "minio:9000", "S3_USE_HTTPS": "0"}) == [
        "--s3_endpoint_url=http://minio:9000"]
    assert storage.beam_s3_args({"S3_ENDPOINT": "minio:9000"}) == [
        "--s3_endpoint_url=https://minio:9000"]
    assert storage.beam_s3_args({}) == []


@pytest.mark.slow
def test_beams_s3_file_system_reads_and_writes_with_those_args(s3, monkeypatch):  # noqa: F811
    """Beam's own S3 file system (boto3), as the data steps use it: options from beam_s3_args,
    credentials from the environment."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    FileSystems.set_options(PipelineOptions(storage.beam_s3_args(s3.env)))
    try:
        with FileSystems.create(f"s3://{s3.bucket}/beam/part-0.csv") as out:
            out.write(b"a,b\n1,2\n")
        [match] = FileSystems.match([f"s3://{s3.bucket}/beam/*.csv"])
        assert [m.path for m in match.metadata_list] == [f"s3://{s3.bucket}/beam/part-0.csv"]
        with FileSystems.open(f"s3://{s3.bucket}/beam/part-0.csv") as read:
            assert read.read() == b"a,b\n1,2\n"
    finally:
        FileSystems.set_options(PipelineOptions([]))


@pytest.mark.e2e  # a TensorFlow process on a real S3 server
def test_serving_baseline_reads_a_serving_dir_on_s3(s3):  # noqa: F811
    """S3 has no folders: an empty makedirs folder does not exist, so nothing serves until a
    version's saved_model.pb (which TFX's Pusher copies last) is there."""
    process = _step(s3, "serving", exit_now=True)
    assert process.returncode == 0, process.stderr[-3000:]
    assert _result(process) == {"nothing": None, "makedirs": [None, False], "partial": None,
                                "complete": ["7", ["7"]]}
    # makedirs wrote no object: only the two files are in the bucket.
    assert s3.keys("serving/") == ["serving/demo/7/saved_model.pb",
                                   "serving/demo/7/variables/variables.index"]


@pytest.mark.e2e  # a TensorFlow process on a real S3 server
def test_a_process_that_touched_s3_aborts_at_exit_without_exit_now(s3):  # noqa: F811
    """Negative control for exit_now: the same work, ended normally, exits 134 (SIGABRT,
    'pure virtual method called'), which KFP would count as a failed step."""
    process = _step(s3, "abort", exit_now=False)
    assert _result(process)["complete"] == ["7", ["7"]]  # the work itself ran
    assert process.returncode in (134, -6), (process.returncode, process.stderr[-2000:])
    assert "pure virtual method called" in process.stderr



def test_makedirs_calls_nothing_on_an_object_store():
    """On s3:// and gs:// storage.makedirs never reaches the file system's CreateDir, whose
    folder-marker objects KFP's launcher would download as files (core/storage.py); elsewhere it
    makes the folder (the steps pass tf.io.gfile.makedirs; here a list records the calls)."""
    made = []
    for path in ("s3://bucket/base/out", "gs://bucket/out", "S3://bucket/out"):
        storage.makedirs(path, made.append)
    assert made == []
    storage.makedirs("/tmp/out", made.append)
    assert made == ["/tmp/out"]


def test_the_steps_make_folders_only_through_storage_makedirs():
    """By construction, no folder marker on S3: components/, pipeline/ and core/ make folders
    only through storage.makedirs (which calls the makedirs it is given, never on s3://)."""
    calls = [str(path.relative_to(REPO))
             for folder in ("components", "pipeline", "core")
             for path in sorted((REPO / folder).rglob("*.py"))
             for line in path.read_text().splitlines()
             if "makedirs(" in line and not line.lstrip().startswith(("#", "def "))
             and "storage.makedirs(" not in line]
    assert calls == []
