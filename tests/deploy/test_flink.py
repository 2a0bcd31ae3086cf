"""deploy/flink: the Flink session cluster (Flink Kubernetes Operator 1.15.0) the Beam steps
run on, its job server and policies, statically: the FlinkDeployment against the operator's CRD
(strict, tests/deploy/crd_schema.py), the core kinds and the pod templates with
kubernetes-validate, the versions against the pins the local cluster runs (flink-libraries.txt,
job-server-pom.xml), and the README's beam_args against the manifests. Each with a negative
control."""
from __future__ import annotations

import copy
import os
import re
import zipfile
from pathlib import Path
from xml.etree import ElementTree

import pytest

from core.config import KubeflowConfig
from tests.deploy import crd_schema
from tests.helpers import kubernetes_validate_objects, load_yaml, load_yaml_all

ROOT = Path(__file__).resolve().parents[2]
FLINK = ROOT / "deploy" / "flink"
SIDECAR = "beam-worker-pool"
POM = "{http://maven.apache.org/POM/4.0.0}"
# Flink's jars as `make tools` fetches them (devtools/flink_cluster.py reads the same).
FLINK_LIBS = Path(os.environ.get("FLINK_LIBS", ROOT / ".cache" / "flink"))


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


def flink_version() -> str:
    """The Flink the local cluster runs: flink-libraries.txt's apache-flink-libraries pin."""
    return re.search(r"^apache-flink-libraries==(\S+) ", (FLINK / "flink-libraries.txt")
                     .read_text(), flags=re.M).group(1)


def job_server_runner() -> tuple:
    """(Flink minor, Beam release) of the Beam Flink runner job-server-pom.xml pins: the job
    server CI runs (read when a test runs, so a missing pom fails that test, not collection)."""
    runners = []
    for dep in ElementTree.parse(FLINK / "job-server-pom.xml").getroot().iter(f"{POM}dependency"):
        match = re.fullmatch(r"beam-runners-flink-(\d+\.\d+)", dep.findtext(f"{POM}artifactId"))
        if match and dep.findtext(f"{POM}groupId") == "org.apache.beam":
            runners.append((match.group(1), dep.findtext(f"{POM}version")))
    (runner,) = runners
    return runner


def version_mismatches(flink: dict, server: dict) -> list:
    """What in the FlinkDeployment and the job server Deployment differs from the pins."""
    version, (minor, beam) = flink_version(), job_server_runner()
    (container,) = server["spec"]["template"]["spec"]["containers"]
    wanted = {"flinkVersion": "v" + version.rsplit(".", 1)[0].replace(".", "_"),
              "image": f"flink:{version}-scala_2.12-java11",
              "job server image": f"apache/beam_flink{minor}_job_server:{beam}"}
    actual = {"flinkVersion": flink["spec"]["flinkVersion"], "image": flink["spec"]["image"],
              "job server image": container["image"]}
    return [f"{k}: {actual[k]} != {v}" for k, v in wanted.items() if actual[k] != v]


def validate(objects: list, tmp_path: Path):
    return kubernetes_validate_objects(objects, tmp_path)


def test_the_flinkdeployment_validates_strictly_against_the_operator_crd():
    flink = find("FlinkDeployment")
    assert crd_schema.errors(flink) == []
    assert "job" not in flink["spec"]  # a session cluster


@pytest.mark.parametrize("break_it, field", [
    (lambda f: f["spec"]["taskManager"].update(replica=2), "replica"),
    (lambda f: sidecar(f).update(imagePullPolicy=["Always"]), "imagePullPolicy"),
    (lambda f: f["spec"].update(flinkVersion="v1_16_3"), "flinkVersion"),
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
    assert flink["spec"]["flinkConfiguration"]["web.submit.enable"] == "false"


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


def test_the_cluster_is_the_pinned_flink_and_the_job_server_the_pinned_runner():
    version, (minor, beam) = flink_version(), job_server_runner()
    assert version.startswith(f"{minor}."), "the job server's runner is for another Flink"
    flink, server = find("FlinkDeployment"), find("Deployment", "beam-flink-job-server")
    assert version_mismatches(flink, server) == []
    # The SDK is not the job server's release, by design (README.md: Which pair, and why).
    sdk = re.search(r"^apache-beam==(\S+)", (ROOT / "requirements-image.lock").read_text(),
                    flags=re.M).group(1)
    section = (FLINK / "README.md").read_text().split("## Which pair, and why")[1]
    assert all(v in section for v in (version, beam, sdk, f"beam-runners-flink-{minor}"))


@pytest.mark.parametrize("field, value", [
    ("flinkVersion", "v1_18"), ("image", "flink:1.18.1-scala_2.12-java11"),
    ("job server image", "apache/beam_flink1.16_job_server:2.59.0"),  # the SDK's release
    ("job server image", "apache/beam_flink1.18_job_server:2.56.0"),
])
def test_a_cluster_or_job_server_off_the_pins_is_refused(field, value):
    flink = copy.deepcopy(find("FlinkDeployment"))
    server = copy.deepcopy(find("Deployment", "beam-flink-job-server"))
    if field == "job server image":
        server["spec"]["template"]["spec"]["containers"][0]["image"] = value
    else:
        flink["spec"][field] = value
    assert [m for m in version_mismatches(flink, server) if m.startswith(f"{field}:")]


def memory_shortfalls(flink: dict) -> list:
    """Below what Beam's Python stages needed on the local cluster (flinkdeployment.yaml)."""
    config, mb = flink["spec"]["flinkConfiguration"], lambda v: int(re.match(r"\d+", v)[0])
    network = [config.get(f"taskmanager.memory.network.{k}", "0") for k in ("min", "max")]
    floors = {"network": (min(map(mb, network)), 384),
              "task off-heap": (mb(config.get("taskmanager.memory.task.off-heap.size", "0")),
                                1024),
              "TaskManager process": (mb(flink["spec"]["taskManager"]["resource"]["memory"]),
                                      4096)}
    return [name for name, (have, need) in floors.items() if have < need] + (
        ["network min != max"] if network[0] != network[1] else [])


@pytest.mark.parametrize("break_it, shortfall", [
    (lambda c: c.pop("taskmanager.memory.network.min"), "network"),
    (lambda c: c.pop("taskmanager.memory.task.off-heap.size"), "task off-heap"),
    (lambda c: c.update({"taskmanager.memory.network.max": "1024mb"}), "network min != max"),
], ids=["no-network", "no-off-heap", "network-range"])
def test_the_taskmanagers_have_the_memory_beam_stages_needed(break_it, shortfall):
    flink = find("FlinkDeployment")
    assert memory_shortfalls(flink) == []
    broken = copy.deepcopy(flink)
    break_it(broken["spec"]["flinkConfiguration"])
    assert shortfall in memory_shortfalls(broken)
    broken = copy.deepcopy(flink)
    broken["spec"]["taskManager"]["resource"]["memory"] = "2048m"
    assert memory_shortfalls(broken) == ["TaskManager process"]


def test_the_restart_strategy_is_fixed_delay_with_attempts_and_delay_explicit():
    config = find("FlinkDeployment")["spec"]["flinkConfiguration"]
    # `restart-strategy`: the key Flink 1.16 reads, still read as a deprecated key from 1.17.
    assert config["restart-strategy"] == "fixed-delay"
    assert "restart-strategy.type" not in config
    assert int(config["restart-strategy.fixed-delay.attempts"]) >= 1
    assert re.fullmatch(r"\d+ s", config["restart-strategy.fixed-delay.delay"])


def declared_keys(dist: Path, keys: set) -> set:
    """Those of keys that the Flink jar declares: each as a CONSTANT_Utf8 of a class in
    org/apache/flink/configuration/ (where ConfigOptions live)."""
    with zipfile.ZipFile(dist) as jar:
        blob = b"".join(jar.read(n) for n in jar.namelist()
                        if n.startswith("org/apache/flink/configuration/") and n.endswith(".class"))
    return {k for k in keys if b"\x01" + len(k).to_bytes(2, "big") + k.encode() in blob}


def test_every_flink_configuration_key_is_one_the_pinned_flink_reads():
    dist = FLINK_LIBS / "lib" / f"flink-dist-{flink_version()}.jar"
    if not dist.exists():
        pytest.skip(f"{dist} not fetched (make tools)")
    keys = set(find("FlinkDeployment")["spec"]["flinkConfiguration"])
    assert declared_keys(dist, keys) == keys
    # Negative controls: a misspelt key; and on 1.16, 1.17's restart-strategy.type (ignored there).
    wrong = {"restart-strategy.fixed-delay.atempts"}
    if flink_version().startswith("1.16."):
        wrong.add("restart-strategy.type")
    assert declared_keys(dist, wrong) == set()


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
