"""s3:// on Kubeflow: the config's object_store section and the PlatformSpec the compiler writes.

The PlatformSpec is checked as KFP 2.3.0 reads it: the API server protojson-parses the second YAML
document as a PlatformSpec (backend/src/apiserver/template/v2_template.go), and each executor's
driver jsonpb-parses its entry as a KubernetesExecutorConfig, refusing unknown fields
(backend/src/v2/cmd/driver/main.go; fields from kubernetes_platform/proto/
kubernetes_executor_config.proto, mirrored in KNOWN_FIELDS below).
"""
from __future__ import annotations

import pytest
import yaml

from core.config import ConfigError, ObjectStoreConfig, load_config
from pipeline.kubeflow.client import kubernetes_platform as platform

from tests.helpers import load_yaml_all, write_config

S3 = {"kubeflow.image": "ghcr.io/acme/tfx-pipeline-template:1.2.3",
      "kubeflow.pipeline_root": "s3://acme-ml/tfx/nightly",
      "kubeflow.input_base": "s3://acme-ml/data/spans",
      "kubeflow.serving_dir": "s3://acme-ml/serving"}
# kubernetes_executor_config.proto (KFP 2.3.0): the fields we write, and what each may hold.
KNOWN_FIELDS = {
    "secretAsEnv": {"secretName", "keyToEnv"}, "secretAsEnv.keyToEnv": {"secretKey", "envVar"},
    "configMapAsEnv": {"configMapName", "keyToEnv"},
    "configMapAsEnv.keyToEnv": {"configMapKey", "envVar"},
}
TOP_LEVEL_FIELDS = {"secretAsVolume", "secretAsEnv", "pvcMount", "nodeSelector", "podMetadata",
                    "imagePullSecret", "imagePullPolicy", "configMapAsVolume", "configMapAsEnv",
                    "activeDeadlineSeconds", "fieldPathAsEnv", "tolerations",
                    "genericEphemeralVolume", "nodeAffinity", "podAffinity", "enabledSharedMemory",
                    "emptyDirMounts"}


def driver_problems(executor_config: dict) -> list:
    """What the driver's jsonpb parse would refuse in one executor's entry."""
    problems = [f"unknown field {k}" for k in executor_config if k not in TOP_LEVEL_FIELDS]
    for field in ("secretAsEnv", "configMapAsEnv"):
        for entry in executor_config.get(field, []):
            problems += [f"{field}: unknown field {k}" for k in entry
                         if k not in KNOWN_FIELDS[field]]
            for mapping in entry.get("keyToEnv", []):
                problems += [f"{field}.keyToEnv: unknown field {k}" for k in mapping
                             if k not in KNOWN_FIELDS[f"{field}.keyToEnv"]]
    return problems


def compile_documents(folder, changes) -> list:
    from pipeline.kubeflow.client.compiler import compile_spec

    config = load_config(write_config(folder, {**changes,
                                               "kubeflow.output_dir": str(folder / "spec")}))
    return [d for d in load_yaml_all(compile_spec(config).read_text()) if d is not None]


@pytest.fixture(scope="module")
def s3_spec(tmp_path_factory):
    return compile_documents(tmp_path_factory.mktemp("s3_spec"), S3)


# The S3 Service each release's platform-agnostic manifests install in namespace kubeflow
# (manifests/kustomize/ at the tag): third-party/minio/base/minio-service.yaml (port 9000) to
# 2.14.x; at 2.15.0 SeaweedFS behind third-party/seaweedfs/base/seaweedfs/minio-service.yaml
# (9000 -> 8333); from 2.16.0 no minio-service, seaweedfs-service.yaml port 9000 -> 8333.
STORE_OF_RELEASE = [("2.4.1", "http://minio-service.kubeflow:9000"),
                    ("2.5.0", "http://minio-service.kubeflow:9000"),
                    ("2.14.4", "http://minio-service.kubeflow:9000"),
                    ("2.15.0", "http://minio-service.kubeflow:9000"),
                    ("2.16.1", "http://seaweedfs.kubeflow:9000"),
                    ("2.17.0", "http://seaweedfs.kubeflow:9000")]


def test_object_store_defaults_to_the_store_kfp_installs():
    store = ObjectStoreConfig()
    assert (store.secret, store.access_key_key, store.secret_key_key) == (
        "mlpipeline-minio-artifact", "accesskey", "secretkey")
    assert store.endpoint == "http://seaweedfs.kubeflow:9000"  # the default backend, 2.17.0
    assert load_config().kubeflow.object_store.endpoint == store.endpoint


@pytest.mark.parametrize("version, endpoint", STORE_OF_RELEASE)
def test_the_default_endpoint_follows_the_backend_version(tmp_path, version, endpoint):
    kubeflow = load_config(write_config(tmp_path, {
        "kubeflow.backend_version": version})).kubeflow
    assert kubeflow.object_store.endpoint == endpoint
    assert kubeflow.object_store.secret == "mlpipeline-minio-artifact"


@pytest.mark.parametrize("store, endpoint", [
    ({"endpoint": "http://my-minio.storage:9000"}, "http://my-minio.storage:9000"),
    ({"endpoint": None}, None),  # AWS S3
    ({"endpoint_config_map": {"name": "s3", "key": "url"}}, None)])
def test_an_endpoint_given_is_kept_whatever_the_backend(tmp_path, store, endpoint):
    kubeflow = load_config(write_config(tmp_path, {"kubeflow.backend_version": "2.4.1"}),
                           overrides={f"kubeflow.object_store.{k}": v for k, v in store.items()}
                           ).kubeflow
    assert kubeflow.object_store.endpoint == endpoint


@pytest.mark.parametrize("changes, words", [
    ({"kubeflow.pipeline_root": "minio://mlpipeline/v2/artifacts"},
     ["kubeflow.pipeline_root", "TensorFlow cannot open minio://", "s3://mlpipeline/v2/artifacts"]),
    ({"kubeflow.serving_dir": "hdfs://nn/serving"}, ["kubeflow.serving_dir", "hdfs://"]),
    ({"kubeflow.object_store.endpoint": "minio-service:9000"},
     ["kubeflow.object_store.endpoint", "http(s)://host[:port]"]),
    ({"kubeflow.object_store.endpoint_config_map": {"name": "s3", "key": "url"},
      "kubeflow.object_store.endpoint": "http://minio:9000"},
     ["kubeflow.object_store", "not both"]),
    ({"kubeflow.object_store.secret": "Has_Capitals"}, ["kubeflow.object_store.secret"]),
    ({"kubeflow.object_store.access_key": "x"}, ["kubeflow.object_store.access_key",
                                                 "unknown key"]),
])
def test_object_store_mistakes_name_the_key(tmp_path, changes, words):
    with pytest.raises(ConfigError) as error:
        load_config(write_config(tmp_path, changes))
    for word in words:
        assert word in str(error.value)


def test_s3_paths_give_every_executor_the_secret(s3_spec):
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    spec, platform_doc = s3_spec
    # The API server's parse of the second document (v2_template.go).
    json_format.ParseDict(platform_doc, pipeline_spec_pb2.PlatformSpec())
    executors = platform_doc["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert set(executors) == set(spec["deploymentSpec"]["executors"])
    for label, config in executors.items():
        assert driver_problems(config) == [], label
        assert config["secretAsEnv"] == [{"secretName": "mlpipeline-minio-artifact", "keyToEnv": [
            {"secretKey": "accesskey", "envVar": "AWS_ACCESS_KEY_ID"},
            {"secretKey": "secretkey", "envVar": "AWS_SECRET_ACCESS_KEY"}]}]


def test_endpoint_and_region_are_plain_container_env(s3_spec):
    spec, _ = s3_spec
    for label, executor in spec["deploymentSpec"]["executors"].items():
        env = {e["name"]: e["value"] for e in executor["container"].get("env", [])}
        assert env == {"S3_ENDPOINT": "http://seaweedfs.kubeflow:9000",
                       "AWS_REGION": "us-east-1"}, label


def test_no_credential_ever_reaches_the_spec(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIA-MUST-NOT-LEAK")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-must-not-leak")
    text = yaml.safe_dump_all(compile_documents(tmp_path, {
        **S3, "kubeflow.object_store.endpoint": None,  # removed from the YAML
        "kubeflow.object_store.endpoint_config_map": {"name": "s3-endpoint", "key": "url"}}))
    assert "MUST-NOT-LEAK" not in text and "must-not-leak" not in text
    spec, platform_doc = load_yaml_all(text)
    for label, config in platform_doc["platforms"]["kubernetes"]["deploymentSpec"][
            "executors"].items():
        assert driver_problems(config) == [], label
        assert config["configMapAsEnv"] == [{"configMapName": "s3-endpoint", "keyToEnv": [
            {"configMapKey": "url", "envVar": "S3_ENDPOINT"}]}]
        env = spec["deploymentSpec"]["executors"][label]["container"]["env"]
        assert env == [{"name": "AWS_REGION", "value": "us-east-1"}]


def test_driver_check_refuses_a_misspelt_field():
    """Negative control for driver_problems: the driver's jsonpb parse fails on these."""
    config = platform.executor_config(ObjectStoreConfig())
    config["secretAsEnv"][0]["keyToEnv"][0]["secret_key"] = "accesskey"  # proto name, not JSON
    config["secretsAsEnv"] = []
    assert driver_problems(config) == ["unknown field secretsAsEnv",
                                       "secretAsEnv.keyToEnv: unknown field secret_key"]


def test_gs_paths_get_no_platform_spec():
    assert not platform.uses_object_store(["gs://b/root", "/opt/pipeline/configs/schema.pbtxt",
                                           None])
    assert platform.uses_object_store(["gs://b/root", "s3://b/serving"])


def test_tfjob_replicas_get_the_same_env_as_secret_refs():
    env = platform.pod_env(ObjectStoreConfig())
    assert env == [
        {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {
            "name": "mlpipeline-minio-artifact", "key": "accesskey"}}},
        {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {
            "name": "mlpipeline-minio-artifact", "key": "secretkey"}}},
        {"name": "S3_ENDPOINT", "value": "http://seaweedfs.kubeflow:9000"},
        {"name": "AWS_REGION", "value": "us-east-1"}]


def test_tfjob_pod_carries_the_env_only_for_s3(tmp_path):
    from pipeline.kubeflow.training_job.manifest import tfjob_manifest
    from pipeline.kubeflow.training_job.pods import trainer_pod as tfjob_pod

    multi_worker = {"training.distribution_strategy": "multi_worker_mirrored"}
    assert tfjob_pod(load_config(write_config(tmp_path / "one"))) is None
    gs = load_config(write_config(tmp_path / "gs", multi_worker))
    assert "env" not in tfjob_pod(gs)
    pod = tfjob_pod(load_config(write_config(tmp_path / "s3", {**S3, **multi_worker})))
    assert pod["env"] == platform.pod_env(ObjectStoreConfig())
    manifest = tfjob_manifest("job", "ns", pod["image"], "multi_worker_mirrored",
                              gs.training.job.model_dump(), ["--x"],
                              env=pod["env"])
    [container] = manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert all(e in container["env"] for e in pod["env"])


def test_the_image_installs_tensorflow_io_for_its_tensorflow():
    """tensorflow-io pairs with one TensorFlow minor (0.37.x: TF 2.16); the image installs the
    runtime lock, so both come from there."""
    from tests.helpers import REPO

    lock = {line.split("==")[0]: line.split("==")[1].split()[0]
            for line in (REPO / "requirements-image.lock").read_text().splitlines()
            if "==" in line and not line.startswith(("#", " "))}
    assert lock["tensorflow"].startswith("2.16.") and lock["tensorflow-io"].startswith("0.37.")
    assert "boto3" in lock  # Beam's S3 file system (apache-beam[aws])
    dockerfile = (REPO / "deploy" / "kubeflow" / "Dockerfile").read_text()
    assert "-r /tmp/requirements-image.lock" in dockerfile


@pytest.mark.parametrize("key, where", [("data.input_base", "kubeflow.input_base"),
                                        ("serving.serving_dir", "kubeflow.serving_dir"),
                                        ("runner.output_dir", "kubeflow.pipeline_root")])
def test_local_run_paths_refuse_a_bucket_and_name_where_it_goes(tmp_path, key, where):
    with pytest.raises(ConfigError) as error:
        load_config(write_config(tmp_path, {key: "s3://acme-ml/somewhere"}))
    assert f"{key}: s3://acme-ml/somewhere is a URI" in str(error.value)
    assert where in str(error.value)
