"""The request sink's serving span on an object store (request_sink.serving_base s3://...), as a
cluster runs it: against a real S3-protocol server (tests/s3_server.py, moto's server mode), the
connection from the standard AWS variables only. A span file is one object, whole, at the name a
local run gives the file; a replay overwrites it; a store that refuses or is away is an OSError
(the sink retries it without committing); the config keeps the URI as a URI; and a real sink
process fed by Kafka writes objects that the skew check's own serving_span() finds through
tf.io.gfile's s3 file system.
"""
from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import textwrap
import uuid

import pytest

from core import serving_log
from core.config import ConfigError
from core.serving_log import write_span_file
from devtools.loopback import free_port
from service.config import load_service_config
from tests.helpers import REPO, dump_yaml, load_yaml
from tests.kafka_server import kafka_server  # noqa: F401  (fixture)
from tests.s3_server import ACCESS_KEY, REGION, SECRET_KEY, s3  # noqa: F401  (fixture)
from tests.service.test_request_sink import CONFIG, PIPELINE, record, setup  # noqa: F401
from tests.service.updater_harness import produce, wait_until

pytestmark = pytest.mark.slow  # an S3 server process
TEXT = "user_click_history,hour,device\nsku1|sku2,3.0,mobile\n"


def aws_env(endpoint: str) -> dict:
    """What the request-sink pod gets (deploy/service/k8s/request-sink-deployment.yaml): boto3's
    own variable names, nothing the sink reads itself."""
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}


@pytest.fixture
def store(s3, monkeypatch):  # noqa: F811
    """The S3 server's connection in this process's environment; a fresh boto3 client."""
    for key, value in aws_env(s3.endpoint).items():
        monkeypatch.setenv(key, value)
    serving_log._S3_CLIENTS.clear()
    yield s3
    serving_log._S3_CLIENTS.clear()


def body(s3, key: str) -> bytes:  # noqa: F811
    return s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()


def test_a_span_file_is_one_whole_object_and_a_replay_overwrites_it(store):
    prefix = f"root-{uuid.uuid4().hex[:8]}/requests"
    base = f"s3://{store.bucket}/{prefix}"
    name = "retrieve-p0-o0-20261101T235800.csv"
    uri = write_span_file(base, "span-20261101", name, TEXT)
    key = f"{prefix}/span-20261101/{name}"
    assert uri == f"s3://{store.bucket}/{key}"
    assert store.keys(prefix) == [key]  # no temporary object beside it
    assert body(store, key) == TEXT.encode()
    replayed = TEXT + "sku3,4.0,desktop\n"
    write_span_file(base + "/", "span-20261101", name, replayed)  # a trailing / is the same
    assert store.keys(prefix) == [key]
    assert body(store, key) == replayed.encode()


def test_a_store_that_refuses_or_is_away_is_an_oserror_the_sink_retries(store, monkeypatch):
    with pytest.raises(OSError, match="NoSuchBucket"):
        write_span_file("s3://no-such-bucket/requests", "span-20261101", "a.csv", TEXT)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    serving_log._S3_CLIENTS.clear()
    with pytest.raises(OSError, match="PutObject s3://"):
        write_span_file(f"s3://{store.bucket}/requests", "span-20261101", "a.csv", TEXT)


def test_the_config_keeps_an_s3_serving_base_as_a_uri(tmp_path):
    raw = load_yaml(CONFIG.read_text())
    raw["pipeline_config"] = str(CONFIG.parent / raw["pipeline_config"])
    raw["catalog"]["path"] = str((CONFIG.parent / raw["catalog"]["path"]).resolve())
    raw["request_sink"]["serving_base"] = "s3://mlpipeline/tfx/nightly/requests"
    (tmp_path / "service.yaml").write_text(dump_yaml(raw))
    service = load_service_config(tmp_path / "service.yaml")
    assert service.request_sink.serving_base_path(service.pipeline) == \
        "s3://mlpipeline/tfx/nightly/requests"  # not resolved against the file's folder
    for wrong in ("gs://mlpipeline/requests", "s3://"):  # no other store; a bucket named
        raw["request_sink"]["serving_base"] = wrong
        (tmp_path / "service.yaml").write_text(dump_yaml(raw))
        with pytest.raises(ConfigError, match="request_sink.serving_base"):
            load_service_config(tmp_path / "service.yaml")


# The skew check's reader of a serving span (components/skew_gate/executor.py serving_span), in
# a subprocess as tests/README.md says for tensorflow-io's s3 file system.
_FIND = textwrap.dedent("""
    import json, sys
    import pipeline  # noqa: F401
    from core import storage
    from pipeline.kubeflow.step import file_systems
    base, pattern = sys.argv[1], sys.argv[2]
    file_systems.enable([base])
    from components.skew_gate.executor import serving_span
    span, files, columns = serving_span(base, pattern, 1)
    print(json.dumps({"span": span, "files": files, "columns": columns}))
    storage.exit_now(0)
""")


@pytest.mark.e2e  # a sink process on a real Kafka node, a TensorFlow process on S3
def test_the_sink_writes_objects_the_skew_check_finds(setup, kafka_server, s3):  # noqa: F811
    prefix = f"root-{uuid.uuid4().hex[:8]}/requests"
    base = f"s3://{s3.bucket}/{prefix}"
    settings, start = setup(serving_base=base)
    sink = start(**aws_env(s3.endpoint))
    produce(kafka_server, settings["topic"], [record(n) for n in range(5)])
    wait_until(lambda: s3.keys(prefix) or None, "the sink's object", timeout_s=60)
    assert sink.terminate() == 0, sink.log
    [key] = s3.keys(prefix)
    assert key.startswith(f"{prefix}/span-20261101/retrieve-p0-o000000000000-")
    text = body(s3, key).decode()
    assert text.count("\n") == 6  # header and the five records
    found = subprocess.run([sys.executable, "-c", _FIND, base, PIPELINE.data.file_pattern],
                           cwd=REPO, capture_output=True, text=True, timeout=300,
                           env={**os.environ, **s3.env})
    assert found.returncode == 0, found.stderr[-3000:]
    result = json.loads([line for line in found.stdout.splitlines() if line.startswith("{")][-1])
    # The span number the reader gives span-20261101: its day since the epoch.
    assert result["span"] == (datetime.date(2026, 11, 1) - datetime.date(1970, 1, 1)).days
    assert result["files"] == [f"s3://{s3.bucket}/{key}"]
    assert result["columns"] == text.splitlines()[0].split(",")
    assert sorted(result["columns"]) == ["device", "hour", "user_click_history"]
