"""The TFJob that runs a multi-worker Trainer on Kubeflow: manifest, launch and wait, hand-off.

No cluster here: tests/kubeflow/fake_training_operator.py answers as the API server and the
Training Operator v1.8.1 would, and checks every TFJob against the CRD's schema and webhook.
"""
from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import REPO, kubernetes_validate, load_yaml_all, run_cli
from tests.kubeflow.fake_training_operator import (FakeTrainingOperator, tf_config,
                                                   validate_tfjob)

TFJOB_SETTINGS = {"workers": 3, "parameter_servers": 2, "cpu": "4", "memory": "8Gi",
                  "gpus_per_worker": 1, "timeout_s": 3600, "max_restarts": 3}


def worker_args():
    from pipeline.kubeflow.training_job import manifest

    return manifest.worker_args({"run_fn": "components.trainer.training.run_fn"},
                             "s3://b/examples/1", "s3://b/transform_graph/2", "s3://b/model/3",
                             "s3://b/model_run/3")


S3_ENV = [{"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {
              "name": "mlpipeline-minio-artifact", "key": "accesskey"}}},
          {"name": "S3_ENDPOINT", "value": "http://minio-service.kubeflow:9000"}]


def _manifest(strategy="multi_worker_mirrored", **kwargs):
    from pipeline.kubeflow.training_job.manifest import tfjob_manifest

    settings = {**TFJOB_SETTINGS, **kwargs.pop("settings", {})}
    return tfjob_manifest("trainer-x", "ml", "reg/img:1", strategy, settings, worker_args(),
                                **kwargs)


def _pod(manifest, replica):
    return manifest["spec"]["tfReplicaSpecs"][replica]["template"]


@pytest.mark.parametrize("strategy, kwargs", [
    ("multi_worker_mirrored", {}),
    ("parameter_server", {}),
    ("multi_worker_mirrored", {"settings": {"gpus_per_worker": 2}}),
    ("multi_worker_mirrored", {"env": S3_ENV}),
    ("parameter_server", {"env": S3_ENV, "service_account": "pipeline-runner",
                          "labels": {"app.kubernetes.io/part-of": "demo"}}),
])
def test_every_rendered_tfjob_passes_the_crd_schema_and_webhook(strategy, kwargs):
    assert validate_tfjob(_manifest(strategy, **kwargs)) == []


def test_a_wrong_field_or_type_fails_the_crd_schema():
    """Negative control: the validation can fail where the API server or webhook would."""
    misspelt = _manifest()
    misspelt["spec"]["tfReplicaSpecs"]["Worker"]["restartpolicy"] = "ExitCode"
    assert any("restartpolicy" in e for e in validate_tfjob(misspelt))
    wrong_type = _manifest()
    wrong_type["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "3"
    assert any("replicas" in e for e in validate_tfjob(wrong_type))
    bad_env = _manifest(env=[{"valueFrom": {"secretKeyRef": {"key": "k"}}, "name": "A"}])
    bad_env["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"][
        1].pop("name")
    assert any("'name' is a required property" in e for e in validate_tfjob(bad_env))
    renamed = _manifest()
    _pod(renamed, "Worker")["spec"]["containers"][0]["name"] = "trainer"
    assert any("container with name tensorflow" in e for e in validate_tfjob(renamed))


def test_multi_worker_mirrored_job_is_n_identical_workers():
    manifest = _manifest(service_account="runner")
    specs = manifest["spec"]["tfReplicaSpecs"]
    assert list(specs) == ["Worker"] and specs["Worker"]["replicas"] == 3
    assert specs["Worker"]["restartPolicy"] == "ExitCode"
    [container] = _pod(manifest, "Worker")["spec"]["containers"]
    assert container["name"] == "tensorflow" and container["image"] == "reg/img:1"
    assert container["command"] == ["python", "-m", "pipeline.kubeflow.training_job.worker"]
    assert container["args"] == worker_args()
    assert container["resources"]["limits"] == {"cpu": "4", "memory": "8Gi",
                                                "nvidia.com/gpu": "1"}
    assert _pod(manifest, "Worker")["spec"]["serviceAccountName"] == "runner"
    assert manifest["spec"]["runPolicy"]["activeDeadlineSeconds"] == 3600
    # deploy/training/README.md: a Failed job (its pods and their logs) is kept for an hour.
    assert manifest["spec"]["runPolicy"]["ttlSecondsAfterFinished"] == 3600


def test_parameter_server_job_has_a_chief_workers_and_ps():
    from pipeline.kubeflow.training_job.manifest import tfjob_manifest

    manifest = _manifest("parameter_server")
    specs = manifest["spec"]["tfReplicaSpecs"]
    assert {k: v["replicas"] for k, v in specs.items()} == {"Chief": 1, "Worker": 3, "PS": 2}
    # Workers and PS tasks serve until the chief finishes; the job succeeds with the chief and
    # the operator removes the pods still running (deploy/training/README.md).
    assert manifest["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    assert "nvidia.com/gpu" not in _pod(manifest, "PS")["spec"]["containers"][0]["resources"][
        "limits"]
    with pytest.raises(ValueError, match="multi-worker strategies"):
        tfjob_manifest("x", "ml", "i:1", "one_device", TFJOB_SETTINGS, worker_args())


def test_one_worker_gets_no_tf_config_so_multi_worker_mirrored_refuses_it(tmp_path):
    """isDistributed (training-operator util.go): one replica in all -> no TF_CONFIG."""
    from core.config import ConfigError, load_config
    from tests.helpers import write_config

    one = _manifest(settings={"workers": 2})
    one["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 1  # what workers: 1 would render
    assert tf_config(one, "Worker", 0) is None  # the operator's side: the worker has no cluster
    from components.trainer.distribution import TrainingSetupError, parse_tf_config

    with pytest.raises(TrainingSetupError, match="it is not set"):  # what the worker would do
        parse_tf_config("multi_worker_mirrored", tf_config(one, "Worker", 0))
    with pytest.raises(ValueError, match="at least 2 workers"):
        _manifest(settings={"workers": 1})
    with pytest.raises(ConfigError, match=r"training: multi_worker_mirrored needs "
                                          r"job.workers >= 2.*no TF_CONFIG"):
        load_config(write_config(tmp_path, {
            "training.distribution_strategy": "multi_worker_mirrored",
            "training.job.workers": 1}))
    # parameter_server with one worker still has a Chief and a PS: distributed, TF_CONFIG set.
    ps = _manifest("parameter_server", settings={"workers": 1, "parameter_servers": 1})
    assert json.loads(tf_config(ps, "Worker", 0))["cluster"].keys() == {"chief", "worker", "ps"}


@pytest.mark.parametrize("strategy", ["multi_worker_mirrored", "parameter_server"])
def test_the_operator_s_tf_config_is_one_our_workers_accept(strategy):
    """The TF_CONFIG each replica gets (genTFConfigJSONStr, as the fake mirrors it) parses in
    components.trainer.distribution, and exactly one replica is the chief that writes the model."""
    from components.trainer.distribution import parse_tf_config

    api = FakeTrainingOperator()
    api.create_namespaced_custom_object("kubeflow.org", "v1", "ml", "tfjobs", _manifest(strategy))
    chiefs = []
    for pod in api.pods.values():
        [config] = [e["value"] for e in pod["spec"]["env"] if e["name"] == "TF_CONFIG"]
        chiefs += [pod["metadata"]["name"]] if parse_tf_config(strategy, config).is_chief else []
    assert chiefs == ["trainer-x-chief-0" if strategy == "parameter_server"
                      else "trainer-x-worker-0"]


def test_replica_pods_opt_out_of_istio_and_carry_the_env():
    manifest = _manifest("parameter_server", env=S3_ENV)
    for replica in ("Chief", "Worker", "PS"):
        template = _pod(manifest, replica)
        assert template["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
        env = template["spec"]["containers"][0]["env"]
        assert env[1:] == S3_ENV and env[0]["name"] == "PYTHONUNBUFFERED"
    with pytest.raises(ValueError, match="TF_CONFIG"):
        _manifest(env=[{"name": "TF_CONFIG", "value": "{}"}])
    with pytest.raises(ValueError, match="needs a 'name'"):
        _manifest(env=[{"value": "x"}])


# --- launch and wait, against the fake operator ----------------------------------------------

def two_workers():
    return _manifest(settings={"workers": 2, "gpus_per_worker": 0})


def _run(api, manifest=None, timeout_s=3600, max_restarts=3, **kwargs):
    """run_tfjob (on two_workers() unless another manifest) on a clock that moves only when it
    sleeps: no real waiting, and a script that runs out ends at the timeout instead of looping."""
    from pipeline.kubeflow.training_job.watch import run_tfjob

    manifest = two_workers() if manifest is None else manifest
    now, record = [0.0], kwargs.pop("sleep", lambda s: None)

    def sleep(seconds):
        record(seconds)
        now[0] += seconds

    kwargs.setdefault("clock", lambda: now[0])
    return run_tfjob(api, api, manifest, timeout_s, max_restarts, sleep=sleep, **kwargs)


def test_waits_for_worker_0_to_succeed():
    api = FakeTrainingOperator([{}, {}, {("worker", 0): 0}])
    assert _run(api).startswith("Succeeded")
    assert [job["metadata"]["name"] for job in api.created] == ["trainer-x"]
    assert api.reads == 3  # one after creating, then one per poll


def test_a_setup_error_fails_the_step_at_once_with_where_to_look():
    from pipeline.kubeflow.training_job.kinds import TFJobError

    api = FakeTrainingOperator([{}, {("worker", 1): 2}, {}, {}])
    with pytest.raises(TFJobError, match=r"Failed: job \"trainer-x\" is failing because "
                                               r"\"Worker\".*kubectl -n ml logs"):
        _run(api)
    assert api.reads == 2 and api.deleted == []  # the failed pod's logs are kept


def test_restarts_within_max_restarts_are_waited_out():
    api = FakeTrainingOperator([{}, {("worker", 1): 137}, {}, {("worker", 1): 137},
                                {("worker", 0): 0}])
    assert _run(api, max_restarts=2).startswith("Succeeded")
    assert api.deleted == []


def test_restarts_beyond_max_restarts_delete_the_job_and_fail():
    """Under ExitCode the operator would recreate the pod until activeDeadlineSeconds
    (kubeflow/trainer#2045); the step stops it after max_restarts. A replica that failed and
    was replaced between two polls is counted too."""
    from pipeline.kubeflow.training_job.kinds import TFJobError

    api = FakeTrainingOperator([{}, {("worker", 1): 137},
                                {("worker", 0): 137, ("worker", 1): 137}, {}])
    with pytest.raises(TFJobError, match=r"failed 3 times, more than "
                                               r"training.job.max_restarts \(2\).*"
                                               r"worker-1 replaced"):
        _run(api, max_restarts=2)
    assert api.deleted == ["trainer-x"]


def test_restarts_are_pods_replaced_or_failed_with_an_exit_the_operator_retries():
    from pipeline.kubeflow.training_job.job_status import Restarts

    def pod(uid, index, phase="Running", code=None):
        status = {"phase": phase}
        if code is not None:
            status["containerStatuses"] = [{"name": "tensorflow", "state": {
                "terminated": {"exitCode": code, "reason": "Error"}}}]
        return {"metadata": {"uid": uid, "labels": {
            "training.kubeflow.org/replica-type": "worker",
            "training.kubeflow.org/replica-index": str(index)}}, "status": status}

    restarts = Restarts()
    assert restarts.update([pod("a", 0), pod("b", 1)]) == 0
    assert restarts.update([pod("a", 0), pod("b", 1, "Failed", 2)]) == 0  # the job fails
    assert restarts.update([pod("a", 0), pod("b", 1, "Failed", 137)]) == 1
    assert restarts.update([pod("a", 0), pod("c", 1)]) == 1  # b's successor: the same restart
    assert restarts.update([pod("a", 0, "Failed"), pod("c", 1)]) == 2  # evicted: no exit code
    assert "worker-1 exit 137" in restarts.describe()


def test_a_job_past_its_timeout_is_deleted():
    from pipeline.kubeflow.training_job.kinds import TFJobError

    api, slept = FakeTrainingOperator([{}] * 20), []
    with pytest.raises(TFJobError, match="did not finish within 60s"):
        _run(api, timeout_s=60, poll_s=15, sleep=slept.append)
    assert api.deleted == ["trainer-x"] and slept == [15] * 4


@pytest.mark.parametrize("earlier", [None, "Succeeded"])
def test_a_retried_step_takes_its_running_or_succeeded_job(earlier):
    api = FakeTrainingOperator([{("worker", 0): 0}])
    api.earlier_attempt(two_workers(), earlier)
    assert _run(api).startswith("Succeeded")
    assert api.created == [] and api.deleted == []


def test_a_retried_step_replaces_its_failed_job_without_overlap():
    """Kept an hour by ttlSecondsAfterFinished, the earlier attempt's Failed job must not fail
    the retry: deleted (foreground, pods first), then created again once it is gone."""
    api = FakeTrainingOperator([{}, {("worker", 0): 0}])
    api.earlier_attempt(two_workers(), "Failed")
    assert _run(api).startswith("Succeeded")
    assert api.deleted == ["trainer-x"] and len(api.created) == 1 and api.overlaps == 0


def test_the_fake_sees_an_overlap_when_old_pods_outlive_their_job():
    """Negative control for the test above: a background delete lets the new job start beside
    the old pods, which the fake reports."""
    api = FakeTrainingOperator()
    api.earlier_attempt(two_workers(), "Failed")
    api.delete_namespaced_custom_object("kubeflow.org", "v1", "ml", "tfjobs", "trainer-x")
    api.create_namespaced_custom_object("kubeflow.org", "v1", "ml", "tfjobs", two_workers())
    assert api.overlaps == 1


def test_transient_api_errors_while_polling_are_retried():
    from kubernetes.client.exceptions import ApiException

    delays = []
    api = FakeTrainingOperator([{}, ApiException(status=503, reason="Service Unavailable"),
                                ApiException(status=429, reason="TooManyRequests"),
                                {("worker", 0): 0}])
    assert _run(api, poll_s=15, sleep=delays.append).startswith("Succeeded")
    assert delays == [15, 2.0, 4.0]  # a poll, then two backoffs


def test_an_api_that_keeps_failing_ends_the_step_with_a_clear_error():
    from kubernetes.client.exceptions import ApiException
    from pipeline.kubeflow.training_job.kinds import TFJobError

    api = FakeTrainingOperator([{}] + [ApiException(status=503, reason="Service Unavailable")]
                               * 10)
    with pytest.raises(TFJobError, match=r"kept failing to read TFJob ml/trainer-x "
                                               r"\(6 attempts.*503 Service Unavailable"):
        _run(api)


@pytest.mark.parametrize("status, hint", [(403, "rbac.yaml"), (404, "Training Operator"),
                                          (422, "Invalid")])
def test_a_refused_create_says_why(status, hint):
    from kubernetes.client.exceptions import ApiException
    from pipeline.kubeflow.training_job.kinds import TFJobError

    api = FakeTrainingOperator(create_error=ApiException(status=status, reason="Invalid"))
    with pytest.raises(TFJobError, match=rf"could not create TFJob ml/trainer-x: "
                                               rf"{status}.*{hint}"):
        _run(api)


def test_a_job_deleted_under_the_step_fails_it_clearly():
    from pipeline.kubeflow.training_job.kinds import TFJobError

    api = FakeTrainingOperator([{}, {}])
    read = api.get_namespaced_custom_object

    def get(**kwargs):
        if api.reads == 1:  # someone deletes the job after the step's first look
            api._remove("trainer-x")
        return read(**kwargs)

    api.get_namespaced_custom_object = get
    with pytest.raises(TFJobError, match="disappeared while the step waited"):
        _run(api)


def test_job_names_are_stable_and_short():
    from pipeline.kubeflow.training_job.manifest import job_name

    name = job_name("gs://b/tfx/demo/Trainer/model/17")
    assert name == job_name("gs://b/tfx/demo/Trainer/model/17")
    assert name != job_name("gs://b/tfx/demo/Trainer/model/18")
    assert len(name) <= 20 and name.startswith("trainer-")


# --- identity ----------------------------------------------------------------------------

def _token(claims: dict) -> str:
    def part(value):
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()
    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


def test_the_step_s_service_account_comes_from_its_token(tmp_path):
    """Claims as kubernetes pkg/serviceaccount/claims.go (bound) and legacy.go write them."""
    from pipeline.kubeflow.training_job.identity import (pod_service_account,
                                                         service_account_from_token)
    from pipeline.kubeflow.training_job.kinds import TFJobError

    bound = {"sub": "system:serviceaccount:kubeflow-user:default-editor",
             "kubernetes.io": {"namespace": "kubeflow-user",
                               "serviceaccount": {"name": "default-editor", "uid": "1"},
                               "pod": {"name": "demo-trainer-abc", "uid": "2"}}}
    assert service_account_from_token(_token(bound)) == "default-editor"
    legacy = {"sub": "system:serviceaccount:kubeflow:pipeline-runner",
              "kubernetes.io/serviceaccount/service-account.name": "pipeline-runner"}
    assert service_account_from_token(_token(legacy)) == "pipeline-runner"
    with pytest.raises(TFJobError, match="names no service account"):
        service_account_from_token(_token({"sub": "system:node:n1"}))
    with pytest.raises(TFJobError, match="not a JWT"):
        service_account_from_token("opaque")
    (tmp_path / "token").write_text(_token(bound))
    assert pod_service_account(str(tmp_path)) == "default-editor"
    with pytest.raises(TFJobError, match="set kubeflow.service_account"):
        pod_service_account(str(tmp_path / "absent"))


# --- the Trainer's executor ----------------------------------------------------------------

def _trainer_artifacts(tmp_path):
    from tfx.types import artifact_utils, standard_artifacts

    def artifact(kind, uri, splits=None):
        instance = kind()
        instance.uri = str(uri)
        if splits:
            instance.split_names = artifact_utils.encode_split_names(splits)
        return [instance]

    inputs = {"examples": artifact(standard_artifacts.Examples, tmp_path / "ex", ["train", "eval"]),
              "transform_graph": artifact(standard_artifacts.TransformGraph, tmp_path / "tg")}
    outputs = {"model": artifact(standard_artifacts.Model, tmp_path / "model"),
               "model_run": artifact(standard_artifacts.ModelRun, tmp_path / "run")}
    return inputs, outputs


def _props(tmp_path, **overrides):
    from pipeline.kubeflow.training_job.properties import trainer_exec_properties
    from core.config import load_config
    from tests.helpers import write_config

    config = load_config(write_config(tmp_path, {
        "training.distribution_strategy": "multi_worker_mirrored", "kubeflow.namespace": "ml",
        "training.operator": "tfjob", **overrides}))
    return config, trainer_exec_properties(config)


class ChiefWrites(FakeTrainingOperator):
    """Worker 0 exports the SavedModel where the Trainer's model artifact is, then succeeds."""

    def __init__(self, model_dir: Path):
        super().__init__([{("worker", 0): 0}])
        self.model_dir = model_dir

    def create_namespaced_custom_object(self, **kwargs):
        super().create_namespaced_custom_object(**kwargs)
        (self.model_dir / "Format-Serving").mkdir(parents=True)
        (self.model_dir / "Format-Serving" / "saved_model.pb").write_bytes(b"\x08\x01")


def test_executor_hands_the_trainer_artifacts_to_the_job_and_checks_the_export(
        tmp_path, monkeypatch):
    """The Trainer step on Kubeflow: inputs' URIs and its exec-properties go to every replica;
    the chief's SavedModel lands in the Trainer's own model artifact."""
    from pipeline.kubeflow.training_job import executor
    from pipeline.kubeflow.training_job.executor import TrainingJobExecutor
    from pipeline.kubeflow.training_job.kinds import TFJobError

    config, props = _props(tmp_path, **{"kubeflow.service_account": "trainer"})
    inputs, outputs = _trainer_artifacts(tmp_path)
    api = ChiefWrites(tmp_path / "model")
    monkeypatch.setattr(executor, "_kubernetes_apis", lambda: (api, api, api))
    TrainingJobExecutor().Do(inputs, outputs, props)
    [manifest] = api.created
    assert manifest["metadata"]["namespace"] == "ml"
    template = _pod(manifest, "Worker")
    assert template["spec"]["serviceAccountName"] == "trainer"
    [container] = template["spec"]["containers"]
    assert container["image"] == config.kubeflow.image
    args = dict(zip(container["args"][::2], container["args"][1::2], strict=True))
    assert args["--examples"] == str(tmp_path / "ex")
    assert args["--transform-graph"] == str(tmp_path / "tg")
    assert args["--model"] == str(tmp_path / "model")
    assert json.loads(args["--exec-properties"]) == json.loads(json.dumps(props))
    custom = json.loads(props["custom_config"])
    assert container["env"][1:] == custom["tfjob_pod"].get("env", [])

    # No export from the chief: the step fails instead of passing on an empty model.
    shutil.rmtree(tmp_path / "model")
    api = FakeTrainingOperator([{("worker", 0): 0}])
    monkeypatch.setattr(executor, "_kubernetes_apis", lambda: (api, api, api))
    with pytest.raises(TFJobError, match="wrote no model.*saved_model.pb is missing"):
        TrainingJobExecutor().Do(inputs, outputs, props)


def test_executor_without_a_service_account_uses_the_step_s_own(tmp_path, monkeypatch):
    from pipeline.kubeflow.training_job import executor, identity
    from pipeline.kubeflow.training_job.executor import TrainingJobExecutor

    _, props = _props(tmp_path)
    inputs, outputs = _trainer_artifacts(tmp_path)
    api = ChiefWrites(tmp_path / "model")
    monkeypatch.setattr(executor, "_kubernetes_apis", lambda: (api, api, api))
    monkeypatch.setattr(identity, "pod_service_account", lambda: "default-editor")
    TrainingJobExecutor().Do(inputs, outputs, props)
    [manifest] = api.created
    for replica in manifest["spec"]["tfReplicaSpecs"]:
        assert _pod(manifest, replica)["spec"]["serviceAccountName"] == "default-editor"
    assert {pod["spec"]["serviceAccountName"] for pod in api.pods.values()} <= {
        "default-editor"}


def test_s3_credentials_reach_every_replica_as_secret_refs(tmp_path, monkeypatch):
    """With the root on s3://, the replicas get the steps' object store env (pipeline.py's
    tfjob_pod): credentials as secretKeyRef, never values, in a body the CRD accepts."""
    from pipeline.kubeflow.training_job import executor
    from pipeline.kubeflow.training_job.executor import TrainingJobExecutor

    _, props = _props(tmp_path, **{"training.distribution_strategy": "parameter_server",
                                   "kubeflow.pipeline_root": "s3://bucket/tfx",
                                   "kubeflow.service_account": "pipeline-runner"})
    inputs, outputs = _trainer_artifacts(tmp_path)
    api = FakeTrainingOperator([{("chief", 0): 0}])
    (tmp_path / "model" / "Format-Serving").mkdir(parents=True)
    (tmp_path / "model" / "Format-Serving" / "saved_model.pb").write_bytes(b"\x08\x01")
    monkeypatch.setattr(executor, "_kubernetes_apis", lambda: (api, api, api))
    TrainingJobExecutor().Do(inputs, outputs, props)
    [manifest] = api.created
    for replica in ("Chief", "Worker", "PS"):
        env = {e["name"]: e for e in _pod(manifest, replica)["spec"]["containers"][0]["env"]}
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "S3_ENDPOINT"} <= set(env)
        for secret in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert set(env[secret]) == {"name", "valueFrom"}
            assert env[secret]["valueFrom"]["secretKeyRef"]["name"]


def test_trainer_custom_config_names_the_job_pods_for_multi_worker_only(tmp_path):
    from pipeline.kubeflow.training_job.properties import trainer_exec_properties
    from core.config import load_config
    from tests.helpers import write_config

    def custom(strategy):
        config = load_config(write_config(tmp_path, {"training.distribution_strategy": strategy,
                                                      "training.operator": "tfjob"}))
        return json.loads(trainer_exec_properties(config)["custom_config"])

    assert "tfjob_pod" not in custom("one_device")
    pod = custom("parameter_server")["tfjob_pod"]
    assert pod["image"] and {"image", "namespace", "service_account"} <= set(pod)
    assert set(pod) <= {"image", "namespace", "service_account", "env"}
    assert isinstance(pod.get("env", []), list)


# --- the by-hand renderer and RBAC ---------------------------------------------------------

@pytest.mark.e2e  # runs pipeline.kubeflow.training_job.render (imports the pipeline)
def test_checked_in_example_matches_the_renderer_and_the_crd():
    example = REPO / "deploy" / "training" / "tfjob.example.yaml"
    header = [line for line in example.read_text().splitlines() if line.startswith("#")]
    command = " ".join(line.lstrip("# ").rstrip("\\ ") for line in header[:3])
    argv = command.split("-m pipeline.kubeflow.training_job.render", 1)[1].split()
    result = run_cli("pipeline.kubeflow.training_job.render", *argv, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    [rendered, rendered_policy] = load_yaml_all(result.stdout)
    [checked_in, checked_in_policy] = load_yaml_all(example.read_text())
    assert validate_tfjob(checked_in) == []
    assert rendered_policy == checked_in_policy and checked_in_policy["kind"] == "NetworkPolicy"

    def without_properties(manifest):
        for spec in manifest["spec"]["tfReplicaSpecs"].values():
            args = spec["template"]["spec"]["containers"][0]["args"]
            value = args[args.index("--exec-properties") + 1]
            assert json.loads(value)["run_fn"] == "components.trainer.training.run_fn"
            args[args.index("--exec-properties") + 1] = "<exec-properties>"
        return manifest

    assert without_properties(rendered) == without_properties(checked_in), \
        "regenerate deploy/training/tfjob.example.yaml with the command in its header"


def test_rbac_manifest_is_valid_kubernetes():
    result = kubernetes_validate([REPO / "deploy" / "training" / "rbac.yaml"])
    assert result.returncode == 0, result.stdout + result.stderr
