"""deploy/flink: the Flink session cluster (Flink Kubernetes Operator 1.15.0) the Beam steps
run on, its job server and policies, statically: the FlinkDeployment against the operator's CRD
(strict, tests/deploy/crd_schema.py), the core kinds and the pod templates with
kubernetes-validate, and the README's beam_args against the manifests. Each with a negative
control."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from core.config import KubeflowConfig
from tests.deploy import crd_schema
from tests.helpers import kubernetes_validate_objects, load_yaml, load_yaml_all

ROOT = Path(__file__).resolve().parents[2]
FLINK = ROOT / "deploy" / "flink"
SIDECAR = "beam-worker-pool"


def documents() -> list:
    return [d for name in ("flinkdeployment.yaml", "job-server.yaml", "network-policy.yaml")
            for d in load_yaml_all((FLINK / name).read_text()) if d]


def find(kind: str, name: str = None) -> dict:
    (doc,) = [d for d in documents() if d["kind"] == kind
              and (name is None or d["metadata"]["name"] == name)]
    return doc


def readme_beam_args() -> dict:
    block = re.search(r"```yaml\n(kubeflow:\n.*?)```", (FLINK / "README.md").read_text(),
                      flags=re.S).group(1)
    args = load_yaml(block)["kubeflow"]["beam_args"]
    return dict(arg[2:].split("=", 1) for arg in args)


def sidecar(flink: dict) -> dict:
    (container,) = [c for c in flink["spec"]["taskManager"]["podTemplate"]["spec"]["containers"]
                    if c["name"] == SIDECAR]
    return container


def as_pod(flink: dict, role: str) -> dict:
    template = flink["spec"][role]["podTemplate"]
    spec = copy.deepcopy(template["spec"])
    for container in spec["containers"]:  # the operator fills in Flink's own container's image
        container.setdefault("image", flink["spec"]["image"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"tfx-beam-{role.lower()}"},
            "spec": spec}


def validate(objects: list, tmp_path: Path):
    return kubernetes_validate_objects(objects, tmp_path)


def test_the_flinkdeployment_validates_strictly_against_the_operator_crd():
    flink = find("FlinkDeployment")
    assert crd_schema.errors(flink) == []
    assert flink["spec"]["flinkVersion"] == "v1_18" and "job" not in flink["spec"]


@pytest.mark.parametrize("break_it, field", [
    (lambda f: f["spec"]["taskManager"].update(replica=2), "replica"),
    (lambda f: sidecar(f).update(imagePullPolicy=["Always"]), "imagePullPolicy"),
    (lambda f: f["spec"].update(flinkVersion="v1_18_1"), "flinkVersion"),
    (lambda f: sidecar(f)["securityContext"].update(readOnlyRootFilesytem=True),
     "readOnlyRootFilesytem"),
], ids=["misspelt", "wrong-type", "bad-enum", "misspelt-deep"])
def test_a_broken_flinkdeployment_is_refused(break_it, field):
    flink = copy.deepcopy(find("FlinkDeployment"))
    break_it(flink)
    assert any(field in e for e in crd_schema.errors(flink))


def test_core_objects_and_pod_templates_validate_strictly(tmp_path):
    flink = find("FlinkDeployment")
    core = [d for d in documents() if d["kind"] != "FlinkDeployment"]
    objects = core + [as_pod(flink, "jobManager"), as_pod(flink, "taskManager")]
    proc = validate(objects, tmp_path)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.count("passed") == len(objects)
    broken = copy.deepcopy(as_pod(flink, "taskManager"))
    broken["spec"]["containers"][1]["ports"][0]["containerPort"] = "50000"
    proc = validate([broken], tmp_path)
    assert proc.returncode != 0 and "containerPort" in proc.stdout


def test_the_sidecar_is_the_worker_pool_of_the_pipeline_image_hardened():
    flink = find("FlinkDeployment")
    container = sidecar(flink)
    assert container["image"] == KubeflowConfig().image
    assert container["command"] == ["python", "-m",
                                    "apache_beam.runners.worker.worker_pool_main"]
    port = int(readme_beam_args()["environment_config"].split(":")[1])
    assert container["args"] == [f"--service_port={port}"]
    assert [p["containerPort"] for p in container["ports"]] == [port]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TF_USE_LEGACY_KERAS"] == "1"
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
    assert security["capabilities"]["drop"] == ["ALL"] and security["runAsUser"] == 10001
    assert {"mountPath": "/tmp", "name": "beam-tmp"} in container["volumeMounts"]
    for role in ("jobManager", "taskManager"):
        pod = flink["spec"][role]["podTemplate"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        # Whole templates: no base podTemplate for the operator to merge by array position.
        assert pod["containers"][0]["name"] == "flink-main-container"
    assert "podTemplate" not in flink["spec"]
    assert flink["spec"]["taskManager"]["podTemplate"]["spec"][
        "automountServiceAccountToken"] is False
    config = flink["spec"]["flinkConfiguration"]
    assert config["restart-strategy.type"] == "fixed-delay"
    assert config["web.submit.enable"] == "false"


def test_readme_beam_args_reach_the_job_server_and_it_reaches_the_cluster():
    block = re.search(r"```yaml\n(kubeflow:\n.*?)```", (FLINK / "README.md").read_text(),
                      flags=re.S).group(1)
    KubeflowConfig(**load_yaml(block)["kubeflow"])  # the config takes them as written
    args = readme_beam_args()
    assert args["runner"] == "PortableRunner" and args["environment_type"] == "EXTERNAL"
    assert args["environment_config"].split(":")[0] == "localhost"
    service = find("Service", "beam-flink-job-server")
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    for option, port_name in (("job_endpoint", "job"), ("artifact_endpoint", "artifact")):
        host, port = args[option].split(":")
        assert host == service["metadata"]["name"] and int(port) == ports[port_name]
    policy = find("NetworkPolicy", "beam-flink-job-server")
    assert {p["port"] for p in policy["spec"]["ingress"][0]["ports"]} == set(ports.values())
    flink = find("FlinkDeployment")
    server = find("Deployment", "beam-flink-job-server")
    (container,) = server["spec"]["template"]["spec"]["containers"]
    flags = dict(a[2:].split("=", 1) for a in container["args"])
    assert flags["flink-master"] == f"{flink['metadata']['name']}-rest:8081"
    assert int(flags["job-port"]) == ports["job"]


def test_the_job_server_is_the_image_beam_release_for_the_cluster_flink():
    beam = re.search(r"^apache-beam==(\S+)", (ROOT / "requirements-image.lock").read_text(),
                     flags=re.M).group(1)
    flink = find("FlinkDeployment")
    minor = flink["spec"]["flinkVersion"][1:].replace("_", ".")
    (container,) = find("Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"apache/beam_flink{minor}_job_server:{beam}"
    assert flink["spec"]["image"].startswith(f"flink:{minor}.")


def test_the_flink_pods_admit_only_each_other_and_the_job_server():
    flink = find("FlinkDeployment")
    policy = find("NetworkPolicy", "tfx-beam-flink")
    own = {"app": flink["metadata"]["name"], "type": "flink-native-kubernetes"}
    assert policy["spec"]["podSelector"]["matchLabels"] == own
    peers, server = policy["spec"]["ingress"]
    assert peers == {"from": [{"podSelector": {"matchLabels": own}}]}
    assert server["ports"] == [{"protocol": "TCP", "port": 8081}]
    assert all(set(p) == {"podSelector"} for rule in policy["spec"]["ingress"]
               for p in rule["from"]), "a namespace or IP peer would let others reach 50000"
