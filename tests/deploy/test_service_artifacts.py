"""Static checks of the recommender service's deployment (deploy/service: the image, the
Kubernetes manifests) and of its monitoring (deploy/serving/prometheus/service-alerts.yml, the
Grafana dashboard deploy/serving/grafana/dashboards/recommender-service.json).

As in test_serving_artifacts.py, every check also runs on a deliberately broken copy that it must
reject, so that a check which passes everything cannot go unnoticed. Tools: kubernetes-validate
(in this process, tests/helpers.py), hadolint and promtool (test_serving_artifacts.tool).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from tests.deploy.test_serving_artifacts import (
    GRAFANA,
    K8S,
    PROMETHEUS,
    check_promql,
    dashboard_exprs,
    hadolint,
    load_yaml_docs,
    not_firing_and_quiet,
    output,
    promtool_expecting_quiet,
    rename_tool,
    run,
    tool,
)
from tests.helpers import dump_yaml, kubernetes_validate, load_yaml, load_yaml_all

REPO = Path(__file__).resolve().parents[2]
SERVICE = REPO / "deploy" / "service"
SERVICE_K8S = SERVICE / "k8s"
DOCKERFILE = SERVICE / "Dockerfile"
README = SERVICE / "README.md"
LOCK = REPO / "requirements-service.lock"
ALERTS = PROMETHEUS / "service-alerts.yml"
ALERTS_TEST = PROMETHEUS / "service-alerts_test.yml"
DASHBOARD = GRAFANA / "dashboards" / "recommender-service.json"
# Where the Dockerfile puts the repository's files (its WORKDIR; checked below).
IMAGE_ROOT = "/opt/service"
CONFIG_KEY = "recommender_service.yaml"
# Never in the image: the dev tools (.dockerignore, tests/test_wheel.py).
DEV_TOOLS = ("devtools", "tests", "bench", "scripts")
# What the kustomization may use: the tests apply `namespace` and `images` themselves (below).
KUSTOMIZATION_KEYS = {"apiVersion", "kind", "namespace", "resources", "images"}

# The service's metrics, as service/endpoint, service/updater and service/request_sink export
# them (name: labels), and the others the dashboard and the alerts read. A histogram's series are
# its _bucket (with le), _count, _sum.
HISTOGRAMS = {
    "recommend_request_duration_seconds": set(),
    "recommend_tf_serving_duration_seconds": set(),
}
COUNTERS_AND_GAUGES = {
    "recommend_requests_total": {"status"},
    "recommend_history_reads_total": {"result"},
    "recommend_fallbacks_total": {"reason"},
    "recommend_tf_serving_errors_total": {"kind"},
    "recommend_tf_serving_circuit_state": set(),
    "recommend_request_log_records_total": {"outcome"},
    "history_updater_events_applied_total": set(),
    "history_updater_events_changed_total": set(),
    "history_updater_events_dead_lettered_total": {"kind"},
    "history_updater_consumer_lag": {"partition"},
    "history_updater_redis_errors_total": set(),
    "request_sink_records_written_total": set(),
    "request_sink_records_bad_total": {"reason"},
    "request_sink_files_written_total": set(),
    "request_sink_write_errors_total": set(),
    "request_sink_records_buffered": set(),
    "request_sink_consumer_lag": {"partition"},
    "up": set(),
    # NVIDIA dcgm-exporter's frame buffer gauges, MiB (its etc/default-counters.csv), and the
    # labels of its series (README.md's sample scrape: gpu, UUID, and container, namespace, pod
    # with the Kubernetes mapping; recent releases add device, modelName, Hostname).
    "DCGM_FI_DEV_FB_USED": {"gpu", "UUID", "device", "modelName", "Hostname", "container",
                            "namespace", "pod"},
    "DCGM_FI_DEV_FB_FREE": {"gpu", "UUID", "device", "modelName", "Hostname", "container",
                            "namespace", "pod"},
    # kafka_exporter v1.9.0's consumer-group gauges (kafka_exporter.go: consumergroup, topic,
    # partition), what Strimzi's Kafka Exporter serves; kube-state-metrics v2.20.0's restart
    # counter (docs/metrics/workload/pod-metrics.md). The updater seen from outside (issue 42).
    "kafka_consumergroup_lag": {"consumergroup", "topic", "partition"},
    "kafka_consumergroup_current_offset": {"consumergroup", "topic", "partition"},
    "kube_pod_container_status_restarts_total": {"namespace", "pod", "container", "uid"},
    # The nightly skew check's figures, from the run report's node_exporter text file
    # (components/run_report/skew_textfile.py; tests/deploy/test_pipeline_alerts.py holds the
    # names to it): the dashboard's skew panel.
    "tfx_serving_skew_ratio": {"pipeline", "feature", "measure"},
    "tfx_serving_skew_missing_features": {"pipeline"},
}
# What the scrape jobs add (prometheus-kubernetes.yml).
TARGET_LABELS = {"job", "instance", "namespace", "pod", "node"}


def known_metrics() -> dict[str, set]:
    known = dict(COUNTERS_AND_GAUGES)
    for name, labels in HISTOGRAMS.items():
        known[f"{name}_bucket"] = labels | {"le"}
        known[f"{name}_count"] = labels
        known[f"{name}_sum"] = labels
    return known


# --------------------------------------------------------------------------------------------
# helpers: the manifests as `kubectl apply -k deploy/service/k8s` applies them


def kustomization(root: Path = SERVICE_K8S) -> dict:
    return load_yaml((root / "kustomization.yaml").read_text())


def manifest_files(root: Path = SERVICE_K8S) -> list[Path]:
    return [root / entry for entry in kustomization(root)["resources"]]


def rendered(root: Path = SERVICE_K8S) -> list[dict]:
    """The objects kustomize makes of the files: only `namespace` and `images` are used (asserted
    by test_kustomization_lists_every_manifest_and_uses_only_namespace_and_images), so set
    those two here (and test_rendering_is_what_kustomize_makes compares with kubectl's)."""
    spec = kustomization(root)
    images = {i["name"]: f"{i['newName']}:{i['newTag']}" for i in spec.get("images", [])}
    objects = []
    for path in manifest_files(root):
        for doc in load_yaml_docs(path):
            doc = copy.deepcopy(doc)
            if "namespace" in spec:
                doc["metadata"]["namespace"] = spec["namespace"]
            if doc["kind"] == "Deployment":
                for c in pod_spec(doc)["containers"]:
                    c["image"] = images.get(c["image"], c["image"])
            objects.append(doc)
    return objects


def as_written() -> list[dict]:
    return [doc for path in manifest_files() for doc in load_yaml_docs(path)]


def pod_spec(deployment: dict) -> dict:
    return deployment["spec"]["template"]["spec"]


def find(objects: list[dict], kind: str, name: str) -> dict:
    for doc in objects:
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no {kind} {name}")


def container(objects: list[dict], deployment: str) -> dict:
    (only,) = pod_spec(find(objects, "Deployment", deployment))["containers"]
    return only


def cluster_config_text(objects: list[dict]) -> str:
    return find(objects, "ConfigMap", "recommender-service-config")["data"][CONFIG_KEY]


def load_cluster_config(text: str, tmp_path: Path):
    """The ConfigMap's service config through service/config.py (unknown keys refused)."""
    from service.config import load_service_config

    path = tmp_path / CONFIG_KEY
    path.write_text(text)
    return load_service_config(path)


def in_repo(image_path: Path | str) -> Path:
    """A path of the image (under its WORKDIR) as the repository file the Dockerfile copies."""
    relative = Path(image_path).relative_to(IMAGE_ROOT)
    return REPO / relative


# --------------------------------------------------------------------------------------------
# Kubernetes manifests: valid, hardened


def test_kustomization_lists_every_manifest_and_uses_only_namespace_and_images():
    spec = kustomization()
    assert set(spec) <= KUSTOMIZATION_KEYS, (
        "deploy/service/k8s/kustomization.yaml uses more than these tests render: "
        f"{sorted(set(spec) - KUSTOMIZATION_KEYS)}")
    present = set(SERVICE_K8S.glob("*.yaml")) - {SERVICE_K8S / "kustomization.yaml"}
    assert set(manifest_files()) == present
    # The image the manifests name is the one the kustomization retags.
    names = {c["image"] for d in as_written() if d["kind"] == "Deployment"
             for c in pod_spec(d)["containers"]}
    assert names == {i["name"] for i in spec["images"]}


def test_manifests_validate_strictly(tmp_path):
    files = manifest_files()
    proc = kubernetes_validate(files)
    assert proc.returncode == 0, output(proc)
    assert output(proc).count("passed") == len(as_written())
    # And as kustomize renders them (namespace and image set).
    out = tmp_path / "rendered.yaml"
    out.write_text(yaml.safe_dump_all(rendered()))
    proc = kubernetes_validate([out])
    assert proc.returncode == 0, output(proc)
    assert output(proc).count("passed") == len(as_written())


def test_rendering_is_what_kustomize_makes():
    """rendered() against `kubectl kustomize` (kubectl is not one of the test tools: skipped
    without it; the rendering's own inputs are pinned by the kustomization-keys test)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed: rendered() not compared with kubectl kustomize")
    proc = run([kubectl, "kustomize", str(SERVICE_K8S)])
    assert proc.returncode == 0, output(proc)

    def by_name(objects):
        return {(d["kind"], d["metadata"]["name"]): d for d in objects if d}

    assert by_name(load_yaml_all(proc.stdout)) == by_name(rendered())


def test_validation_rejects_an_unknown_field(tmp_path):
    deployment = find(as_written(), "Deployment", "history-updater")
    pod_spec(deployment)["containers"][0]["securityContext"]["readOnlyRootFilesytem"] = True
    broken = tmp_path / "updater-deployment.yaml"
    broken.write_text(dump_yaml(deployment))
    proc = kubernetes_validate([broken])
    assert proc.returncode != 0, output(proc)
    assert "readOnlyRootFilesytem" in output(proc)


def security_problems(objects: list[dict]) -> list[str]:
    """What a Deployment's pod or container lacks of the hardening every service pod has."""
    found = []
    for deployment in (d for d in objects if d["kind"] == "Deployment"):
        name = deployment["metadata"]["name"]
        pod = pod_spec(deployment)
        if pod.get("automountServiceAccountToken") is not False:
            found.append(f"{name}: mounts a service account token")
        pod_security = pod.get("securityContext", {})
        if pod_security.get("runAsNonRoot") is not True:
            found.append(f"{name}: pod not runAsNonRoot")
        if pod_security.get("seccompProfile", {}).get("type") != "RuntimeDefault":
            found.append(f"{name}: pod seccompProfile not RuntimeDefault")
        if pod.get("hostNetwork") or pod.get("hostPID") or pod.get("hostIPC"):
            found.append(f"{name}: shares a host namespace")
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for c in pod.get("initContainers", []) + pod["containers"]:
            where = f"{name}/{c['name']}"
            security = c.get("securityContext", {})
            if security.get("runAsNonRoot") is not True:
                found.append(f"{where}: not runAsNonRoot")
            if not isinstance(security.get("runAsUser"), int) or security["runAsUser"] <= 0:
                found.append(f"{where}: no non-root runAsUser")
            if security.get("readOnlyRootFilesystem") is not True:
                found.append(f"{where}: root filesystem writable")
            if security.get("allowPrivilegeEscalation") is not False:
                found.append(f"{where}: privilege escalation allowed")
            if security.get("privileged"):
                found.append(f"{where}: privileged")
            capabilities = security.get("capabilities", {})
            if capabilities.get("drop") != ["ALL"] or capabilities.get("add"):
                found.append(f"{where}: capabilities not dropped (drop: [ALL], no add)")
            for kind in ("requests", "limits"):
                if not {"cpu", "memory"} <= set(c.get("resources", {}).get(kind, {})):
                    found.append(f"{where}: no cpu and memory {kind}")
            for probe in ("livenessProbe", "readinessProbe"):
                if probe not in c:
                    found.append(f"{where}: no {probe}")
            for mount in c.get("volumeMounts", []):
                volume = volumes[mount["name"]]
                if "persistentVolumeClaim" in volume and not (
                        mount.get("readOnly") and volume["persistentVolumeClaim"].get("readOnly")):
                    found.append(f"{where}: volume {mount['name']} mounted writable")
                if mount["mountPath"] == "/tmp" and "emptyDir" not in volume:
                    found.append(f"{where}: /tmp is not an emptyDir")
    return found


def test_every_container_runs_hardened():
    objects = as_written()
    assert {d["metadata"]["name"] for d in objects if d["kind"] == "Deployment"} == {
        "recommend-endpoint", "history-updater", "request-sink"}
    assert security_problems(objects) == []


def _drop(key):
    return lambda c: c["securityContext"].pop(key)


@pytest.mark.parametrize(
    "edit, problem",
    [
        (_drop("readOnlyRootFilesystem"), "root filesystem writable"),
        (_drop("allowPrivilegeEscalation"), "privilege escalation allowed"),
        (_drop("capabilities"), "capabilities not dropped"),
        (lambda c: c["securityContext"]["capabilities"].update(add=["NET_ADMIN"]),
         "capabilities not dropped"),
        (_drop("runAsNonRoot"), "not runAsNonRoot"),
        (lambda c: c["securityContext"].update(runAsUser=0), "no non-root runAsUser"),
        (lambda c: c["resources"].pop("limits"), "no cpu and memory limits"),
        (lambda c: c.pop("readinessProbe"), "no readinessProbe"),
        (lambda c: c.pop("livenessProbe"), "no livenessProbe"),
    ],
    ids=["readOnlyRootFilesystem", "allowPrivilegeEscalation", "drop", "add", "runAsNonRoot",
         "root", "limits", "readiness", "liveness"],
)
@pytest.mark.parametrize("deployment", ["recommend-endpoint", "history-updater", "request-sink"])
def test_hardening_check_rejects_a_container_missing_a_setting(deployment, edit, problem):
    objects = as_written()
    edit(container(objects, deployment))
    found = security_problems(objects)
    assert any(f.startswith(f"{deployment}/") and problem in f for f in found), found


@pytest.mark.parametrize(
    "edit, problem",
    [
        (lambda p: p.pop("automountServiceAccountToken"), "service account token"),
        (lambda p: p["securityContext"].pop("seccompProfile"), "seccompProfile"),
        (lambda p: p.update(hostNetwork=True), "host namespace"),
    ],
    ids=["token", "seccomp", "hostNetwork"],
)
def test_hardening_check_rejects_a_pod_missing_a_setting(edit, problem):
    objects = as_written()
    edit(pod_spec(find(objects, "Deployment", "history-updater")))
    found = security_problems(objects)
    assert any(f.startswith("history-updater:") and problem in f for f in found), found


def test_hardening_check_rejects_a_writable_model_volume():
    objects = as_written()
    for mount in container(objects, "recommend-endpoint")["volumeMounts"]:
        mount.pop("readOnly", None)
    assert "recommend-endpoint/endpoint: volume models mounted writable" in \
        security_problems(objects)


# --------------------------------------------------------------------------------------------
# The cluster's service config, and the ports every object derives from it


def test_cluster_config_is_a_valid_service_config_with_the_repos_settings(tmp_path):
    objects = as_written()
    text = cluster_config_text(objects)
    config = load_cluster_config(text, tmp_path)
    # Only the addresses, paths and logins differ from configs/recommender_service.yaml (the
    # logins and TLS: test_the_cluster_logs_in_with_mounted_secrets_only): the topic, group,
    # TTL, timeouts and sensitive fields are the reviewed ones.
    addresses = {("pipeline_config",), ("model_base_path",), ("redis", "url"),
                 ("kafka", "bootstrap_servers"), ("tf_serving", "url"),
                 ("tf_serving", "grpc_target"), ("catalog", "path"),
                 ("endpoint", "host"), *ACCESS_KEYS,
                 # The object store's prefix the Kubeflow night reads (test below).
                 ("request_sink", "serving_base")}

    def settings(raw):
        flat = {}
        for key, value in raw.items():
            if key == "auth":  # the identity provider's (the repo's file: none, loopback only)
                continue
            for sub, leaf in (value.items() if isinstance(value, dict) else [(None, value)]):
                path = (key,) if sub is None else (key, sub)
                if path not in addresses:
                    flat[path] = leaf
        return flat

    repo_config = load_yaml((REPO / "configs" / CONFIG_KEY).read_text())
    assert settings(load_yaml(text)) == settings(repo_config)
    # Never the unauthenticated development mode in a cluster (issue 42, item 5).
    assert config.auth.mode in ("jwt", "gateway"), config.auth
    # Listening on the pod's IP, not loopback (the Service and probes could not reach it).
    assert config.endpoint.host == "0.0.0.0"
    # The image's files: absolute paths under the Dockerfile's WORKDIR, present in the repo.
    for path in (config.pipeline_config, config.catalog.path):
        assert str(path).startswith(IMAGE_ROOT + "/") and in_repo(path).is_file(), path


def serving_base_problems(config) -> list[str]:
    """The sink writes where the Kubeflow night's SkewCheck reads: an s3:// URI (what it can
    write on a cluster) of <kubeflow.pipeline_root>/requests (pipeline/kubeflow/client/
    compiler.py), the bucket and path the same; the pipeline config's scheme is a placeholder
    (configs/recommender.yaml: gs://YOUR_BUCKET/...)."""
    from core.config import load_config

    base = str(config.request_sink.serving_base)
    if not base.startswith("s3://"):
        return [f"request_sink.serving_base {base} is not an s3:// URI"]
    pipeline = load_config(in_repo(config.pipeline_config))  # the image's copy of the file
    if pipeline.skew.serving_base and "://" in pipeline.skew.serving_base:
        reads = pipeline.skew.serving_base
    else:
        reads = f"{pipeline.kubeflow.pipeline_root.rstrip('/')}/requests"
    if base.split("://", 1)[1].rstrip("/") != reads.split("://", 1)[1].rstrip("/"):
        return [f"request_sink.serving_base {base}, the Kubeflow night reads {reads}"]
    return []


def test_the_sink_writes_where_the_kubeflow_night_reads(tmp_path):
    config = load_cluster_config(cluster_config_text(as_written()), tmp_path)
    assert serving_base_problems(config) == []
    moved = cluster_config_text(as_written()).replace("/tfx/recommender/requests",
                                                      "/tfx/other/requests")
    assert serving_base_problems(load_cluster_config(moved, tmp_path)) == [
        "request_sink.serving_base s3://YOUR_BUCKET/tfx/other/requests, the Kubeflow night "
        "reads gs://YOUR_BUCKET/tfx/recommender/requests"]
    local = cluster_config_text(as_written()).replace(
        "s3://YOUR_BUCKET/tfx/recommender/requests", "/var/lib/requests")
    assert serving_base_problems(load_cluster_config(local, tmp_path)) == [
        "request_sink.serving_base /var/lib/requests is not an s3:// URI"]


def test_cluster_config_check_rejects_an_unknown_key(tmp_path):
    from core.config import ConfigError

    text = cluster_config_text(as_written()).replace("  timeout_ms: 20", "  timeout_msec: 20")
    with pytest.raises(ConfigError, match="redis.timeout_msec: unknown key"):
        load_cluster_config(text, tmp_path)


def _url_port(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or {"redis": 6379, "rediss": 6379, "http": 80, "https": 443}[parts.scheme]


def _tf_serving_port(config) -> int:
    """The TF Serving port the endpoint calls: gRPC's or REST's, as tf_serving.protocol says."""
    if config.tf_serving.protocol == "grpc":
        return int(config.tf_serving.grpc_target.rsplit(":", 1)[1])
    return _url_port(config.tf_serving.url)


def _policy_ports(rules: list[dict]) -> set[int]:
    return {p["port"] for rule in rules for p in rule.get("ports", [])}


# SeaweedFS's S3 port, behind its Service's 9000 (deploy/kubeflow/README.md: SeaweedFS / MinIO /
# S3): a NetworkPolicy sees the pod's port.
SEAWEEDFS_POD_PORT = 8333


def store_ports(objects: list[dict]) -> set[int]:
    """The object store's ports the sink reaches: its AWS_ENDPOINT_URL's, and SeaweedFS's pod
    port behind a 9000 Service."""
    env = {e["name"]: e.get("value") for e in container(objects, "request-sink").get("env", [])}
    port = _url_port(env["AWS_ENDPOINT_URL"]) if env.get("AWS_ENDPOINT_URL") else 443
    return {port} | ({SEAWEEDFS_POD_PORT} if port == 9000 else set())


def port_mismatches(objects: list[dict], config) -> list[str]:
    """Every port the containers, Services, scrape annotations and NetworkPolicies name, against
    the service config's: a port changed in one place only shows here."""
    endpoint_port, metrics_port = config.endpoint.port, config.updater.metrics_port
    admin_port = config.endpoint.admin_port
    redis, tf_serving = _url_port(config.redis.url), _tf_serving_port(config)
    kafka = {int(s.rsplit(":", 1)[1]) for s in config.kafka.bootstrap_servers.split(",")}
    dns = {53}
    # The identity provider's JWKS, where the endpoint fetches it (auth.jwks_url; issue 42, item 5).
    jwks = {_url_port(config.auth.jwks_url)} if getattr(config.auth, "jwks_url", None) else set()
    # The endpoint's request log goes to the brokers (issue 45).
    request_log = kafka if config.request_log.enabled else set()
    sink_port = config.request_sink.metrics_port
    found = []
    # Per Deployment: its container ports by name, the one its Service publishes, the one its
    # probes and Prometheus use (the endpoint's admin port: issue 42, item 7), its egress.
    for deployment, named, (port_name, port), (probe_name, probe_port), egress in (
            ("recommend-endpoint", {"http": endpoint_port, "admin": admin_port},
             ("http", endpoint_port), ("admin", admin_port),
             dns | {redis, tf_serving} | jwks | request_log),
            ("history-updater", {"metrics": metrics_port}, ("metrics", metrics_port),
             ("metrics", metrics_port), dns | {redis} | kafka),
            ("request-sink", {"metrics": sink_port}, ("metrics", sink_port),
             ("metrics", sink_port), dns | kafka | store_ports(objects))):
        c = container(objects, deployment)
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        if ports != named:
            found.append(f"{deployment}: container ports {ports}, config says "
                         + ", ".join(f"{n} {v}" for n, v in named.items()))
        for probe in ("livenessProbe", "readinessProbe"):
            if c[probe]["httpGet"]["port"] not in (probe_name, probe_port):
                found.append(f"{deployment}: {probe} on {c[probe]['httpGet']['port']}")
        annotations = find(objects, "Deployment", deployment)["spec"]["template"]["metadata"][
            "annotations"]
        if annotations.get("prometheus.io/port") != str(probe_port):
            found.append(f"{deployment}: prometheus.io/port {annotations.get('prometheus.io/port')}"
                         f", config says {probe_port}")
        services = [s for s in objects if s["kind"] == "Service"
                    and s["spec"]["selector"] == pod_labels_selector(objects, deployment)]
        for service in services:
            for p in service["spec"]["ports"]:
                if p["port"] != port or p["targetPort"] not in (port_name, port):
                    found.append(f"Service {service['metadata']['name']}: port {p['port']} -> "
                                 f"{p['targetPort']}, config says {port}")
        if not services:
            found.append(f"{deployment}: no Service")
        policy = find(objects, "NetworkPolicy", deployment)["spec"]
        if policy["podSelector"]["matchLabels"] != pod_labels_selector(objects, deployment):
            found.append(f"NetworkPolicy {deployment}: selects other pods")
        if set(policy["policyTypes"]) != {"Ingress", "Egress"}:
            found.append(f"NetworkPolicy {deployment}: not both directions")
        if _policy_ports(policy.get("ingress", [])) != set(named.values()):
            found.append(f"NetworkPolicy {deployment}: ingress ports "
                         f"{sorted(_policy_ports(policy.get('ingress', [])))}, config says "
                         + ", ".join(str(v) for v in sorted(named.values())))
        # The probes' and Prometheus's port: Prometheus alone (the kubelet is not filtered).
        for rule in policy.get("ingress", []):
            if probe_port in _policy_ports([rule]) and not rule.get("from"):
                found.append(f"NetworkPolicy {deployment}: port {probe_port} open to every pod")
        if any(not rule.get("ports") for rule in policy.get("ingress", [])
               + policy.get("egress", [])):
            found.append(f"NetworkPolicy {deployment}: a rule allows every port")
        if _policy_ports(policy.get("egress", [])) != egress:
            found.append(f"NetworkPolicy {deployment}: egress ports "
                         f"{sorted(_policy_ports(policy.get('egress', [])))}, config says "
                         f"{sorted(egress)}")
    return found


def pod_labels_selector(objects: list[dict], deployment: str) -> dict:
    return find(objects, "Deployment", deployment)["spec"]["selector"]["matchLabels"]


def _drop_egress_to(objects, policy: str, port: int) -> None:
    egress = find(objects, "NetworkPolicy", policy)["spec"]["egress"]
    egress[:] = [rule for rule in egress if port not in _policy_ports([rule])]


def _drop_endpoint_broker_egress(objects):
    _drop_egress_to(objects, "recommend-endpoint", 9093)


def _drop_sink_store_egress(objects):
    _drop_egress_to(objects, "request-sink", 9000)


def test_ports_agree_with_the_service_config(tmp_path):
    objects = as_written()
    config = load_cluster_config(cluster_config_text(objects), tmp_path)
    assert port_mismatches(objects, config) == []
    # The updater's ingress is Prometheus alone; the endpoint's is every client.
    (updater_in,) = find(objects, "NetworkPolicy", "history-updater")["spec"]["ingress"]
    assert updater_in["from"], "the updater's metrics port is open to every pod"


@pytest.mark.parametrize(
    "config_edit, manifest_edit, expected",
    [
        (("port: 8080", "port: 8082"), None,
         "recommend-endpoint: container ports {'http': 8080, 'admin': 8081}, config says "
         "http 8082, admin 8081"),
        (("admin_port: 8081", "admin_port: 8083"), None,
         "recommend-endpoint: container ports {'http': 8080, 'admin': 8081}, config says "
         "http 8080, admin 8083"),
        (("metrics_port: 9108", "metrics_port: 9109"), None,
         "NetworkPolicy history-updater: ingress ports [9108], config says 9109"),
        (("redis.recommender.svc:6379", "redis.recommender.svc:6380"), None,
         "NetworkPolicy recommend-endpoint: egress ports [53, 443, 6379, 8500, 9093], config "
         "says [53, 443, 6380, 8500, 9093]"),
        (("kafka.svc:9093", "kafka.svc:9094"), None,
         "NetworkPolicy history-updater: egress ports [53, 6379, 9093], config says "
         "[53, 6379, 9094]"),
        (("recommender.svc:8500", "recommender.svc:8502"), None,
         "NetworkPolicy recommend-endpoint: egress ports [53, 443, 6379, 8500, 9093], config "
         "says [53, 443, 6379, 8502, 9093]"),
        (("protocol: grpc", "protocol: rest"), None,
         "NetworkPolicy recommend-endpoint: egress ports [53, 443, 6379, 8500, 9093], config "
         "says [53, 443, 6379, 8501, 9093]"),
        (("idp.example.com/.well-known", "idp.example.com:8443/.well-known"), None,
         "NetworkPolicy recommend-endpoint: egress ports [53, 443, 6379, 8500, 9093], config "
         "says [53, 6379, 8443, 8500, 9093]"),
        (None, lambda o: find(o, "NetworkPolicy", "recommend-endpoint")["spec"]["ingress"][0][
            "ports"][0].update(port=80),
         "NetworkPolicy recommend-endpoint: ingress ports [80, 8081], config says 8080, 8081"),
        (None, lambda o: find(o, "NetworkPolicy", "recommend-endpoint")["spec"]["ingress"][1].pop(
            "from"), "NetworkPolicy recommend-endpoint: port 8081 open to every pod"),
        (None, lambda o: find(o, "Service", "history-updater-metrics")["spec"]["ports"][0].update(
            port=9100), "Service history-updater-metrics: port 9100 -> metrics, config says 9108"),
        (None, lambda o: find(o, "NetworkPolicy", "history-updater")["spec"]["egress"][1].pop(
            "ports"), "NetworkPolicy history-updater: a rule allows every port"),
        (("metrics_port: 9110", "metrics_port: 9111"), None,
         "request-sink: container ports {'metrics': 9110}, config says metrics 9111"),
        (None, _drop_endpoint_broker_egress,
         "NetworkPolicy recommend-endpoint: egress ports [53, 443, 6379, 8500], config says "
         "[53, 443, 6379, 8500, 9093]"),
        (None, _drop_sink_store_egress,
         "NetworkPolicy request-sink: egress ports [53, 9093], config says "
         "[53, 8333, 9000, 9093]"),
        (None, lambda o: find(o, "Service", "request-sink-metrics")["spec"]["ports"][0].update(
            port=9100), "Service request-sink-metrics: port 9100 -> metrics, config says 9110"),
    ],
    ids=["endpoint-port", "admin-port", "metrics-port", "redis", "kafka", "tf-serving",
         "tf-serving-protocol", "jwks",
         "policy", "admin-open", "service", "any-port", "sink-metrics-port",
         "endpoint-no-brokers", "sink-no-store", "sink-service"],
)
def test_port_check_catches_a_port_changed_in_one_place(tmp_path, config_edit, manifest_edit,
                                                         expected):
    objects = as_written()
    text = cluster_config_text(objects)
    if config_edit:
        assert config_edit[0] in text
        text = text.replace(*config_edit)
    if manifest_edit:
        manifest_edit(objects)
    found = port_mismatches(objects, load_cluster_config(text, tmp_path))
    assert expected in found, found


def serving_for_the_recommender() -> dict[str, dict]:
    """deploy/serving/k8s's Service, PVC and Deployment as `make deploy-names
    CONFIG=configs/recommender.yaml` renames them (deploy/serving/rename.py)."""
    from core.config import load_config

    new = load_config(REPO / "configs" / "recommender.yaml").serving.model_name
    old = rename_tool.current_name()
    out = {}
    for kind, path in (("Service", K8S / "common" / "service.yaml"),
                       ("PersistentVolumeClaim", K8S / "pvc.yaml"),
                       ("Deployment", K8S / "deployment.yaml")):
        out[kind] = load_yaml(rename_tool.rename_text(path.read_text(), old, new))
    out["model_name"] = new
    return out


def serving_link_problems(objects: list[dict], config, namespace: str) -> list[str]:
    """The endpoint reaches the TF Serving that deploy/serving/k8s deploys for the recommender:
    its Service's name and http and grpc ports, its pods' labels (on the port the endpoint
    calls), its model claim, its base path."""
    serving = serving_for_the_recommender()
    found = []
    service = serving["Service"]
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    host = f"{service['metadata']['name']}.{namespace}.svc"
    expected = f"http://{host}:{ports['http']}"
    if config.tf_serving.url != expected:
        found.append(f"tf_serving.url {config.tf_serving.url}, the Service is {expected}")
    if config.tf_serving.grpc_target != f"{host}:{ports['grpc']}":
        found.append(f"tf_serving.grpc_target {config.tf_serving.grpc_target}, the Service is "
                     f"{host}:{ports['grpc']}")
    tf_pods = serving["Deployment"]["spec"]["template"]["metadata"]["labels"]
    egress = find(objects, "NetworkPolicy", "recommend-endpoint")["spec"]["egress"]
    called = ports["grpc" if config.tf_serving.protocol == "grpc" else "http"]
    to_serving = [peer["podSelector"]["matchLabels"] for rule in egress
                  if called in _policy_ports([rule]) for peer in rule["to"]]
    if not to_serving or any(not set(s.items()) <= set(tf_pods.items()) for s in to_serving):
        found.append(f"NetworkPolicy recommend-endpoint: {to_serving} does not select TF Serving's "
                     f"pods {tf_pods}")
    pod = pod_spec(find(objects, "Deployment", "recommend-endpoint"))
    models = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)
    claim = serving["PersistentVolumeClaim"]["metadata"]["name"]
    if models["persistentVolumeClaim"]["claimName"] != claim:
        found.append(f"endpoint mounts claim {models['persistentVolumeClaim']['claimName']}, "
                     f"TF Serving reads {claim}")
    mount = next(m for m in container(objects, "recommend-endpoint")["volumeMounts"]
                 if m["name"] == models["name"])
    base = f"{mount['mountPath']}/{serving['model_name']}"
    if str(config.model_base_path) != base:
        found.append(f"model_base_path {config.model_base_path}, the versions are at {base}")
    # TF Serving reads the same folder: its models.config base_path is /models/<name>.
    tf_mount = next(m["mountPath"] for c in pod_spec(serving["Deployment"])["containers"]
                    for m in c["volumeMounts"] if m["name"] == "models")
    if tf_mount != mount["mountPath"]:
        found.append(f"endpoint mounts the models at {mount['mountPath']}, TF Serving at "
                     f"{tf_mount}")
    return found


def test_the_endpoint_reads_the_volume_and_service_of_tf_serving(tmp_path):
    objects = as_written()
    config = load_cluster_config(cluster_config_text(objects), tmp_path)
    namespace = kustomization()["namespace"]
    assert serving_link_problems(objects, config, namespace) == []
    assert config.redis.url.startswith(f"rediss://redis.{namespace}.svc:")


def test_serving_link_check_catches_a_wrong_claim_and_path(tmp_path):
    objects = as_written()
    text = cluster_config_text(objects).replace("/models/recommender", "/models/other-model")
    text = text.replace("recommender.svc:8500", "recommender.svc:9500")
    pod = pod_spec(find(objects, "Deployment", "recommend-endpoint"))
    next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)[
        "persistentVolumeClaim"]["claimName"] = "other-model-models"
    found = serving_link_problems(objects, load_cluster_config(text, tmp_path), "recommender")
    assert found == [
        "tf_serving.grpc_target tf-serving-recommender.recommender.svc:9500, the Service is "
        "tf-serving-recommender.recommender.svc:8500",
        "endpoint mounts claim other-model-models, TF Serving reads recommender-models",
        "model_base_path /models/other-model, the versions are at /models/recommender",
    ]


# --------------------------------------------------------------------------------------------
# Autoscaling and the Kafka topics the README documents


def readme_kafka_objects(readme: str) -> list[dict]:
    """The Strimzi custom resources in the README's yaml code blocks."""
    blocks = re.findall(r"```yaml\n(.*?)```", readme, re.S)
    return [doc for block in blocks for doc in load_yaml_all(block)
            if isinstance(doc, dict) and doc.get("apiVersion", "").startswith("kafka.strimzi.io/")]


def scaling_problems(objects: list[dict], readme: str, config) -> list[str]:
    found = []
    kafka_objects = readme_kafka_objects(readme)
    topics = {d["metadata"]["name"]: d for d in kafka_objects if d["kind"] == "KafkaTopic"}
    named = {config.kafka.topic, config.kafka.dead_letter_topic, config.request_log.topic}
    if set(topics) != named:
        found.append(f"README's KafkaTopics {sorted(topics)}, config names {sorted(named)}")
    if config.request_sink.topic != config.request_log.topic:
        found.append(f"request_sink.topic {config.request_sink.topic}, the endpoint logs to "
                     f"{config.request_log.topic}")
    (cluster,) = [d for d in kafka_objects if d["kind"] == "Kafka"]
    # The listener the updater logs in on: TLS with SCRAM (the config's SASL_SSL).
    ports = [listener["port"] for listener in cluster["spec"]["kafka"]["listeners"]
             if listener.get("tls") and listener.get("authentication", {}).get("type")
             == config.kafka.sasl.mechanism.lower()]
    bootstrap = (f"{cluster['metadata']['name']}-kafka-bootstrap."
                 f"{cluster['metadata']['namespace']}.svc:{ports[0] if ports else '(none)'}")
    if config.kafka.bootstrap_servers != bootstrap:
        found.append(f"kafka.bootstrap_servers {config.kafka.bootstrap_servers}, README's cluster "
                     f"is at {bootstrap}")
    for hpa in (d for d in objects if d["kind"] == "HorizontalPodAutoscaler"):
        name = hpa["metadata"]["name"]
        target = hpa["spec"]["scaleTargetRef"]
        if (target["kind"], target["name"]) != ("Deployment", name):
            found.append(f"HPA {name} scales {target['kind']} {target['name']}")
        if "replicas" in find(objects, "Deployment", name)["spec"]:
            found.append(f"Deployment {name} sets replicas, which its HPA owns")
        if [m["resource"]["name"] for m in hpa["spec"]["metrics"]] != ["cpu"]:
            found.append(f"HPA {name} not on CPU")
    updater = find(objects, "HorizontalPodAutoscaler", "history-updater")["spec"]
    partitions = topics.get(config.kafka.topic, {}).get("spec", {}).get("partitions")
    if updater["maxReplicas"] != partitions:
        found.append(f"history-updater maxReplicas {updater['maxReplicas']}, the topic has "
                     f"{partitions} partitions")
    sink = find(objects, "Deployment", "request-sink")["spec"]
    partitions = topics.get(config.request_sink.topic, {}).get("spec", {}).get("partitions")
    if not partitions or sink["replicas"] > partitions:
        found.append(f"request-sink replicas {sink['replicas']}, the topic has {partitions} "
                     "partitions")
    endpoint = find(objects, "HorizontalPodAutoscaler", "recommend-endpoint")["spec"]
    pdb = find(objects, "PodDisruptionBudget", "recommend-endpoint")["spec"]
    if not endpoint["minReplicas"] > pdb["minAvailable"] >= 1:
        found.append("the endpoint's PodDisruptionBudget blocks every drain, or keeps nothing up")
    return found


def test_scaling_follows_the_topic_and_the_readme(tmp_path):
    objects = as_written()
    config = load_cluster_config(cluster_config_text(objects), tmp_path)
    assert scaling_problems(objects, README.read_text(), config) == []


def test_scaling_check_catches_more_consumers_than_partitions(tmp_path):
    objects = as_written()
    config = load_cluster_config(cluster_config_text(objects), tmp_path)
    find(objects, "HorizontalPodAutoscaler", "history-updater")["spec"]["maxReplicas"] = 12
    find(objects, "Deployment", "request-sink")["spec"]["replicas"] = 4
    readme = README.read_text().replace("name: clicks.dead-letter", "name: clicks.dlq")
    assert scaling_problems(objects, readme, config) == [
        "README's KafkaTopics ['clicks', 'clicks.dlq', 'requests'], config names ['clicks', "
        "'clicks.dead-letter', 'requests']",
        "history-updater maxReplicas 12, the topic has 6 partitions",
        "request-sink replicas 4, the topic has 3 partitions",
    ]
    readme = README.read_text().replace("  name: requests\n  namespace: kafka",
                                        "  name: request-log\n  namespace: kafka")
    assert scaling_problems(objects, readme, config)[0] == (
        "README's KafkaTopics ['clicks', 'clicks.dead-letter', 'request-log'], config names "
        "['clicks', 'clicks.dead-letter', 'requests']")


# --------------------------------------------------------------------------------------------
# Logins: the cluster's Redis users and Kafka login come from mounted Secrets (issue 42, item 6)

ACCESS_KEYS = {("redis", "endpoint_user"), ("redis", "updater_user"), ("redis", "tls"),
               ("kafka", "security_protocol"), ("kafka", "sasl"), ("kafka", "tls"),
               ("request_log", "sasl"), ("request_log", "user_hash_key_env"),
               ("request_log", "user_hash_key_file"), ("request_sink", "sasl")}
ACL_FILE = SERVICE / "redis-users.acl"
# The files each pod's process reads (service/logins.py): its own logins and the CAs; the
# first of each pair of logins is the pod's own, which the other pod must not mount.
ROLE_FILES = {"recommend-endpoint": ("redis.endpoint_user.password_file", "redis.tls.ca_file",
                                     "request_log.sasl.password_file",
                                     "request_log.user_hash_key_file", "kafka.tls.ca_file"),
              "history-updater": ("redis.updater_user.password_file", "kafka.sasl.password_file",
                                  "redis.tls.ca_file", "kafka.tls.ca_file"),
              "request-sink": ("request_sink.sasl.password_file", "kafka.tls.ca_file")}
OWN_LOGINS = {"recommend-endpoint": ("redis.endpoint_user.password_file",
                                     "request_log.sasl.password_file",
                                     "request_log.user_hash_key_file"),
              "history-updater": ("redis.updater_user.password_file",
                                  "kafka.sasl.password_file"),
              "request-sink": ("request_sink.sasl.password_file",)}
# The object store's keys (boto3's variables), from the Secret request-sink-s3 only.
S3_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def kafka_logins(config) -> list[tuple]:
    """(config key, login, who, the ACL resources and operations it needs) of each Kafka user."""
    return [("kafka.sasl", config.kafka.sasl, "the updater",
             {("topic", config.kafka.topic): {"Describe", "Read"},
              ("group", config.kafka.group_id): {"Read"},
              ("topic", config.kafka.dead_letter_topic): {"Describe", "Write"}}),
            ("request_log.sasl", config.request_log.sasl, "the endpoint's request log",
             {("topic", config.request_log.topic): {"Describe", "Write"}}),
            ("request_sink.sasl", config.request_sink.sasl, "the request sink",
             {("topic", config.request_sink.topic): {"Describe", "Read"},
              ("group", config.request_sink.group_id): {"Read"}})]


def _setting(config, dotted: str):
    value = config
    for part in dotted.split("."):
        value = getattr(value, part, None)
    return value


def secret_mounts(objects: list[dict], deployment: str) -> dict[str, str]:
    """{mountPath: secretName} of the Deployment's container."""
    pod = pod_spec(find(objects, "Deployment", deployment))
    volumes = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    return {m["mountPath"]: volumes[m["name"]]
            for m in container(objects, deployment)["volumeMounts"] if m["name"] in volumes}


def _secret_of(mounts: dict[str, str], path) -> str | None:
    # load_service_config resolves paths on this machine (/var/run may be a link to /run): the
    # mounts are compared resolved the same way.
    return next((secret for mount, secret in mounts.items()
                 if Path(path) == Path(mount).resolve() / Path(path).name), None)


def access_problems(objects: list[dict], config, readme: str, acl: str) -> list[str]:
    found = []
    if not (config.redis.url.startswith("rediss://") and config.redis.tls
            and config.redis.tls.ca_file):
        found.append("redis: not TLS verified against a CA (rediss:// and redis.tls.ca_file)")
    if not (config.kafka.security_protocol == "SASL_SSL" and config.kafka.tls
            and config.kafka.tls.ca_file):
        found.append("kafka: not SASL_SSL verified against a CA (kafka.tls.ca_file)")
    mounts = {deployment: secret_mounts(objects, deployment) for deployment in ROLE_FILES}
    for deployment, keys in ROLE_FILES.items():
        for key in keys:
            path = _setting(config, key)
            if path is None:
                found.append(f"{key} is not set")
            elif _secret_of(mounts[deployment], path) is None:
                found.append(f"{deployment}: {key} {path} is on no Secret mount")
    for deployment, keys in OWN_LOGINS.items():
        others = [d for d in mounts if d != deployment]
        for key in keys:
            secret = _secret_of(mounts[deployment], _setting(config, key) or "")
            for other in others:
                if secret and secret in mounts[other].values():
                    found.append(f"{other} mounts {deployment}'s Secret {secret} ({key})")
    # deploy/service/redis-users.acl: the config's users, on the config's key prefix only.
    rules = {line.split()[1]: line.split()[2:] for line in acl.splitlines()
             if line.startswith("user ")}
    if "off" not in rules.get("default", []):
        found.append("redis-users.acl: the default user is not off")
    for role in ("endpoint", "updater"):
        login = getattr(config.redis, f"{role}_user")
        keys = [r for r in rules.get(login.username, []) if r.startswith(("~", "%", "allkeys"))]
        if login.username not in rules:
            found.append(f"redis-users.acl has no user {login.username} (redis.{role}_user)")
        elif keys != [f"~{config.history.key_prefix}*"]:
            found.append(f"redis-users.acl: {login.username} reaches keys {keys}, the histories "
                         f"are {config.history.key_prefix}*")
    # The README's KafkaUsers: the config's logins, ACLs on their topics and group only.
    users = {d["metadata"]["name"]: d["spec"] for d in readme_kafka_objects(readme)
             if d["kind"] == "KafkaUser"}
    for key, login, who, needed in kafka_logins(config):
        if login is None:
            found.append(f"{key} is not set")
            continue
        user = users.get(login.username)
        if user is None:
            found.append(f"README has no KafkaUser {login.username} ({key})")
            continue
        if user["authentication"]["type"] != login.mechanism.lower():
            found.append(f"KafkaUser {login.username}: {user['authentication']}, "
                         f"the config logs in with {login.mechanism}")
        granted = {}
        for acl in user["authorization"]["acls"]:
            resource = (acl["resource"]["type"], acl["resource"]["name"])
            granted.setdefault(resource, set()).update(acl["operations"])
            if acl["resource"].get("patternType", "literal") != "literal":
                found.append(f"KafkaUser {login.username}: the ACL on "
                             f"{acl['resource']['type']} {acl['resource']['name']} is "
                             f"{acl['resource']['patternType']}, not literal (it reaches others)")
        if set(granted) != set(needed):
            found.append(f"KafkaUser {login.username}: ACLs on {sorted(granted)}, "
                         f"{who} uses {sorted(needed)}")
        for resource, operations in needed.items():
            if resource in granted and granted[resource] != operations:
                found.append(f"KafkaUser {login.username}: {sorted(granted[resource])} on "
                             f"{resource[0]} {resource[1]}, {who} needs {sorted(operations)}")
    # The object store's keys: in the sink's pod only, from a Secret, never a literal.
    for deployment in (d for d in objects if d["kind"] == "Deployment"):
        name = deployment["metadata"]["name"]
        env = {e["name"]: e for c in pod_spec(deployment)["containers"] for e in c.get("env", [])}
        for key in S3_KEYS:
            if name != "request-sink" and key in env:
                found.append(f"{name} has the object store's {key}")
            elif name == "request-sink" and "secretKeyRef" not in env.get(key, {}).get(
                    "valueFrom", {}):
                found.append(f"request-sink: {key} is not from a Secret")
    return found


def test_the_cluster_logs_in_with_mounted_secrets_only(tmp_path):
    objects = as_written()
    config = load_cluster_config(cluster_config_text(objects), tmp_path)
    assert access_problems(objects, config, README.read_text(), ACL_FILE.read_text()) == []


def _mount_updater_secret_in_endpoint(objects):
    pod = pod_spec(find(objects, "Deployment", "recommend-endpoint"))
    pod["volumes"].append({"name": "x", "secret": {"secretName": "redis-updater"}})
    container(objects, "recommend-endpoint")["volumeMounts"].append(
        {"name": "x", "mountPath": "/var/run/secrets/x"})


def _drop_kafka_user_mount(objects):
    mounts = container(objects, "history-updater")["volumeMounts"]
    mounts[:] = [m for m in mounts if m["name"] != "kafka-user"]


def _s3_keys_as_literals(objects):
    for variable in container(objects, "request-sink")["env"]:
        if variable["name"] == "AWS_SECRET_ACCESS_KEY":
            variable.pop("valueFrom")
            variable["value"] = "not-a-secret"


def _drop_sink_kafka_mount(objects):
    mounts = container(objects, "request-sink")["volumeMounts"]
    mounts[:] = [m for m in mounts if m["name"] != "kafka-request-sink"]


def _drop_endpoint_log_key_mount(objects):
    mounts = container(objects, "recommend-endpoint")["volumeMounts"]
    mounts[:] = [m for m in mounts if m["name"] != "request-log-key"]


@pytest.mark.parametrize("objects_edit, text_edit, expected", [
    (_mount_updater_secret_in_endpoint, None,
     "recommend-endpoint mounts history-updater's Secret redis-updater "
     "(redis.updater_user.password_file)"),
    (_drop_kafka_user_mount, None,
     "history-updater: kafka.sasl.password_file "
     f"{Path('/var/run/secrets/recommender/kafka-user').resolve()}/password is on no Secret mount"),
    (None, ("acl", "resetkeys ~history:* resetchannels -@all +evalsha",
            "resetkeys ~* resetchannels -@all +evalsha"),
     "redis-users.acl: history-updater reaches keys ['~*'], the histories are history:*"),
    (None, ("acl", "user default off", "user default on nopass"),
     "redis-users.acl: the default user is not off"),
    (None, ("readme", "name: clicks\n          patternType: literal",
            "name: clicks\n          patternType: prefix"),
     "KafkaUser history-updater: the ACL on topic clicks is prefix, not literal (it reaches "
     "others)"),
    (None, ("readme", "name: history-updater\n          patternType",
            "name: history-updater-2\n          patternType"),
     "KafkaUser history-updater: ACLs on [('group', 'history-updater-2'), ('topic', 'clicks'), "
     "('topic', 'clicks.dead-letter')], the updater uses [('group', 'history-updater'), "
     "('topic', 'clicks'), ('topic', 'clicks.dead-letter')]"),
    (_s3_keys_as_literals, None, "request-sink: AWS_SECRET_ACCESS_KEY is not from a Secret"),
    (_drop_sink_kafka_mount, None,
     "request-sink: request_sink.sasl.password_file "
     f"{Path('/var/run/secrets/recommender/kafka-request-sink').resolve()}/password is on no "
     "Secret mount"),
    (_drop_endpoint_log_key_mount, None,
     "recommend-endpoint: request_log.user_hash_key_file "
     f"{Path('/var/run/secrets/recommender/request-log-key').resolve()}/key is on no Secret "
     "mount"),
    (None, ("readme", "operations: [Describe, Write]\n---\n# The request sink's login",
            "operations: [Describe, Read, Write]\n---\n# The request sink's login"),
     "KafkaUser recommend-endpoint: ['Describe', 'Read', 'Write'] on topic requests, the "
     "endpoint's request log needs ['Describe', 'Write']"),
    (None, ("readme", "name: request-sink\n          patternType",
            "name: request-sink-2\n          patternType"),
     "KafkaUser request-sink: ACLs on [('group', 'request-sink-2'), ('topic', 'requests')], "
     "the request sink uses [('group', 'request-sink'), ('topic', 'requests')]"),
], ids=["endpoint-mounts-updater-login", "login-not-mounted", "acl-all-keys", "default-user",
        "kafka-acl-prefix", "kafka-acl-group", "sink-s3-keys-literal", "sink-login-not-mounted",
        "endpoint-key-not-mounted", "endpoint-may-read", "sink-acl-group"])
def test_access_check_catches_a_broken_login(tmp_path, objects_edit, text_edit, expected):
    objects = as_written()
    config = load_cluster_config(cluster_config_text(objects), tmp_path)
    texts = {"readme": README.read_text(), "acl": ACL_FILE.read_text()}
    if objects_edit:
        objects_edit(objects)
    if text_edit:
        which, old, new = text_edit
        assert old in texts[which], old
        texts[which] = texts[which].replace(old, new)
    found = access_problems(objects, config, texts["readme"], texts["acl"])
    assert expected in found, found


# --------------------------------------------------------------------------------------------
# The image


def dockerfile_problems(text: str) -> list[str]:
    found = []
    lines = [line.strip() for line in text.replace("\\\n", " ").splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    sources = [src for line in lines if line.upper().startswith(("COPY ", "ADD "))
               for src in line.split()[1:-1] if not src.startswith("--")]
    for src in sources:
        top = src.strip("./").split("/", 1)[0]
        if top in DEV_TOOLS or src in (".", "./", "*"):
            found.append(f"copies {src} (a dev tool, or everything)")
    for needed in ("requirements-service.lock", "core/", "service/", "configs/", "data/catalog/"):
        if needed not in sources:
            found.append(f"does not copy {needed}")
    (base,) = [line.split()[1] for line in lines if line.upper().startswith("FROM ")]
    if not re.fullmatch(r"python:3\.10\.\d+-slim(-\w+)?", base):
        found.append(f"base {base} is not a pinned python 3.10 slim")
    users = [line.split()[1] for line in lines if line.upper().startswith("USER ")]
    if not users or not users[-1].isdigit() or int(users[-1]) == 0:
        found.append(f"runs as {users[-1] if users else 'root'}, not a numeric non-root uid")
    workdirs = [line.split()[1] for line in lines if line.upper().startswith("WORKDIR ")]
    if workdirs[-1:] != [IMAGE_ROOT]:
        found.append(f"WORKDIR {workdirs[-1:]}, the cluster config's paths are under {IMAGE_ROOT}")
    return found


def test_dockerfile_builds_the_tf_free_image_without_dev_tools():
    assert dockerfile_problems(DOCKERFILE.read_text()) == []
    lock = [line.split("==")[0].lower() for line in LOCK.read_text().splitlines()
            if re.match(r"^[A-Za-z0-9]", line)]
    assert lock and not [p for p in lock if p.startswith(("tensorflow", "tf-", "keras", "tfx"))]


def test_dockerfile_check_rejects_dev_tools_and_root():
    text = DOCKERFILE.read_text()
    broken = text.replace("COPY service/ service/", "COPY service/ service/\nCOPY tests/ tests/")
    broken = broken.replace("USER 10001", "USER root")
    assert dockerfile_problems(broken) == [
        "copies tests/ (a dev tool, or everything)",
        "runs as root, not a numeric non-root uid",
    ]
    assert "does not copy data/catalog/" in dockerfile_problems(
        text.replace("COPY data/catalog/ data/catalog/\n", ""))


def test_dockerfile_passes_hadolint_and_hadolint_rejects_a_broken_copy(tmp_path):
    proc = hadolint(DOCKERFILE)
    assert proc.returncode == 0, output(proc)
    broken = tmp_path / "Dockerfile"
    broken.write_text(DOCKERFILE.read_text().replace("USER 10001", "USER root")
                      .replace("python:3.10.13-slim-bookworm", "python:latest"))
    proc = hadolint(broken)
    assert proc.returncode != 0, output(proc)
    assert "DL3002" in output(proc) and "DL3007" in output(proc)


def service_modules(root: Path = REPO) -> list[str]:
    """What the image runs: every module of service/ (the entry points and the service config
    included)."""
    modules = []
    for path in sorted((root / "service").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


def _module_file(root: Path, name: str) -> Path | None:
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def third_party_imports(root: Path = REPO) -> set[str]:
    """Top-level names of the non-standard, non-project modules that the service's modules and
    every project module they import (at any depth, also inside a function) import: read from
    the source, so an optional import a library makes when a package happens to be installed
    (here: the dev venv) does not count, and the lock's resolver owns the libraries' own
    dependencies."""
    from tests.test_layout import imports

    project = {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
    seen, todo, found = set(), list(service_modules(root)), set()
    while todo:
        name = todo.pop()
        path = _module_file(root, name)
        if name in seen or path is None:
            continue
        seen.add(name)
        for imported in imports(path, name):
            top = imported.split(".")[0]
            if top in project:
                todo.append(imported)
            elif top and top not in sys.stdlib_module_names and top != "__future__":
                found.add(".".join(imported.split(".")[:2]) if top in NAMESPACES else top)
    return found


# Namespace packages that many distributions share: google.protobuf is protobuf's alone.
NAMESPACES = {"google"}


def imported_distributions(root: Path = REPO) -> set[str]:
    owners = module_owners()
    tops = third_party_imports(root)
    unowned = sorted(top for top in tops if top not in owners)
    assert not unowned, f"imported, but no installed distribution holds them: {unowned}"
    return {dist for top in tops for dist in owners[top]}


def module_owners() -> dict[str, list[str]]:
    """Top-level module -> the installed distributions holding it, from each one's RECORD
    (Python 3.10's packages_distributions() reads top_level.txt only, which numpy's and
    pydantic's wheels do not have)."""
    import importlib.metadata

    owners: dict[str, list[str]] = {}
    for dist in importlib.metadata.distributions():
        tops = set()
        for file in dist.files or []:
            top = file.parts[0]
            if top.endswith((".dist-info", ".data", ".pth")) or top in ("..", "__pycache__"):
                continue
            tops.add(top.split(".", 1)[0] if len(file.parts) == 1 else top)
            if top in NAMESPACES and len(file.parts) > 2:
                tops.add(f"{top}.{file.parts[1]}")
        for top in tops:
            owners.setdefault(top, []).append(dist.metadata["Name"])
    return owners


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def missing_from_lock(distributions: set[str], lock: str) -> list[str]:
    locked = {_normal(line.split("==")[0]) for line in lock.splitlines()
              if re.match(r"^[A-Za-z0-9]", line)}
    return sorted(_normal(d) for d in distributions if _normal(d) not in locked)


@pytest.mark.slow
def test_the_image_lock_holds_every_package_the_service_imports():
    """The image installs requirements-service.lock only: a package core/ or service/ imports
    outside it (numpy, through core.config -> core.tasks -> core.csv_cells) would fail the pods
    at start. And none of them is TensorFlow's."""
    assert {"yaml", "pydantic", "numpy"} <= third_party_imports()
    distributions = imported_distributions()
    assert not {_normal(d) for d in distributions} & {"tensorflow", "tensorflow-cpu", "tf-keras",
                                                       "keras", "tfx", "apache-beam"}
    assert missing_from_lock(distributions, LOCK.read_text()) == []
    without_numpy = re.sub(r"^numpy==.*$", "", LOCK.read_text(), flags=re.M)
    assert missing_from_lock(distributions, without_numpy) == ["numpy"]


# --------------------------------------------------------------------------------------------
# Alerts


def defined_alerts(text: str) -> set[str]:
    return {r["alert"] for g in load_yaml(text)["groups"] for r in g["rules"] if "alert" in r}


def documented_alerts(readme: str) -> set[str]:
    """The first column of the README's alert table (`| alert | fires when | for |`)."""
    table = readme.split("| alert ", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"^\| `(\w+)` +\|", table, re.M))


EXPECTED_ALERTS = {"RecommendP99High", "RecommendHistoryMissRatioHigh", "RecommendErrorsHigh",
                   "RecommendTFServingFallbackHigh",
                   "HistoryUpdaterDeadLetters", "HistoryUpdaterLagHigh", "HistoryUpdaterDown",
                   "HistoryUpdaterGroupLagHigh", "HistoryUpdaterStalled",
                   "HistoryUpdaterRestarting", "HistoryUpdaterKafkaViewMissing",
                   "RequestLogDropping", "RequestSinkDown", "RequestSinkLagHigh",
                   "RequestSinkWriteErrors", "RequestSinkBadRecords", "RequestSinkGroupLagHigh",
                   "RequestSinkStalled"}
# What each job selected by the alerts scrapes (prometheus-kubernetes.yml): the service's own
# pods, and the two sources outside the updater (kafka_exporter, kube-state-metrics).
ALERT_JOBS = {"recommend-endpoint", "history-updater", "request-sink", "kafka-exporter",
              "kube-state-metrics"}


def test_alert_rules_are_valid_and_documented():
    proc = run([tool("promtool"), "check", "rules", str(ALERTS)])
    assert proc.returncode == 0, output(proc)
    assert defined_alerts(ALERTS.read_text()) == EXPECTED_ALERTS
    assert documented_alerts(README.read_text()) == EXPECTED_ALERTS
    # Both Prometheus configs load them.
    for name in ("prometheus.yml", "prometheus-kubernetes.yml"):
        config = load_yaml((PROMETHEUS / name).read_text())
        assert ALERTS.name in config["rule_files"], name


def test_alert_rule_check_rejects_bad_promql(tmp_path):
    rules = load_yaml(ALERTS.read_text())
    rules["groups"][0]["rules"][0]["expr"] = "histogram_quantile(0.99, sum by (le) (rate(x[5m]))"
    broken = tmp_path / ALERTS.name
    broken.write_text(dump_yaml(rules))
    proc = run([tool("promtool"), "check", "rules", str(broken)])
    assert proc.returncode != 0, output(proc)
    assert "parse" in output(proc)


def test_alert_unit_tests_pass_and_cover_every_alert_firing_and_quiet():
    proc = run([tool("promtool"), "test", "rules", ALERTS_TEST.name], cwd=PROMETHEUS)
    assert proc.returncode == 0, output(proc)
    assert not_firing_and_quiet(ALERTS_TEST, EXPECTED_ALERTS) == []


@pytest.mark.parametrize("alert", sorted(EXPECTED_ALERTS))
def test_alert_unit_tests_catch_a_wrong_expectation(tmp_path, alert):
    """Each firing case, expected quiet instead, fails promtool: the cases do reach the rule."""
    proc = promtool_expecting_quiet(ALERTS, ALERTS_TEST, alert, tmp_path)
    assert proc.returncode != 0, output(proc)
    assert alert in output(proc)


def test_alerts_select_the_scrape_jobs_of_the_pods():
    """service-alerts.yml's job="..." are prometheus-kubernetes.yml's jobs, and those keep the
    service's pods by their labels and port names."""
    config = load_yaml((PROMETHEUS / "prometheus-kubernetes.yml").read_text())
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    selected = set(re.findall(r'job=~?"([^"]+)"', ALERTS.read_text()))
    assert selected == ALERT_JOBS and selected <= set(jobs)
    # The exporters' jobs keep their pods by the labels and port names their manifests give
    # them (Strimzi's Kafka Exporter, kube-state-metrics' examples/standard).
    for name, pod_label, value, port in (
            ("kafka-exporter", "strimzi_io_name", "recommender-kafka-exporter", "tcp-prometheus"),
            ("kube-state-metrics", "app_kubernetes_io_name", "kube-state-metrics", "http-metrics")):
        keep = {tuple(r["source_labels"]): r["regex"] for r in jobs[name]["relabel_configs"]
                if r.get("action") == "keep"}
        assert re.fullmatch(keep[(f"__meta_kubernetes_pod_label_{pod_label}",)], value), name
        assert re.fullmatch(keep[("__meta_kubernetes_pod_container_port_name",)], port), name
    # kube-state-metrics' namespace and pod labels are the pods it describes, not its own.
    assert jobs["kube-state-metrics"]["honor_labels"] is True
    objects = as_written()
    for name, port in (("recommend-endpoint", "admin"), ("history-updater", "metrics"),
                       ("request-sink", "metrics")):
        keep = {tuple(r["source_labels"]): r["regex"] for r in jobs[name]["relabel_configs"]
                if r.get("action") == "keep"}
        labels = find(objects, "Deployment", name)["spec"]["template"]["metadata"]["labels"]
        assert re.fullmatch(keep[("__meta_kubernetes_pod_label_app_kubernetes_io_name",)],
                            labels["app.kubernetes.io/name"]), name
        assert port in {p["name"] for p in container(objects, name)["ports"]}, name
        assert re.fullmatch(keep[("__meta_kubernetes_pod_container_port_name",)], port), name
        assert jobs[name]["metrics_path"] == \
            find(objects, "Deployment", name)["spec"]["template"]["metadata"]["annotations"][
                "prometheus.io/path"]


def outside_alert_problems(rules_text: str, objects: list[dict], config) -> list[str]:
    """The Kafka-side and restart alerts must name the updater's consumer group, topic,
    container and pods (issue 42, item 2), and the sink's its group and topic (issue 45), or
    they watch something else and never fire."""
    (group,) = [g for g in load_yaml(rules_text)["groups"]
                if g["name"] == "history-updater-from-outside"]
    text = " ".join(rule["expr"] for rule in group["rules"])
    found = []
    for label, want in (("consumergroup", config.kafka.group_id), ("topic", config.kafka.topic),
                        ("container", container(objects, "history-updater")["name"])):
        values = set(re.findall(rf'\b{label}="([^"]*)"', text))
        if values != {want}:
            found.append(f"{label} {sorted(values)}, the updater's is {want!r}")
    (pods,) = set(re.findall(r'\bpod=~"([^"]*)"', text))
    # A Deployment's pods are <name>-<ReplicaSet hash>-<5 characters>.
    if not re.fullmatch(pods, "history-updater-7c9f8d6b5-x2k4q") \
            or re.fullmatch(pods, "recommend-endpoint-6f7d9c8b4-p8m2n"):
        found.append(f"pod=~{pods!r} does not select the history-updater Deployment's pods alone")
    if not all(f'{m}{{job="kafka-exporter"' in text
               for m in ("kafka_consumergroup_lag", "kafka_consumergroup_current_offset")):
        found.append("a Kafka series not read from the kafka-exporter job")
    # The request sink's, likewise (issue 45): its group and topic.
    (group,) = [g for g in load_yaml(rules_text)["groups"]
                if g["name"] == "request-sink-from-outside"]
    text = " ".join(rule["expr"] for rule in group["rules"])
    for label, want in (("consumergroup", config.request_sink.group_id),
                        ("topic", config.request_sink.topic), ("job", "kafka-exporter")):
        values = set(re.findall(rf'\b{label}="([^"]*)"', text))
        if values != {want}:
            found.append(f"{label} {sorted(values)}, the sink's is {want!r}")
    return found


def test_outside_alerts_watch_the_updaters_group_topic_and_pods(tmp_path):
    objects = as_written()
    config = load_cluster_config(cluster_config_text(objects), tmp_path)
    assert outside_alert_problems(ALERTS.read_text(), objects, config) == []


def test_outside_alert_check_catches_a_renamed_group_and_container(tmp_path):
    objects = as_written()
    config = load_cluster_config(cluster_config_text(objects).replace(
        "group_id: history-updater", "group_id: updater-v2").replace(
        "group_id: request-sink", "group_id: sink-v2"), tmp_path)
    container(objects, "history-updater")["name"] = "main"
    rules = ALERTS.read_text().replace('pod=~"history-updater-.+"', 'pod=~".+"')
    assert outside_alert_problems(rules, objects, config) == [
        "consumergroup ['history-updater'], the updater's is 'updater-v2'",
        "container ['updater'], the updater's is 'main'",
        "pod=~'.+' does not select the history-updater Deployment's pods alone",
        "consumergroup ['request-sink'], the sink's is 'sink-v2'",
    ]


def static_scrape_config(edit=None) -> dict:
    """prometheus-kubernetes.yml with each job's pod discovery swapped for a static target:
    Debian's Prometheus build has no Kubernetes discovery (test_rollout_analysis.py), and the
    relabelings and rule files are what is checked."""
    config = load_yaml((PROMETHEUS / "prometheus-kubernetes.yml").read_text())
    for job in config["scrape_configs"]:
        assert job.pop("kubernetes_sd_configs"), job["job_name"]
        job["static_configs"] = [{"targets": ["127.0.0.1:9"]}]
    config["rule_files"] = [str(PROMETHEUS / f) for f in config["rule_files"]]
    if edit:
        edit(config)
    return config


def check_config(config: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    path = tmp_path / "prometheus.yml"
    path.write_text(dump_yaml(config))
    return run([tool("promtool"), "check", "config", str(path)])


def test_the_cluster_scrape_config_is_valid(tmp_path):
    proc = check_config(static_scrape_config(), tmp_path)
    assert proc.returncode == 0, output(proc)
    assert "service-alerts.yml" in output(proc)


def test_the_cluster_scrape_config_check_rejects_a_bad_relabeling(tmp_path):
    def misspell(config):
        job = next(j for j in config["scrape_configs"] if j["job_name"] == "history-updater")
        job["relabel_configs"][0]["action"] = "keeep"

    proc = check_config(static_scrape_config(misspell), tmp_path)
    assert proc.returncode != 0, output(proc)
    assert "keeep" in output(proc)


# --------------------------------------------------------------------------------------------
# Metric names in the alerts and the dashboard

PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
                "unless", "offset", "bool", "inf", "nan"}


def unknown_metrics(expr: str) -> list[str]:
    """Series names (and their matchers' label names) an expression selects that the service,
    dcgm-exporter or Prometheus do not export."""
    known = known_metrics()
    found = []
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    for name, matchers in re.findall(r"(?<![\w:.])([A-Za-z_:][\w:]*)\s*\{([^}]*)\}", text):
        labels = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers))
        if name in known and not labels <= known[name] | TARGET_LABELS:
            found.append(f"{name}: unknown labels {sorted(labels - known[name] - TARGET_LABELS)}")
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    for name in re.findall(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(?![\w:]|\s*\()", text):
        if name.lower() not in PROMQL_WORDS and name not in known:
            found.append(f"{name}: not a known metric")
    return found


def test_alerts_select_only_exported_metrics():
    exprs = [r["expr"] for g in load_yaml(ALERTS.read_text())["groups"] for r in g["rules"]]
    assert [(e, unknown_metrics(e)) for e in exprs if unknown_metrics(e)] == []


# Labels whose values the rules match on (or name in their descriptions), and where the code
# keeps the values it gives them: a value renamed in the code leaves a rule matching nothing.
LABEL_VALUES = {("recommend_request_log_records_total", "outcome"): ("service.request_log",
                                                                      "OUTCOMES"),
                ("request_sink_records_bad_total", "reason"): ("service.request_span", "REASONS")}


def label_value_problems(rules_text: str) -> list[str]:
    """Matchers on LABEL_VALUES' labels that select none of the code's values, and code values a
    rule selects (all of them, where it matches none) that its description does not explain."""
    import importlib

    found = []
    for rule in (r for g in load_yaml(rules_text)["groups"] for r in g["rules"]):
        for (metric, label), (module, attr) in LABEL_VALUES.items():
            if not re.search(rf"\b{metric}\b", rule["expr"]):
                continue
            values = getattr(importlib.import_module(module), attr)
            selected = []
            for matchers in re.findall(rf"\b{metric}\s*\{{([^}}]*)\}}", rule["expr"]):
                for op, value in re.findall(rf'\b{label}\s*(=~|!~|!=|=)\s*"([^"]*)"', matchers):
                    matched = [v for v in values
                               if (v == value if op in ("=", "!=") else re.fullmatch(value, v))]
                    if not matched:
                        found.append(f"{rule['alert']}: {label}{op}{value!r} matches none of "
                                     f"{list(values)}")
                    selected += matched if op in ("=", "=~") else []
            missing = [v for v in selected or values
                       if v not in rule["annotations"]["description"]]
            if missing:
                found.append(f"{rule['alert']}: the description does not name {label} {missing}")
    return found


def test_alerts_match_the_label_values_the_code_gives():
    assert label_value_problems(ALERTS.read_text()) == []


def unit_test_series_problems(tests: dict) -> list[str]:
    """Input series of service-alerts_test.yml the service would not export: unknown names or
    label names, or a LABEL_VALUES label given a value the code never gives it."""
    import importlib

    found = []
    for case in tests["tests"]:
        for series in case["input_series"]:
            text = series["series"]
            found += [f"{case['name']}: {p}" for p in unknown_metrics(text)]
            name = text.split("{", 1)[0]
            for (metric, label), (module, attr) in LABEL_VALUES.items():
                value = re.search(rf'\b{label}="([^"]*)"', text)
                if name == metric and value and \
                        value[1] not in getattr(importlib.import_module(module), attr):
                    found.append(f"{case['name']}: {label}={value[1]!r} of {metric}")
    return found


def test_the_alert_unit_tests_feed_only_series_the_service_exports():
    assert unit_test_series_problems(load_yaml(ALERTS_TEST.read_text())) == []


def test_the_series_check_catches_a_made_up_series_and_value():
    tests = load_yaml(ALERTS_TEST.read_text())
    series = tests["tests"][0]["input_series"]
    series.append({"series": 'request_sink_lag{job="request-sink", partition="0"}', "values": "1"})
    series.append({"series": 'request_sink_records_bad_total{job="request-sink", reason="size"}',
                   "values": "1"})
    assert unit_test_series_problems(tests) == [
        f"{tests['tests'][0]['name']}: request_sink_lag: not a known metric",
        f"{tests['tests'][0]['name']}: reason='size' of request_sink_records_bad_total",
    ]


def test_label_value_check_catches_a_renamed_value():
    rules = ALERTS.read_text().replace('outcome=~"dropped_.+"', 'outcome=~"drop_.+"')
    rules = rules.replace("signature (update the sink", "schema (update the sink")
    assert label_value_problems(rules) == [
        "RequestLogDropping: outcome=~'drop_.+' matches none of ['sent', 'dropped_queue_full', "
        "'dropped_delivery_failed', 'dropped_error']",
        # Selecting none, the rule is held to explain every value.
        "RequestLogDropping: the description does not name outcome ['sent']",
        "RequestSinkBadRecords: the description does not name reason ['signature']",
    ]


@pytest.mark.parametrize(
    "expr, problem",
    [
        ("sum(rate(recommend_request_total[5m]))", "recommend_request_total: not a known metric"),
        ('sum(rate(recommend_fallbacks_total{cause="no_history"}[5m]))',
         "recommend_fallbacks_total: unknown labels ['cause']"),
        ("histogram_quantile(0.99, sum by (le) (rate(recommend_request_duration_bucket[5m])))",
         "recommend_request_duration_bucket: not a known metric"),
        ("DCGM_FI_DEV_FB_USED_MIB / 1024", "DCGM_FI_DEV_FB_USED_MIB: not a known metric"),
    ],
)
def test_metric_check_catches_a_made_up_name_or_label(expr, problem):
    assert problem in unknown_metrics(expr)


# --------------------------------------------------------------------------------------------
# Grafana dashboard

DASHBOARD_PANELS = {
    "Recommend requests per second": {"recommend_requests_total"},
    "Recommend latency P50 / P99": {"recommend_request_duration_seconds_bucket"},
    "History misses and fallbacks": {"recommend_history_reads_total",
                                     "recommend_fallbacks_total"},
    "TF Serving latency from the endpoint P50 / P99": {
        "recommend_tf_serving_duration_seconds_bucket"},
    "Updater events per second": {"history_updater_events_applied_total",
                                  "history_updater_events_dead_lettered_total"},
    "Updater consumer lag": {"history_updater_consumer_lag"},
    "GPU memory used / free": {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"},
    "Request log records per second": {"recommend_request_log_records_total"},
    "Request sink: records written, bad, and lag": {
        "request_sink_records_written_total", "request_sink_records_bad_total",
        "request_sink_consumer_lag", "kafka_consumergroup_lag"},
    "Serving skew per feature (nightly check)": {"tfx_serving_skew_ratio",
                                                 "tfx_serving_skew_missing_features"},
}


def test_dashboard_has_the_panels_on_exported_metrics(tmp_path):
    dashboard = json.loads(DASHBOARD.read_text())
    panels = {p["title"]: p for p in dashboard["panels"]}
    for title, metrics in DASHBOARD_PANELS.items():
        exprs = " ".join(t["expr"] for t in panels[title]["targets"])
        assert all(re.search(rf"\b{m}\b", exprs) for m in metrics), title
    exprs = dashboard_exprs(dashboard)
    assert [(e, unknown_metrics(e)) for e in exprs if unknown_metrics(e)] == []
    proc = check_promql(exprs, tmp_path)
    assert proc.returncode == 0, output(proc)
    # Provisioned as tf-serving.json is: the same folder, the same datasource variable.
    (variable,) = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert variable["query"] == "prometheus"
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == f"${{{variable['name']}}}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == f"${{{variable['name']}}}", panel["title"]
    other = json.loads((GRAFANA / "dashboards" / "tf-serving.json").read_text())
    assert dashboard["uid"] != other["uid"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_dashboard_checks_reject_a_misspelt_metric_and_bad_promql(tmp_path):
    exprs = dashboard_exprs(json.loads(DASHBOARD.read_text()))
    misspelt = [e.replace("history_updater_consumer_lag", "history_updater_lag") for e in exprs]
    assert any("history_updater_lag: not a known metric" in unknown_metrics(e) for e in misspelt)
    broken = [e.replace("sum by (status)", "sum by status") for e in exprs]
    assert broken != exprs
    proc = check_promql(broken, tmp_path)
    assert proc.returncode != 0, output(proc)
    assert "parse" in output(proc)


# --------------------------------------------------------------------------------------------
# The image, emulated: there is no Docker engine here, so, as devtools/local_image.py does for
# the step image, a venv that sees this environment's packages minus every one the image's lock
# does not pin (importing one fails as in the pod), and a WORKDIR holding what the Dockerfile's
# COPY lines copy. The service's modules must import there, and its entry points start (--help).


def emulated_image(out: Path, lock_text: str) -> tuple[Path, Path]:
    """(the image's python, its WORKDIR) for DOCKERFILE, its lock replaced by lock_text."""
    from devtools import local_image

    workdir, _, copies = local_image.parse_dockerfile(DOCKERFILE.read_text())
    assert workdir == IMAGE_ROOT
    venv = out / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(local_image._site_packages_of(str(python)))
    packages = local_image._site_packages_of(sys.executable)
    quoted = repr(packages)
    # This environment's packages with their .pth files, but not the editable install's: the
    # project's code comes from the WORKDIR copy only.
    (site / "_lock_site_packages.pth").write_text(
        f"import sys; sys.path.append({quoted}); list(map(lambda n: __import__('site').addpackage("
        f"{quoted}, n, None), filter(lambda n: n.endswith('.pth') and not n.startswith("
        f"'__editable__'), sorted(__import__('os').listdir({quoted})))))\n")
    hidden = local_image.modules_not_in(lock_text, "tfx-pipeline-template", packages)
    (site / "_image_packages.py").write_text(local_image.IMAGE_PACKAGES.format(
        hidden=hidden, lock=LOCK.name))
    (site / "_image_packages.pth").write_text("import _image_packages\n")
    image_workdir = out / "workdir"
    for source, destination in copies:
        if not source.endswith(".lock"):
            shutil.copytree(REPO / source, image_workdir / destination,
                            ignore=shutil.ignore_patterns("__pycache__"))
    return python, image_workdir


def run_in_image(python: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), *args], cwd=workdir, capture_output=True, text=True,
                          timeout=120, check=False, env={"PATH": "/usr/bin:/bin",
                                                         "PYTHONDONTWRITEBYTECODE": "1"})


ENTRY_POINTS = {"service.updater": "service/updater.py",
                "service.request_sink": "service/request_sink.py",
                "service.endpoint": "service/endpoint/__main__.py"}


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> tuple[Path, Path]:
    return emulated_image(tmp_path_factory.mktemp("service-image"), LOCK.read_text())


@pytest.mark.slow
def test_the_emulated_image_imports_the_service_and_starts_its_processes(image):
    python, workdir = image
    modules = [m for m in service_modules(workdir) if not m.endswith("__main__")]
    proc = run_in_image(python, workdir, "-c", "import importlib, sys; [importlib.import_module("
                        f"m) for m in {modules!r}]; print(sorted(m for m in sys.modules if "
                        "m.split('.')[0] in ('tensorflow', 'tf_keras', 'keras', 'tfx')))")
    assert proc.returncode == 0, output(proc)
    assert proc.stdout.strip() == "[]", "the service imported TensorFlow: " + proc.stdout
    for module in [m for m, f in ENTRY_POINTS.items() if (workdir / f).is_file()]:
        proc = run_in_image(python, workdir, "-m", module, "--help")
        assert proc.returncode == 0 and "--config" in proc.stdout, (module, output(proc))
    # The cluster's config names the image's files: they are in the WORKDIR copy.
    text = cluster_config_text(as_written())
    for path in re.findall(rf"{IMAGE_ROOT}/\S+", text):
        assert (workdir / Path(path).relative_to(IMAGE_ROOT)).is_file(), path


@pytest.mark.slow
def test_the_emulated_image_fails_without_a_package_the_service_needs(image):
    """The same image with numpy hidden, as a lock without it would install."""
    python, workdir = image
    found = run_in_image(python, workdir, "-c", "import _image_packages; "
                         "print(_image_packages.__file__)")
    hider = Path(found.stdout.strip())
    original = hider.read_text()
    try:
        hider.write_text(original + "HIDDEN = HIDDEN | {'numpy'}\n")
        proc = run_in_image(python, workdir, "-c", "import service.config")
    finally:
        hider.write_text(original)
    assert proc.returncode != 0
    assert "No module named 'numpy' (not in the image" in output(proc)


# --------------------------------------------------------------------------------------------
# The metric names above are the code's: each service process's Metrics registry, where present


def exported_metrics(module: str) -> dict[str, set]:
    """Series name -> label names of a Metrics() of service/<...> (histograms as their _bucket,
    _count and _sum; counters with _total)."""
    import importlib

    metrics = importlib.import_module(module).Metrics()
    out = {}
    for collector in vars(metrics).values():
        kind = getattr(collector, "_type", None)
        if kind is None:
            continue
        name, labels = collector._name, set(collector._labelnames)
        if kind == "histogram":
            out.update({f"{name}_bucket": labels | {"le"}, f"{name}_count": labels,
                        f"{name}_sum": labels})
        else:
            out[f"{name}_total" if kind == "counter" else name] = labels
    return out


@pytest.mark.parametrize("module, prefix", [("service.endpoint.metrics", "recommend_"),
                                            ("service.updater", "history_updater_"),
                                            ("service.request_sink", "request_sink_")])
def test_the_metric_names_are_those_the_service_exports(module, prefix):
    file = REPO.joinpath(*module.split(".")).with_suffix(".py")
    if not file.is_file():
        pytest.skip(f"{file.relative_to(REPO)} is not in this checkout")
    exported = exported_metrics(module)
    listed = {n: ls for n, ls in known_metrics().items() if n.startswith(prefix)}
    assert exported == listed
