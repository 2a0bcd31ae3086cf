"""pipeline.doctor: what a machine can run, against what the config asks for, with the fix."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from core.config import load_config
from pipeline.doctor.asked import config_findings
from pipeline.doctor.cluster import cluster_findings
from pipeline.doctor.findings import FAIL, INFO, OK, WARN
from pipeline.doctor.machine import Machine, machine_findings
from pipeline.doctor.storage import kubeflow_storage_findings
from tests.helpers import run_cli, write_config
from tests.s3_server import s3  # noqa: F401  (fixture)

CPU_ONLY = Machine(tf_version="2.16.2", build={"is_cuda_build": True, "cuda_version": "12.3",
                                               "cudnn_version": "8"},
                   keras="tf_keras 2.16.0 (Keras 2)", gpus=[], tpus=0, nccl=None,
                   xla_error=None, cpus=2, cpu_bf16=False, tf_config=None)


def gpus(*capabilities):
    return dataclasses.replace(CPU_ONLY, nccl="nvidia-nccl-cu12 2.19.3", gpus=[
        {"name": f"GPU {i}", "compute_capability": c} for i, c in enumerate(capabilities)])


def config(tmp_path, **changes):
    return load_config(write_config(tmp_path, {k.replace("__", "."): v
                                               for k, v in changes.items()}))


def failures(findings):
    return [f for f in findings if f.level == FAIL]


def test_the_bundled_config_asks_for_nothing_a_cpu_machine_lacks(tmp_path):
    assert failures(config_findings(config(tmp_path), CPU_ONLY)) == []


@pytest.mark.parametrize("changes, words", [
    ({"training__distribution_strategy": "mirrored",
      "training__collective_implementation": "nccl"}, "'nccl' and no GPU is visible"),
    ({"training__distribution_strategy": "mirrored", "training__devices": ["/gpu:0"]},
     "lists ['/gpu:0'], not visible here"),
    ({"training__jit_compile": True}, "XLA fails here"),
])
def test_what_this_machine_lacks_fails_with_the_fix(tmp_path, changes, words):
    machine = dataclasses.replace(CPU_ONLY, xla_error="InvalidArgumentError: no XLA device")
    [failure] = failures(config_findings(config(tmp_path, **changes), machine))
    assert words in failure.text and failure.fix


def test_the_same_config_passes_where_the_gpus_are(tmp_path):
    asked = config(tmp_path, training__distribution_strategy="mirrored",
                   training__collective_implementation="nccl",
                   training__devices=["/gpu:0", "/gpu:1"])
    assert failures(config_findings(asked, gpus((8, 0), (8, 0)))) == []


def test_multi_worker_needs_a_cluster_locally_but_not_when_compiled_for_kubeflow(tmp_path):
    asked = config(tmp_path, training__distribution_strategy="multi_worker_mirrored",
                   training__job__workers=2)
    [failure] = failures(config_findings(asked, CPU_ONLY, "local"))
    assert "needs the cluster in TF_CONFIG" in failure.text
    assert failures(config_findings(asked, CPU_ONLY, "kubeflow")) == []


@pytest.mark.parametrize("precision, capability, level", [
    ("mixed_float16", (6, 1), WARN), ("mixed_float16", (7, 5), OK),
    ("mixed_bfloat16", (7, 5), WARN), ("mixed_bfloat16", (8, 0), OK)])
def test_mixed_precision_is_fast_only_from_its_compute_capability(tmp_path, precision,
                                                                  capability, level):
    found = {f.text.split(":")[0]: f.level for f in machine_findings(gpus(capability))
             if f.area == "precision"}
    assert found[precision] == level
    asked = config_findings(config(tmp_path, training__precision=precision), gpus(capability))
    assert [f.level for f in asked if "training.precision" in f.text] == (
        [WARN] if level == WARN else [])


def test_keras_3_fails_with_the_fix():
    keras3 = dataclasses.replace(CPU_ONLY, keras="keras 3.3.3")
    [failure] = [f for f in machine_findings(keras3) if f.area == "keras"]
    assert failure.level == FAIL and "TF_USE_LEGACY_KERAS=1" in failure.fix


def test_local_paths_that_cannot_be_used_fail(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    (tmp_path / "empty").mkdir()
    asked = config(tmp_path, runner__output_dir=str(blocker / "outputs"),
                   data__input_base=str(tmp_path / "empty"))
    texts = [f.text for f in failures(config_findings(asked, CPU_ONLY))]
    assert any("0 span folder(s)" in t for t in texts), texts
    assert any(f"{blocker} is a file, not a folder" in t for t in texts), texts


def test_s3_paths_are_checked_against_the_endpoint(tmp_path, s3, monkeypatch):  # noqa: F811
    monkeypatch.delenv("S3_ENDPOINT", raising=False)
    for name, value in s3.env.items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    asked = config(tmp_path, kubeflow__pipeline_root=f"s3://{s3.bucket}/root",
                   kubeflow__serving_dir="s3://no-such-bucket/serving",
                   kubeflow__object_store__endpoint=s3.endpoint)
    found = {f.text.split(" ")[0]: f for f in kubeflow_storage_findings(asked)}
    assert found["kubeflow.pipeline_root"].level == OK
    assert found["kubeflow.serving_dir"].level == WARN
    assert "not reachable from here" in found["kubeflow.serving_dir"].text


def test_this_machine_as_tensorflow_sees_it():
    import tensorflow as tf

    here = Machine.here()
    assert here.tf_version == tf.__version__
    assert here.keras.startswith("tf_keras")
    assert len(here.gpus) == len(tf.config.list_physical_devices("GPU"))


@pytest.mark.e2e
def test_the_command_exits_0_when_ready_and_2_for_a_bad_config(tmp_path):
    """(Exit 1 with the fix: the config_findings tests above, on described machines.)"""
    ready = run_cli("pipeline.doctor", "--config", str(write_config(tmp_path / "ready")))
    assert ready.returncode == 0, ready.stdout + ready.stderr
    assert "ready to run this config here" in ready.stdout
    for section in ("python:", "tensorflow:", "keras:", "gpu:", "nccl:", "xla:", "threads:",
                    "strategy:", "precision:", "storage:"):
        assert section in ready.stdout
    bad = write_config(tmp_path / "bad", {"training.precision": "float8"})
    result = run_cli("pipeline.doctor", "--config", str(bad))
    assert result.returncode == 2 and "training.precision" in result.stderr


def test_the_command_exits_1_with_the_fix_when_the_machine_lacks_what_the_config_asks(
        tmp_path, capsys):
    from pipeline.doctor import main

    nccl = write_config(tmp_path, {"training.distribution_strategy": "mirrored",
                                   "training.collective_implementation": "nccl"})
    code = main(["--config", str(nccl)])
    out = capsys.readouterr().out
    if Machine.here().gpus:  # a machine with GPUs has what this config asks for
        assert code == 0, out
    else:
        assert code == 1, out
        assert "fix: use 'auto' on CPU machines" in out and "1 problem(s)" in out


# --runner kubeflow: what kubectl shows of the cluster. A fake kubectl on PATH answers the
# doctor's reads with the objects of real installs (fixtures/kfp_clusters/SOURCES.md).
CLUSTERS = Path(__file__).parent / "fixtures" / "kfp_clusters"
S3_PATHS = {"kubeflow__pipeline_root": "s3://mlpipeline/tfx/nightly",
            "kubeflow__input_base": "s3://mlpipeline/data/nightly",
            "kubeflow__serving_dir": "s3://mlpipeline/serving"}
TEAM_A = {"kubeflow__multi_user": True, "kubeflow__namespace": "team-a",
          "kubeflow__pipeline_root": "s3://mlpipeline/private-artifacts/team-a/tfx/nightly",
          "kubeflow__input_base": "s3://mlpipeline/private/team-a/data/nightly",
          "kubeflow__serving_dir": "s3://mlpipeline/private/team-a/serving"}


@pytest.fixture
def kubectl(tmp_path, monkeypatch):
    """cluster(name) points the fake kubectl (first on PATH) at a copy of fixtures/NAME."""
    from tests.pipeline import fake_kubectl

    monkeypatch.setenv("PATH", f"{fake_kubectl.install(tmp_path / 'bin')}{os.pathsep}"
                       f"{os.environ['PATH']}")
    monkeypatch.delenv("FAKE_KUBECTL_CLUSTER", raising=False)

    def cluster(name: str) -> Path:
        copy = tmp_path / "cluster"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(CLUSTERS / name, copy)
        monkeypatch.setenv("FAKE_KUBECTL_CLUSTER", str(copy))
        return copy
    return cluster


def patch_launcher(cluster_dir: Path, namespace: str, command: str) -> None:
    """What `kubectl patch configmap kfp-launcher --type merge -p JSON` does to the object."""
    patch = json.loads(command.split(" -p '", 1)[1].split("'", 1)[0])
    path = cluster_dir / f"configmap-kfp-launcher-{namespace}.json"
    launcher = json.loads(path.read_text())
    launcher["data"] = {**launcher.get("data", {}), **patch["data"]}
    path.write_text(json.dumps(launcher))


def providers(cluster_dir: Path, namespace: str, text: str) -> None:
    patch_launcher(cluster_dir, namespace, " -p '" + json.dumps({"data": {"providers": text}})
                   + "'")


def by_level(findings):
    return {level: [f.text for f in findings if f.level == level]
            for level in (OK, INFO, WARN, FAIL)}


def test_without_kubectl_the_cluster_is_one_line_and_fails_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no kubectl there
    assert [(f.level, f.text) for f in cluster_findings(config(tmp_path, **S3_PATHS))] == [
        (INFO, "not checked: kubectl is not on PATH")]


def test_kubectl_reaching_no_cluster_is_one_line_and_fails_nothing(tmp_path, kubectl):
    [finding] = cluster_findings(config(tmp_path, **S3_PATHS))
    assert finding.level == INFO and finding.text == (
        "not checked: kubectl reaches no cluster: The connection to the server localhost:8080 "
        "was refused - did you specify the right host or port?")


def test_a_217_single_user_install_needs_providers_for_an_s3_root(tmp_path, kubectl):
    cluster_dir = kubectl("2.17.0-single-user")
    found = cluster_findings(config(tmp_path, **S3_PATHS))
    levels = by_level(found)
    assert levels[OK][:2] == [
        "KFP 2.17.0, single-user (Deployment ml-pipeline: ghcr.io/kubeflow/kfp-api-server:2.17.0)",
        "kubeflow.object_store.endpoint http://seaweedfs.kubeflow:9000: a Service of this "
        "install"]
    assert "object store: Service seaweedfs (S3: 8333 -> 8333, 9000 -> 8333)" in levels[INFO]
    [failure] = [f for f in found if f.level == FAIL]
    assert failure.text.startswith("kubeflow/kfp-launcher has no providers.s3: the launcher "
                                   "would open s3://mlpipeline/tfx/nightly on AWS's endpoint")
    assert failure.fix.startswith("kubectl -n kubeflow patch configmap kfp-launcher --type "
                                  "merge -p '")
    patch_launcher(cluster_dir, "kubeflow", failure.fix)  # the fix, applied as kubectl would
    levels = by_level(cluster_findings(config(tmp_path, **S3_PATHS)))
    assert levels[FAIL] == [] and levels[WARN] == []
    assert levels[OK][-2:] == [
        "kubeflow/kfp-launcher providers.s3: the launcher reads and writes "
        "s3://mlpipeline/tfx/nightly at seaweedfs.kubeflow:9000 with Secret "
        "mlpipeline-minio-artifact",
        "Secret kubeflow/mlpipeline-minio-artifact, the launcher's (kfp-launcher providers.s3 "
        "secretRef) and the steps' (kubeflow.object_store.secret): present with accesskey, "
        "secretkey"]


def test_the_fix_for_missing_providers_points_at_the_readmes_setup_step(tmp_path, kubectl):
    kubectl("2.17.0-single-user")
    [failure] = failures(cluster_findings(config(tmp_path, **S3_PATHS)))
    assert "has no providers.s3" in failure.text
    assert failure.fix.endswith("(the setup step: deploy/kubeflow/README.md, SeaweedFS / MinIO / "
                                "S3)")


@pytest.mark.parametrize("secret, keys, words", [
    ("team-store", None, "Secret kubeflow/team-store, the launcher's (kfp-launcher providers.s3 "
                         "secretRef), does not exist"),
    ("mlpipeline-minio-artifact", "accesskey", "Secret kubeflow/mlpipeline-minio-artifact, the "
     "launcher's (kfp-launcher providers.s3 secretRef) and the steps' (kubeflow.object_store."
     "secret), has no key secretkey")])
def test_a_secret_the_launcher_or_the_steps_need_must_exist_with_its_keys(
        tmp_path, kubectl, secret, keys, words):
    """The launcher reads its secretRef before it opens the bucket (objectstore/object_store.go
    getS3BucketCredential); the steps' Secret feeds every container's env."""
    cluster_dir = kubectl("2.17.0-single-user")
    providers(cluster_dir, "kubeflow", PROVIDERS.format(secret=secret))
    (cluster_dir / "secret-mlpipeline-minio-artifact-kubeflow.keys").write_text(
        keys or "accesskey secretkey")
    [failure] = failures(cluster_findings(config(tmp_path, **S3_PATHS)))
    assert failure.text == words
    assert failure.fix.startswith(f"create it: kubectl -n kubeflow create secret generic "
                                  f"{secret} ")
    assert "deploy/kubeflow/README.md" in failure.fix


def test_the_secret_check_never_asks_for_the_values(tmp_path, kubectl):
    """The doctor lists a Secret's keys through a go-template: kubectl never prints a value."""
    from pipeline.kubeflow.client import cluster


    kubectl("2.17.0-single-user")
    assert cluster.read_secret_keys("kubeflow", "mlpipeline-minio-artifact") == [
        "accesskey", "secretkey"]
    assert cluster.read_secret_keys("kubeflow", "absent") is None
    assert "{{$key}}" in cluster.SECRET_KEYS_TEMPLATE and ".data" in cluster.SECRET_KEYS_TEMPLATE
    assert "$value}}" not in cluster.SECRET_KEYS_TEMPLATE.replace(":= .data}}", "")


PROVIDERS = ("s3:\n  default:\n    endpoint: seaweedfs.kubeflow:9000\n    disableSSL: true\n"
             "    region: us-east-1\n    credentials: {{fromEnv: false, secretRef: {{secretName: "
             "{secret}, accessKeyKey: accesskey, secretKeyKey: secretkey}}}}\n")


def test_the_minio_endpoint_on_a_217_install_fails_naming_the_store_there(tmp_path, kubectl):
    kubectl("2.17.0-single-user")
    found = by_level(cluster_findings(config(tmp_path, **S3_PATHS,
                                             kubeflow__backend_version="2.4.1")))
    assert ("kubeflow.backend_version is 2.4.1; the cluster runs 2.17.0") in found[WARN]
    assert ("kubeflow.object_store.endpoint http://minio-service.kubeflow:9000: no Service "
            "minio-service in namespace kubeflow (there: seaweedfs)") in found[FAIL]


def test_a_241_minio_install(tmp_path, kubectl):
    cluster_dir = kubectl("2.4.1-single-user")
    asked = config(tmp_path, **S3_PATHS, kubeflow__backend_version="2.4.1")
    found = cluster_findings(asked)
    levels = by_level(found)
    assert levels[OK][0].startswith("KFP 2.4.1, single-user")
    assert "object store: Service minio-service (S3: 9000 -> 9000)" in levels[INFO]
    [failure] = [f for f in found if f.level == FAIL]
    assert "no providers.s3" in failure.text and "endpoint: minio-service.kubeflow:9000" in (
        failure.fix)
    patch_launcher(cluster_dir, "kubeflow", failure.fix)
    assert by_level(cluster_findings(asked))[FAIL] == []


ENV_CREDENTIALS = ("s3:\n  default:\n    endpoint: {endpoint}\n    disableSSL: true\n"
                   "    region: us-east-1\n    credentials: {{fromEnv: true}}\n")


@pytest.mark.parametrize("install, version, endpoint, refused", [
    ("2.4.1-single-user", "2.4.1", "minio-service.kubeflow:9000", True),
    ("2.17.0-single-user", "2.17.0", "seaweedfs.kubeflow:9000", False)])
def test_env_credentials_with_an_endpoint_work_from_217_only(tmp_path, kubectl, install,
                                                             version, endpoint, refused):
    """objectstore/object_store.go createS3BucketSession: fromEnv returned no client (the
    endpoint dropped) up to 2.16.x; 2.17.0 keeps the endpoint (HasStructuredS3Settings)."""
    providers(kubectl(install), "kubeflow", ENV_CREDENTIALS.format(endpoint=endpoint))
    failures_ = by_level(cluster_findings(config(tmp_path, **S3_PATHS,
                                                 kubeflow__backend_version=version)))[FAIL]
    assert bool(failures_) == refused, failures_
    if refused:
        assert "credentials.fromEnv: true makes KFP 2.4.1 to 2.14.x drop the provider's " \
            "endpoint" in failures_[0]


@pytest.mark.parametrize("text, words", [
    ("s3:\n  default:\n    endpoint: seaweedfs.kubeflow:9000\n    region: us-east-1\n"
     "    credentials: {fromEnv: false, secretRef: {secretName: mlpipeline-minio-artifact, "
     "accessKeyKey: accesskey, secretKeyKey: secretkey}}\n",
     "disableSSL is not true: the launcher would use https://seaweedfs.kubeflow:9000"),
    ("s3:\n  default:\n    endpoint: minio-service.kubeflow:9000\n    disableSSL: true\n"
     "    credentials: {fromEnv: false, secretRef: {secretName: mlpipeline-minio-artifact, "
     "accessKeyKey: accesskey, secretKeyKey: secretkey}}\n",
     "its endpoint minio-service.kubeflow:9000 is not the steps' http://seaweedfs.kubeflow:9000"),
    ("s3:\n  default:\n    endpoint: seaweedfs.kubeflow:9000\n    disableSSL: true\n",
     "the driver would stop: invalid provider config: missing default credentials")])
def test_a_launcher_config_that_cannot_reach_the_store_fails(tmp_path, kubectl, text, words):
    providers(kubectl("2.17.0-single-user"), "kubeflow", text)
    [failure] = by_level(cluster_findings(config(tmp_path, **S3_PATHS)))[FAIL]
    assert words in failure


def test_a_217_multi_user_namespace_written_by_the_profile_controller(tmp_path, kubectl):
    cluster_dir = kubectl("2.17.0-multi-user")
    asked = config(tmp_path, **TEAM_A)
    found = cluster_findings(asked)
    levels = by_level(found)
    assert levels[OK][0].startswith("KFP 2.17.0, multi-user")
    assert "team-a/kfp-launcher: written by kubeflow-pipelines-profile-controller" in levels[INFO]
    assert ("team-a/kfp-launcher defaultPipelineRoot minio://mlpipeline/private-artifacts/team-a/"
            "v2/artifacts: not used, every run of this pipeline sends kubeflow.pipeline_root"
            ) in levels[INFO]
    [failure] = [f for f in found if f.level == FAIL]
    assert "team-a/kfp-launcher has no providers.s3" in failure.text
    assert failure.fix.startswith("kubectl -n team-a patch configmap kfp-launcher")
    assert "the profile controller never updates team-a/kfp-launcher" in failure.fix
    patch_launcher(cluster_dir, "team-a", failure.fix)
    patched = json.loads((cluster_dir / "configmap-kfp-launcher-team-a.json").read_text())
    assert patched["data"]["defaultPipelineRoot"].startswith("minio://")  # the merge keeps it
    assert by_level(cluster_findings(asked))[FAIL] == []


def test_a_multi_user_cluster_checks_the_key_prefixes_the_config_did_not(tmp_path, kubectl):
    kubectl("2.17.0-multi-user")
    found = by_level(cluster_findings(config(tmp_path, **{
        **TEAM_A, "kubeflow__multi_user": False,
        "kubeflow__input_base": "s3://mlpipeline/data/nightly"})))
    assert ("the cluster is multi-user (Deployment kubeflow-pipelines-profile-controller); the "
            "config is not") in found[WARN]
    assert ("kubeflow.input_base s3://mlpipeline/data/nightly: the namespace's key may use only "
            "s3://mlpipeline/artifacts/, s3://mlpipeline/private-artifacts/team-a/, "
            "s3://mlpipeline/private/team-a/, s3://mlpipeline/shared/ (outside those prefixes)"
            ) in found[FAIL]


def test_a_profile_user_who_cannot_read_kubeflow_still_gets_the_launcher_check(tmp_path,
                                                                               kubectl):
    cluster_dir = kubectl("2.17.0-multi-user")
    (cluster_dir / "deployments.stderr").write_text(
        'Error from server (Forbidden): deployments.apps is forbidden: User "alice@example.com" '
        'cannot list resource "deployments" in API group "apps" in the namespace "kubeflow"\n')
    found = by_level(cluster_findings(config(tmp_path, **TEAM_A)))
    assert found[WARN][0].startswith("cannot read namespace kubeflow (Error from server "
                                     "(Forbidden): deployments.apps is forbidden")
    assert any("team-a/kfp-launcher has no providers.s3" in t for t in found[FAIL])


def test_make_doctor_passes_the_runner():
    from tests.helpers import REPO

    dry = subprocess.run(["make", "-n", "-C", str(REPO), "doctor", "RUNNER=kubeflow"],
                         capture_output=True, text=True, check=True).stdout
    assert "-m pipeline.doctor --runner kubeflow --config configs/pipeline.yaml" in dry


def test_the_command_adds_the_cluster_for_kubeflow_and_exits_1_on_its_failure(
        tmp_path, kubectl, capsys):
    from pipeline.doctor import main

    path = write_config(tmp_path, {k.replace("__", "."): v for k, v in S3_PATHS.items()})
    assert main(["--runner", "kubeflow", "--config", str(path)]) == 0  # no cluster: not failed
    assert "kubectl reaches no cluster" in capsys.readouterr().out
    kubectl("2.17.0-single-user")
    assert main(["--runner", "kubeflow", "--config", str(path)]) == 1
    out = capsys.readouterr().out
    assert "the cluster kubectl reaches (KFP):" in out and "kubectl -n kubeflow patch" in out


def test_the_readme_shows_the_patch_the_doctor_prints_for_the_defaults(tmp_path):
    from pipeline.kubeflow.client.cluster import providers_patch
    from tests.helpers import REPO

    store = config(tmp_path).kubeflow.object_store
    command = providers_patch("NAMESPACE", store.endpoint, store.secret, store.access_key_key,
                              store.secret_key_key, store.region)
    assert command in (REPO / "deploy" / "kubeflow" / "README.md").read_text()


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs a real kubectl (no cluster)")
def test_kubectl_itself_applies_the_patch_keeping_the_controllers_keys(tmp_path):
    """`kubectl patch --local`: the merge patch the doctor prints, applied by kubectl offline to
    the ConfigMap the profile controller writes, then read back as the driver would."""
    from pipeline.kubeflow.client.cluster import providers_patch, s3_session

    store = config(tmp_path, **TEAM_A).kubeflow.object_store
    command = providers_patch("team-a", store.endpoint, store.secret, store.access_key_key,
                              store.secret_key_key, store.region)
    patch = command.split(" -p '", 1)[1].rsplit("'", 1)[0]
    source = CLUSTERS / "2.17.0-multi-user" / "configmap-kfp-launcher-team-a.json"
    done = subprocess.run(["kubectl", "patch", "--local", "-f", str(source), "--type", "merge",
                           "-p", patch, "-o", "json"], capture_output=True, text=True, check=True)
    data = json.loads(done.stdout)["data"]
    assert data["defaultPipelineRoot"] == json.loads(source.read_text())["data"][
        "defaultPipelineRoot"]
    assert s3_session(data, "s3://mlpipeline/private-artifacts/team-a/tfx") == ({
        "endpoint": "seaweedfs.kubeflow:9000", "region": "us-east-1", "disableSSL": "true",
        "forcePathStyle": "true", "maxRetries": "5", "fromEnv": "false",
        "secretName": "mlpipeline-minio-artifact", "accessKeyKey": "accesskey",
        "secretKeyKey": "secretkey"}, None)


def test_the_launcher_session_follows_s3_go():
    """backend/src/v2/config/s3.go ProvideSessionInfo (2.17.0): the first override whose
    bucketName and keyPrefix match the root wins, its credentials replacing the default's; a
    root with a query string, or no providers.s3, gets fromEnv only."""
    from pipeline.kubeflow.client.cluster import s3_session

    providers = {"providers": (
        "s3:\n  default:\n    endpoint: seaweedfs.kubeflow:9000\n    disableSSL: true\n"
        "    credentials: {fromEnv: false, secretRef: {secretName: a, accessKeyKey: k,"
        " secretKeyKey: s}}\n  overrides:\n  - bucketName: mlpipeline\n    keyPrefix: shared/\n"
        "    endpoint: other.store:9000\n    credentials: {fromEnv: true}\n")}
    default, _ = s3_session(providers, "s3://mlpipeline/private/team-a/tfx")
    override, _ = s3_session(providers, "s3://mlpipeline/shared/tfx")
    assert (default["endpoint"], default["secretName"]) == ("seaweedfs.kubeflow:9000", "a")
    assert override["endpoint"] == "other.store:9000" and override["fromEnv"] == "true"
    assert "secretName" not in override
    assert s3_session(providers, "s3://mlpipeline/tfx?region=x") == ({"fromEnv": "true"}, None)
    assert s3_session({"defaultPipelineRoot": "minio://x"}, "s3://b/r") == (
        {"fromEnv": "true"}, None)


@pytest.mark.parametrize("tag, level, words", [
    ("2.3.0", FAIL, "KFP 2.3.0 (image ghcr.io/kubeflow/kfp-api-server:2.3.0) is not a release "
     "this template supports: 2.4.1 to 2.17.x"),
    ("master", WARN, "cannot tell the KFP release from the API server's image "
     "ghcr.io/kubeflow/kfp-api-server:master")])
def test_an_api_server_outside_the_supported_releases(tmp_path, kubectl, tag, level, words):
    cluster_dir = kubectl("2.17.0-single-user")
    path = cluster_dir / "deployments.json"
    path.write_text(path.read_text().replace("kfp-api-server:2.17.0", f"kfp-api-server:{tag}"))
    assert words in by_level(cluster_findings(config(tmp_path, **S3_PATHS)))[level]
