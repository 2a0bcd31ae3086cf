"""Upload, run and schedule the real compiled spec against a fake KFP v2beta1 API server
(tests/kubeflow/fake_kfp_api.py: parses uploads and enforces unique names as KFP 2.3.0's API
server does). The CLI compiles and publishes once per module; other tests reuse that spec."""
from __future__ import annotations

import socket
from pathlib import Path

import kfp_server_api
import pytest
import yaml

from core.config import load_config
from pipeline.kubeflow import KubeflowError

from pipeline.kubeflow.client import publish as publish_module

from pipeline.kubeflow.client.publish import TOKEN_ENV, publish
from tests.helpers import example_config, load_yaml_all, run_cli, write_config
from tests.kubeflow.fake_kfp_api import API, BACKEND_DEFAULT_ROOT, FakeKfpApi

# The config's names; the cluster's paths are the test's own.
NAME = example_config().pipeline_name
PLACEHOLDER_ROOT = "gs://YOUR_BUCKET/tfx/nightly"  # as the bundled config ships it
ROOT = "gs://acme-ml/tfx/nightly"
CLUSTER = {"kubeflow.image": "ghcr.io/acme/tfx-pipeline-template:1.2.3",
           "kubeflow.pipeline_root": ROOT,
           "kubeflow.input_base": "gs://acme-ml/data/spans",
           "kubeflow.serving_dir": "s3://acme-models/serving",
           "kubeflow.experiment": "nightly-test", "kubeflow.service_account": "pipeline-runner"}


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """`python -m pipeline.run --runner kubeflow --endpoint URL`: compile, upload, run."""
    folder = tmp_path_factory.mktemp("publish")
    config = write_config(folder, {**CLUSTER, "kubeflow.output_dir": str(folder / "spec")})
    with FakeKfpApi() as kfp:
        result = run_cli("pipeline.run", "--runner", "kubeflow", "--config", str(config),
                         "--endpoint", kfp.url)
    assert result.returncode == 0, result.stdout + result.stderr
    return kfp, result.stdout, folder / "spec" / f"{NAME}.yaml"


@pytest.fixture
def spec(published) -> Path:
    return published[2]


@pytest.fixture
def kfp():
    with FakeKfpApi() as server:
        yield server


@pytest.fixture
def config(tmp_path):
    return load_config(write_config(tmp_path, CLUSTER))


def _variant(spec: Path, folder: Path, change) -> Path:
    """A copy of the real spec (its PipelineSpec document changed by change) and the
    documents beside it."""
    documents = list(load_yaml_all(spec.read_text()))
    change(next(d for d in documents if "pipelineInfo" in d))
    path = folder / "variant" / f"{NAME}.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump_all(documents))
    return path


def test_cli_uploads_the_compiled_spec_and_starts_a_run_with_the_root(published):
    kfp, stdout, _ = published
    assert f"Uploaded {NAME}.yaml as pipeline '{NAME}'" in stdout
    (version,) = kfp.versions.values()
    assert version["pipeline_spec"]["schemaVersion"] == "2.1.0"
    assert {"CsvExampleGenDriver", "Pusher"} <= set(version["pipeline_spec"]["components"][
        "comp-exit-handler-1"]["dag"]["tasks"])
    (run,) = kfp.runs.values()
    assert run["runtime_config"]["pipeline_root"] == ROOT
    assert kfp.effective_pipeline_root(run) == ROOT
    assert run["service_account"] == "pipeline-runner"
    assert f"Started run {run['run_id']}" in stdout and f"pipeline root {ROOT}" in stdout


def test_without_the_root_in_the_run_the_backend_would_use_minio(kfp):
    """Negative control of the driver's fallback (v2/driver/driver.go, v2/config/env.go)."""
    assert kfp.effective_pipeline_root({"runtime_config": {"parameters": {}}}) == (
        BACKEND_DEFAULT_ROOT)


def test_first_publish_creates_the_pipeline_and_experiment(kfp, spec, config):
    lines = publish(spec, config, kfp.url, schedule=False)
    (pipeline,) = kfp.pipelines.values()
    (experiment,) = kfp.experiments.values()
    assert pipeline["namespace"] == experiment["namespace"] == ""  # single-user KFP drops it
    assert experiment["display_name"] == "nightly-test"
    (run,) = kfp.runs.values()
    (version,) = kfp.versions.values()
    assert run["experiment_id"] == experiment["experiment_id"]
    assert run["pipeline_version_reference"] == {
        "pipeline_id": pipeline["pipeline_id"],
        "pipeline_version_id": version["pipeline_version_id"]}
    assert any(f"{kfp.url}/#/runs/details/{run['run_id']}" in line for line in lines)


def test_two_publishes_in_the_same_second_get_two_versions(kfp, spec, config, monkeypatch):
    monkeypatch.setattr(publish_module, "_stamp", lambda: "20261130-020000")
    for _ in range(3):
        publish(spec, config, kfp.url, schedule=False)
    names = [v["display_name"] for v in kfp.versions.values()]
    assert len(kfp.pipelines) == 1 and len(kfp.experiments) == 1
    assert len(set(names)) == 3
    assert all(n.startswith(f"{NAME}-20261130-020000-") for n in names[1:])
    newest = list(kfp.versions.values())[-1]
    assert list(kfp.runs.values())[-1]["pipeline_version_reference"][
        "pipeline_version_id"] == newest["pipeline_version_id"]


def test_the_fake_refuses_a_duplicate_version_name(kfp, spec, config, monkeypatch):
    """Negative control: the version name publish would make without its random part."""
    monkeypatch.setattr(publish_module, "version_name", lambda name, data: f"{name}-same")
    publish(spec, config, kfp.url, schedule=False)
    publish(spec, config, kfp.url, schedule=False)  # first version: named after the pipeline
    with pytest.raises(KubeflowError) as raised:
        publish(spec, config, kfp.url, schedule=False)
    assert f"uploading version {NAME}-same failed: HTTP 409" in str(raised.value)
    assert f"The name {NAME}-same already exist" in str(raised.value)


def test_a_taken_version_name_is_retried_with_another_suffix(kfp, spec, config, monkeypatch):
    names = iter([f"{NAME}-taken", f"{NAME}-taken", f"{NAME}-free"])
    monkeypatch.setattr(publish_module, "version_name", lambda name, data: next(names))
    publish(spec, config, kfp.url, schedule=False)
    publish(spec, config, kfp.url, schedule=False)
    lines = publish(spec, config, kfp.url, schedule=False)
    assert f"version {NAME}-free" in lines[0]
    assert [v["display_name"] for v in kfp.versions.values()] == [
        NAME, f"{NAME}-taken", f"{NAME}-free"]


def test_a_pipeline_created_meanwhile_gets_the_new_version(kfp, spec, config):
    """Another publish created the pipeline between our look-up and our upload (409)."""
    publish(spec, config, kfp.url, schedule=False)
    kfp.fail("GET", f"{API}/pipelines", 200, {"pipelines": []}, times=1)
    publish(spec, config, kfp.url, schedule=False)
    assert len(kfp.pipelines) == 1 and len(kfp.versions) == 2 and len(kfp.runs) == 2


def test_an_experiment_created_meanwhile_is_used(kfp, spec, config):
    publish(spec, config, kfp.url, schedule=False)
    kfp.fail("GET", f"{API}/experiments", 200, {"experiments": []}, times=1)
    publish(spec, config, kfp.url, schedule=False)
    (experiment,) = kfp.experiments.values()
    assert [r["experiment_id"] for r in kfp.runs.values()] == [experiment["experiment_id"]] * 2


def test_scheduling_twice_leaves_one_nightly_recurring_run_with_the_root(kfp, spec, config):
    publish(spec, config, kfp.url, schedule=True)
    lines = publish(spec, config, kfp.url, schedule=True)
    (recurring,) = kfp.recurring_runs.values()
    assert recurring["display_name"] == f"{NAME}-nightly"
    assert recurring["trigger"] == {"cron_schedule": {"cron": "0 0 2 * * *"}}
    assert int(recurring["max_concurrency"]) == 1 and recurring["no_catchup"] is True
    assert recurring["mode"] == "ENABLE"
    assert recurring["runtime_config"]["pipeline_root"] == ROOT
    assert kfp.effective_pipeline_root(recurring) == ROOT
    assert recurring["service_account"] == "pipeline-runner"
    assert recurring["pipeline_version_reference"]["pipeline_version_id"] == list(
        kfp.versions.values())[-1]["pipeline_version_id"]
    assert not kfp.runs, "scheduling starts no run now"
    assert "replaced 1 earlier one(s)" in lines[-1] and f"pipeline root {ROOT}" in lines[-1]


def _scheduled(kfp, spec, config) -> str:
    publish(spec, config, kfp.url, schedule=True)
    (recurring_run_id,) = kfp.recurring_runs
    return recurring_run_id


def _version_of(recurring: dict) -> str:
    return recurring["pipeline_version_reference"]["pipeline_version_id"]


def test_a_delete_that_fails_once_is_tried_again_and_one_schedule_is_left(kfp, spec, config):
    """Issue 25: create-then-delete left two recurring runs when the delete failed."""
    old = _scheduled(kfp, spec, config)
    kfp.fail("DELETE", f"{API}/recurringruns/{old}", 500,
             {"error": "database is locked", "message": "database is locked"}, times=1)
    lines = publish(spec, config, kfp.url, schedule=True)
    (left,) = kfp.recurring_runs.values()
    assert left["recurring_run_id"] != old and "replaced 1 earlier one(s)" in lines[-1]
    assert _version_of(left) == list(kfp.versions)[-1]
    assert len(kfp.sent("DELETE", f"/recurringruns/{old}")) == 2


def test_an_old_schedule_that_cannot_be_deleted_is_left_alone(kfp, spec, config):
    """The new one is deleted again: one recurring run, the previous one, and the error says
    so."""
    old = _scheduled(kfp, spec, config)
    kfp.fail("DELETE", f"{API}/recurringruns/{old}", 500,
             {"error": "database is locked", "message": "database is locked"})
    with pytest.raises(KubeflowError) as raised:
        publish(spec, config, kfp.url, schedule=True)
    assert list(kfp.recurring_runs) == [old]
    message = str(raised.value)
    assert message.startswith(f"replacing recurring run {NAME}-nightly failed: could not "
                              f"delete\n  {old}: deleting the previous recurring run {old} "
                              "failed: HTTP 500: database is locked")
    assert f"the previous one, {old}, is left alone and still schedules" in message


def test_when_no_schedule_can_be_deleted_the_error_lists_both(kfp, spec, config):
    old = _scheduled(kfp, spec, config)
    kfp.fail("DELETE", f"{API}/recurringruns/.*", 500, {"error": "down", "message": "down"})
    with pytest.raises(KubeflowError) as raised:
        publish(spec, config, kfp.url, schedule=True)
    (new,) = set(kfp.recurring_runs) - {old}
    assert f"2 are left ({old}, {new}): delete all but one in the KFP UI" in str(raised.value)
    assert f"{new} (the new one): deleting the new recurring run {new} again failed" in str(
        raised.value)


@pytest.mark.parametrize("other_publishes", ["after this one created", "before this one created"])
def test_two_publishers_at_once_leave_one_schedule(kfp, spec, config, monkeypatch,
                                                  other_publishes):
    """A second publish runs whole while the first is between its steps; both delete all but
    the newest, so one recurring run is left, the newest one's, with its own version."""
    import kfp as kfp_sdk

    old = _scheduled(kfp, spec, config)
    create = kfp_sdk.Client.create_recurring_run
    other_lines = []

    def racing(self, *args, **kwargs):
        if other_lines:  # the other publish's own call
            return create(self, *args, **kwargs)
        other_lines.append(None)
        if other_publishes.startswith("before"):
            other_lines.append(publish(spec, config, kfp.url, schedule=True))
            return create(self, *args, **kwargs)
        made = create(self, *args, **kwargs)
        other_lines.append(publish(spec, config, kfp.url, schedule=True))
        return made

    monkeypatch.setattr(kfp_sdk.Client, "create_recurring_run", racing)
    lines = publish(spec, config, kfp.url, schedule=True)
    (left,) = kfp.recurring_runs.values()
    assert left["recurring_run_id"] != old
    # The one left is the one created last, with the version its publish uploaded (the first
    # publish uploads before the other one runs).
    newest_version = list(kfp.versions)[-2 if other_publishes.startswith("before") else -1]
    if other_publishes.startswith("before"):  # it was alone then; this one replaced its
        assert "replaced 1 earlier one(s)" in other_lines[1][-1]
        assert f"({left['recurring_run_id']}) replaced 1 earlier one(s)" in lines[-1]
    else:  # it deleted this one's and the old one; this one says its version lost
        assert f"({left['recurring_run_id']}) replaced 2 earlier one(s)" in other_lines[1][-1]
        assert f"another publish created {left['recurring_run_id']} after this one's" in lines[-1]
    assert _version_of(left) == newest_version


@pytest.mark.parametrize("change, words", [
    ({"max_concurrency": 0}, "Max concurrency of a recurring run must be at leas 1"),
    ({"cron_expression": "nightly at two"}, "Schedule cron is not a supported format"),
])
def test_the_fake_refuses_a_recurring_run_the_api_server_would(kfp, spec, config, change,
                                                               words):
    """Negative controls (server/api_converter.go toModelJob)."""
    publish(spec, config, kfp.url, schedule=False)
    (run,) = kfp.runs.values()
    reference = run["pipeline_version_reference"]
    arguments = dict(experiment_id=run["experiment_id"], job_name=f"{NAME}-nightly",
                     cron_expression="0 0 2 * * *", max_concurrency=1,
                     pipeline_id=reference["pipeline_id"],
                     version_id=reference["pipeline_version_id"])
    with pytest.raises(kfp_server_api.ApiException) as raised:
        _client(kfp).create_recurring_run(**{**arguments, **change})
    assert raised.value.status == 400 and words in raised.value.body
    assert not kfp.recurring_runs


def test_multi_user_publish_stays_in_the_profile_namespace(spec, tmp_path):
    config = load_config(write_config(tmp_path, {**CLUSTER, "kubeflow.namespace": "team-a"}))
    with FakeKfpApi(multi_user=True) as kfp:
        publish(spec, config, kfp.url, schedule=False)
        publish(spec, config, kfp.url, schedule=True)  # finds the pipeline in team-a
    (pipeline,) = kfp.pipelines.values()
    (experiment,) = kfp.experiments.values()
    (run,) = kfp.runs.values()
    (recurring,) = kfp.recurring_runs.values()
    assert pipeline["namespace"] == experiment["namespace"] == "team-a"
    assert run["namespace"] == recurring["namespace"] == "team-a"
    assert len(kfp.versions) == 2
    assert [r.body["namespace"] for r in kfp.sent("POST", "/experiments")] == ["team-a"]
    assert all(r.query.get("namespace") == "team-a" for r in kfp.sent("GET", "/pipelines"))
    assert [r.query["namespace"] for r in kfp.sent("POST", "/pipelines/upload")] == ["team-a"]


def test_the_fake_keeps_pipeline_names_per_namespace(spec, tmp_path):
    """Negative control: looking up without the namespace (kfp.Client.get_pipeline_id) misses
    the profile's pipeline, and creating it again is refused."""
    with FakeKfpApi(multi_user=True) as kfp:
        client = _client(kfp)
        client.upload_pipeline(str(spec), NAME, namespace="team-a")
        assert client.get_pipeline_id(NAME) is None
        client.upload_pipeline(str(spec), NAME, namespace="team-b")
        with pytest.raises(kfp_server_api.ApiException) as raised:
            client.upload_pipeline(str(spec), NAME, namespace="team-a")
    assert raised.value.status == 409 and f"The name {NAME} already exists" in raised.value.body


def test_the_fake_keeps_experiment_names_per_namespace(kfp):
    experiments = _client(kfp)._experiment_api
    experiments.create_experiment(body={"display_name": "nightly"})
    with pytest.raises(kfp_server_api.ApiException) as raised:
        experiments.create_experiment(body={"display_name": "nightly"})
    assert raised.value.status == 409 and "The name nightly already exists" in raised.value.body


@pytest.mark.parametrize("change, words", [
    (lambda s: s.update(schemaVersion="2.0.0"),
     "KFP only supports schema version 2.1.0, but the pipeline spec has version 2.0.0"),
    (lambda s: s["root"].update(notAField=1), "unknown template format"),
    (lambda s: s.pop("root"), "unknown template format"),
    (lambda s: s["pipelineInfo"].update(name="Penguins_Nightly"),
     "pipeline's name must contain only lowercase alphanumeric characters or '-'"),
])
def test_the_fake_refuses_a_spec_the_api_server_would(kfp, spec, config, tmp_path, change,
                                                      words):
    """Negative controls of the upload parser (template/v2_template.go, common/utils.go): the
    real server answers 500 for a spec it cannot take, and creates nothing."""
    with pytest.raises(KubeflowError) as raised:
        publish(_variant(spec, tmp_path, change), config, kfp.url, schedule=False)
    assert f"creating pipeline '{NAME}' failed: HTTP 500" in str(raised.value)
    assert words in str(raised.value)
    assert not (kfp.pipelines or kfp.versions or kfp.runs)


def test_the_fake_parses_the_kubernetes_platform_spec_beside_the_pipeline_spec(published):
    kfp = published[0]
    ((version_id, platform),) = kfp.platform_specs.items()
    assert version_id in kfp.versions
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert {"secretName": "mlpipeline-minio-artifact"}.items() <= executors[
        "Trainer_executor"]["secretAsEnv"][0].items()


def test_the_fake_refuses_two_platform_specs(kfp, spec, config):
    """Negative control (template/v2_template.go NewV2SpecTemplate)."""
    platform = {"platforms": {"kubernetes": {"deploymentSpec": {"executors": {}}}}}
    two = spec.parent.parent / "two-platforms.yaml"
    documents = list(load_yaml_all(spec.read_text()))
    documents += [platform] * (3 - len(documents))  # the spec, two platform specs
    two.write_text(yaml.safe_dump_all(documents))
    with pytest.raises(KubeflowError, match="HTTP 500: .*multiple platform specs provided"):
        publish(two, config, kfp.url, schedule=False)


@pytest.mark.parametrize("changes, words", [
    ({"kubeflow.pipeline_root": None}, "kubeflow.pipeline_root is not set"),
    ({"kubeflow.pipeline_root": "/mnt/pipeline"},
     "kubeflow.pipeline_root /mnt/pipeline: a local path"),
    ({"kubeflow.input_base": None}, "kubeflow.input_base is not set, so the pods would get "
                                    "data.input_base"),
    ({"kubeflow.serving_dir": "gs://YOUR_BUCKET/serving"}, "still holds a placeholder"),
    ({"kubeflow.serving_dir": "s3:///serving"}, "has no bucket name"),
    ({"kubeflow.schema_file": "configs/schema.pbtxt"}, "configs/schema.pbtxt: a path outside "
                                                       "the image's /opt/pipeline"),
    ({"pipeline_name": "demo_v2"}, "pipeline_name 'demo_v2': KFP accepts only"),
    ({"kubeflow.image": "registry.example.com/ml/x:1"}, "still names the example registry"),
])
def test_a_config_the_steps_could_not_use_is_refused_before_any_request(kfp, spec, tmp_path,
                                                                        changes, words):
    config = load_config(write_config(tmp_path, {**CLUSTER, **changes}))
    with pytest.raises(KubeflowError) as raised:
        publish(spec, config, kfp.url, schedule=True)
    assert "not uploaded" in str(raised.value) and words in str(raised.value)
    assert kfp.requests == []


@pytest.mark.e2e  # runs the real CLI
def test_cli_refuses_a_minio_root_before_compiling_or_sending(kfp, tmp_path):
    """The config refuses what TensorFlow cannot open (core/storage.py), so nothing is
    compiled or sent; preflight refuses the rest (local paths, placeholders)."""
    config = write_config(tmp_path, {**CLUSTER, "kubeflow.output_dir": str(tmp_path / "spec"),
                                     "kubeflow.pipeline_root": "minio://mlpipeline/v2/artifacts"})
    result = run_cli("pipeline.run", "--runner", "kubeflow", "--config", str(config),
                     "--endpoint", kfp.url)
    assert result.returncode == 2  # a config error
    assert "kubeflow.pipeline_root" in result.stderr and "minio://" in result.stderr
    assert "s3://mlpipeline/v2/artifacts" in result.stderr
    assert kfp.requests == [] and not (tmp_path / "spec").exists()


def test_s3_and_an_image_schema_path_are_accepted(kfp, spec, tmp_path):
    config = load_config(write_config(tmp_path, {
        **CLUSTER, "kubeflow.pipeline_root": "s3://acme/tfx/nightly",
        "kubeflow.schema_file": "/opt/pipeline/configs/schema.pbtxt"}))
    publish(spec, config, kfp.url, schedule=False)
    (run,) = kfp.runs.values()
    assert run["runtime_config"]["pipeline_root"] == "s3://acme/tfx/nightly"


def test_rejected_upload_says_why_and_that_nothing_was_created(kfp, spec, config):
    kfp.fail("POST", f"{API}/pipelines/upload", 400,
             {"error_message": "Failed to read a pipeline spec file: bad DAG"})
    with pytest.raises(KubeflowError) as raised:
        publish(spec, config, kfp.url, schedule=False)
    message = str(raised.value)
    assert (f"creating pipeline '{NAME}' failed: HTTP 400: Failed to read a pipeline spec "
            "file: bad DAG") in message
    assert "nothing else was created on the server" in message
    assert not (kfp.pipelines or kfp.runs or kfp.experiments)


def test_failure_after_upload_lists_what_is_left_on_the_server(kfp, spec, config):
    publish(spec, config, kfp.url, schedule=False)
    kfp.fail("POST", f"{API}/runs", 500, {"error": "workflow controller down",
                                          "message": "workflow controller down"})
    with pytest.raises(KubeflowError) as raised:
        publish(spec, config, kfp.url, schedule=False)
    newest = list(kfp.versions.values())[-1]
    assert "starting a run failed: HTTP 500: workflow controller down" in str(raised.value)
    assert (f"already created on the server (nothing was rolled back):\n  - pipeline version "
            f"{newest['display_name']} ({newest['pipeline_version_id']})") in str(raised.value)


def test_a_lost_answer_says_the_server_may_have_done_it(kfp, spec, config):
    kfp.fail("POST", f"{API}/runs", 0)
    with pytest.raises(KubeflowError) as raised:
        publish(spec, config, kfp.url, schedule=False)
    assert "starting a run failed: cannot reach KFP" in str(raised.value)
    assert "may have done it before the connection failed: check the KFP UI" in str(raised.value)
    assert "already created on the server" in str(raised.value)


def test_unreachable_server_is_one_clear_error(spec, config):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(KubeflowError, match=rf"cannot reach KFP at {url}: .*[Cc]onnection refused"):
        publish(spec, config, url, schedule=False)


def test_an_endpoint_that_is_not_kfp_is_named(kfp, spec, config):
    kfp.fail("GET", f"{API}/healthz", 404, {"error": "Not Found"})
    with pytest.raises(KubeflowError, match="HTTP 404.*is this the KFP API"):
        publish(spec, config, kfp.url, schedule=False)


def test_token_comes_from_the_environment(kfp, spec, config, monkeypatch):
    kfp.token = "s3cret"
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(KubeflowError, match=f"HTTP 401.*{TOKEN_ENV}"):
        publish(spec, config, kfp.url, schedule=False)
    monkeypatch.setenv(TOKEN_ENV, "s3cret")
    publish(spec, config, kfp.url, schedule=False)
    assert len(kfp.runs) == 1
    assert all(r.headers.get("authorization") == "Bearer s3cret" for r in kfp.requests[-3:])


def test_the_token_never_goes_over_plain_http_to_another_host(kfp, spec, config, monkeypatch):
    """Issue 25: the bearer token went to any http:// endpoint. Loopback (a port-forward) and
    https take it; another host over http is refused before anything is sent, unless opted in."""
    from pipeline.kubeflow.client.publish import INSECURE_TOKEN_ENV, _token_problem

    monkeypatch.setenv(TOKEN_ENV, "s3cret")
    monkeypatch.delenv(INSECURE_TOKEN_ENV, raising=False)
    before = len(kfp.requests)
    with pytest.raises(KubeflowError, match="plain http to another host"):
        publish(spec, config, "http://ml-pipeline.kubeflow.example.com:8888", schedule=False)
    assert len(kfp.requests) == before
    assert _token_problem("https://kfp.example.com", "t") is None
    assert _token_problem("http://localhost:8888", "t") is None
    assert _token_problem("http://127.0.0.1:8888", "t") is None
    assert _token_problem("http://kfp.example.com", None) is None
    monkeypatch.setenv(INSECURE_TOKEN_ENV, "1")
    assert _token_problem("http://kfp.example.com", "t") is None


def test_multi_user_kfp_needs_a_namespace(spec, config):
    with FakeKfpApi(multi_user=True) as kfp:
        with pytest.raises(KubeflowError, match="multi-user: set kubeflow.namespace"):
            publish(spec, config, kfp.url, schedule=False)


@pytest.mark.parametrize("args, words", [
    (["--schedule"], "--schedule needs an endpoint"),
    (["--endpoint", "ml-pipeline:8888"], "bad endpoint"),
    (["--endpoint", "http://127.0.0.1:9"], "not compiled, not uploaded: the config is not "
                                           "ready for a cluster:\n  kubeflow.pipeline_root "
                                           f"{PLACEHOLDER_ROOT}: still holds a "
                                           "placeholder"),
])
@pytest.mark.e2e  # runs the real CLI
def test_cli_refuses_before_compiling(tmp_path, args, words):
    config = write_config(tmp_path, {"kubeflow.output_dir": str(tmp_path / "spec"),
                                     "kubeflow.pipeline_root": PLACEHOLDER_ROOT})
    result = run_cli("pipeline.run", "--runner", "kubeflow", "--config", str(config), *args)
    assert result.returncode == 1 and words in result.stderr
    assert not (tmp_path / "spec").exists()


def _client(kfp: FakeKfpApi):
    import kfp as kfp_sdk

    with publish_module._quiet():
        return kfp_sdk.Client(host=kfp.url)
