"""Two overlapping Kubeflow nights against a real S3-protocol server (moto, tests/s3_server.py):
the run lease (core/run_lease.py) lets exactly one push.

Each step is the compiled spec's own command where it matters: the second night's span driver and
both Pushers run `python -m pipeline.kubeflow.step.entrypoint --night_lease ...` as the launcher
runs it, on an ExecutorInput as the open-source driver writes it (input types dropped, outputs under
<root>/<pipeline>/<run id>/<task>/...). The first night's take and its run report's release are
the same entrypoint functions (run_lease_step.before / after), called here. The serving base is
a local folder (the Pusher's own tests cover s3:// bases); the lease and the runs' outputs are in
the bucket.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core import lease_stores, run_lease
from pipeline.kubeflow.step import run_lease_step

from tests.components.test_pusher import model  # noqa: F401  (fixture: a small SavedModel)
from tests.s3_server import s3  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = "lease-test"
RUN_A = "aaaaaaaa-0000-4000-8000-000000000001"
RUN_B = "bbbbbbbb-0000-4000-8000-000000000002"
RUN_C = "cccccccc-0000-4000-8000-000000000003"
DRIVER_MODULE = "tfx.orchestration.kubeflow.v2.file_based_example_gen.driver"
RUN_EXECUTOR = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"
EXPIRY_S = 26 * 3600


def _settings(role: str, task: str) -> dict:
    return {"role": role, "task": task, "expiry_s": EXPIRY_S}


def _run_root(s3, prefix: str, run_id: str) -> str:  # noqa: F811
    return f"s3://{s3.bucket}/{prefix}/{PIPELINE}/{run_id}"


def _driver_input(run_root: str) -> dict:
    return {"inputs": {"parameterValues": {"input_base": "/nowhere"}},
            "outputs": {"artifacts": {"examples": {"artifacts": [{
                "name": "examples", "type": {"schemaTitle": "tfx.Examples"},
                "uri": f"{run_root}/CsvExampleGenDriver/101/examples"}]}},
                "outputFile": "/tmp/kfp_outputs/output_metadata.json"}}


def _pusher_input(run_root: str, model_dir: Path, base: Path, work: Path) -> dict:
    destination = json.dumps({"filesystem": {"base_directory": str(base)}})
    return {"inputs": {"artifacts": {"model": {"artifacts": [{  # no type: the driver drops it
                "name": "model", "uri": str(model_dir), "metadata": {}}]}},
            "parameterValues": {"push_destination": destination, "custom_config": "{}"}},
            "outputs": {"artifacts": {"pushed_model": {"artifacts": [{
                "name": "pushed_model", "type": {"schemaTitle": "tfx.PushedModel"},
                "uri": f"{run_root}/Pusher/202/pushed_model"}]}},
                "outputFile": str(work / "output_metadata.json")}}


PUSHER_INPUTS_SPEC = {"artifacts": {"model": {"artifactType": {
    "instanceSchema": "title: tfx.Model\ntype: object\n"}}},
    "parameters": {"custom_config": {"parameterType": "STRING"},
                   "push_destination": {"parameterType": "STRING"}}}


def _step(s3, settings: dict, module: str, executor_input: dict, *args: str):  # noqa: F811
    command = [sys.executable, "-m", "pipeline.kubeflow.step.entrypoint", "--night_lease",
               json.dumps(settings), "--declared_output_artifacts",
               json.dumps(sorted(executor_input["outputs"]["artifacts"])), module, *args,
               "--json_serialized_invocation_args", json.dumps(executor_input)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **s3.env})


def _lease(s3, prefix: str) -> dict:  # noqa: F811
    body = s3.client.get_object(Bucket=s3.bucket, Key=f"{prefix}/{PIPELINE}/.night-lease.json")
    return json.loads(body["Body"].read())


def test_the_s3_store_takes_and_releases_with_conditional_writes(s3, monkeypatch):  # noqa: F811
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    a, b = _run_root(s3, "unit", RUN_A), _run_root(s3, "unit", RUN_B)
    store = lease_stores.open_store(run_lease.lease_uri(a))
    clock = [1_800_000_000.0]
    run_lease.take(store, a, 3600, lambda: clock[0])
    with pytest.raises(run_lease.LeaseError, match=f"run {RUN_A} .* holds s3://"):
        run_lease.take(store, b, 3600, lambda: clock[0])
    clock[0] += 3600  # expired: run B takes it over (If-Match on the expired one's ETag)
    assert run_lease.take(store, b, 3600, lambda: clock[0]).run_id == RUN_B
    assert not run_lease.release(store, a, lambda: clock[0])
    assert run_lease.release(store, b, lambda: clock[0])
    assert _lease(s3, "unit")["released_at"] == clock[0]


def test_the_server_refuses_writes_whose_condition_fails(s3):  # noqa: F811
    """Negative control: moto, like S3, answers 412 to If-None-Match: * on a key that exists and
    to If-Match with an old ETag, so the store's conditions are really evaluated."""
    from botocore.exceptions import ClientError

    key = "conditions/object.json"
    first = s3.client.put_object(Bucket=s3.bucket, Key=key, Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError) as refused:
        s3.client.put_object(Bucket=s3.bucket, Key=key, Body=b"2", IfNoneMatch="*")
    assert refused.value.response["Error"]["Code"] == "PreconditionFailed"
    s3.client.put_object(Bucket=s3.bucket, Key=key, Body=b"3", IfMatch=first["ETag"])
    with pytest.raises(ClientError) as stale:
        s3.client.put_object(Bucket=s3.bucket, Key=key, Body=b"4", IfMatch=first["ETag"])
    assert stale.value.response["Error"]["Code"] == "PreconditionFailed"
    store = lease_stores.S3Store(f"s3://{s3.bucket}/{key}", client=s3.client)
    assert store.create(b"5") is False and store.replace(b"6", first["ETag"]) is False
    assert s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read() == b"3"


class WithoutConditionalWrites:
    """An S3 client of a store that answers conditional writes 501 NotImplemented (as a store
    without them does), the rest moto's."""

    def __init__(self, client):
        self.client = client

    def get_object(self, **kwargs):
        return self.client.get_object(**kwargs)

    def put_object(self, **kwargs):
        from botocore.exceptions import ClientError

        if "IfNoneMatch" in kwargs or "IfMatch" in kwargs:
            raise ClientError({"Error": {"Code": "NotImplemented", "Message": "A header you "
                                         "provided implies functionality that is not "
                                         "implemented"}}, "PutObject")
        return self.client.put_object(**kwargs)


def test_a_store_without_conditional_writes_still_gives_one_holder(s3, caplog):  # noqa: F811
    """The take writes anyway and reads the lease back; a second run still finds the first's."""
    a, b = _run_root(s3, "plain", RUN_A), _run_root(s3, "plain", RUN_B)
    store = lease_stores.S3Store(run_lease.lease_uri(a), client=WithoutConditionalWrites(
        s3.client))
    assert run_lease.take(store, a, 3600).run_id == RUN_A
    assert "does not support conditional writes (NotImplemented)" in caplog.text
    with pytest.raises(run_lease.LeaseError, match=f"run {RUN_A} .* holds"):
        run_lease.take(store, b, 3600)
    assert run_lease.release(store, a) and _lease(s3, "plain")["released_at"] is not None


@pytest.mark.e2e  # the Pushers are TensorFlow processes
def test_two_overlapping_nights_push_once(s3, model, tmp_path, monkeypatch):  # noqa: F811
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    a, b = _run_root(s3, "nights", RUN_A), _run_root(s3, "nights", RUN_B)
    base = tmp_path / "serving"
    # Night A's first step takes the lease.
    assert run_lease_step.before(_settings("take", "CsvExampleGenDriver"),
                                   _driver_input(a)) is None
    assert _lease(s3, "nights")["run_id"] == RUN_A
    # Night B starts while A runs (a manual run): its first step stops it, before TensorFlow.
    stopped = _step(s3, _settings("take", "CsvExampleGenDriver"), DRIVER_MODULE,
                    _driver_input(b), "--json_serialized_inputs_spec_args", "{}")
    assert stopped.returncode == 1
    errors = [line for line in stopped.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith(
        f"error: another run of this pipeline is in progress: run {RUN_A} (taken ")
    assert f"this run ({RUN_B}) stops at its first step and pushes nothing" in errors[0]
    # Had B's steps gone on regardless, its Pusher refuses before it touches the base (a killed
    # push's leftovers, which a push would clean, stay).
    leftover = base / ".push-killed"
    leftover.mkdir(parents=True)
    refused = _step(s3, _settings("push", "Pusher"), RUN_EXECUTOR,
                    _pusher_input(b, model, base, tmp_path / "b"),
                    "--executor_class_path", "components.pusher.executor.Executor",
                    "--json_serialized_inputs_spec_args", json.dumps(PUSHER_INPUTS_SPEC))
    assert refused.returncode == 1
    assert (f"LeaseError: the Pusher of run {RUN_B} refuses to push: run {RUN_A} (taken"
            in refused.stderr), refused.stderr[-3000:]
    assert sorted(p.name for p in base.iterdir()) == [".push-killed"]
    assert _lease(s3, "nights")["run_id"] == RUN_A, "a failed step of B released A's lease"
    # Night A's Pusher pushes.
    (tmp_path / "a").mkdir()
    pushed = _step(s3, _settings("push", "Pusher"), RUN_EXECUTOR,
                   _pusher_input(a, model, base, tmp_path / "a"),
                   "--executor_class_path", "components.pusher.executor.Executor",
                   "--json_serialized_inputs_spec_args", json.dumps(PUSHER_INPUTS_SPEC))
    assert pushed.returncode == 0, pushed.stderr[-5000:]
    (version,) = [p.name for p in base.iterdir()]
    assert (base / version / "saved_model.pb").is_file()
    # A's run report gives the lease back; the next night takes it.
    run_lease_step.after(_settings("release", "RunReport"), {"outputs": {"artifacts": {
        "html": {"artifacts": [{"uri": f"{a}/RunReport/303/html"}]}}}}, 0)
    assert _lease(s3, "nights")["released_at"] is not None
    c = _run_root(s3, "nights", RUN_C)
    assert run_lease_step.before(_settings("take", "CsvExampleGenDriver"),
                                   _driver_input(c)) is None
    assert _lease(s3, "nights")["run_id"] == RUN_C
