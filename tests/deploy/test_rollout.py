"""deploy/serving/k8s/rollout: the canary release of TF Serving (Argo Rollouts), statically.

Custom kinds (Rollout, AnalysisTemplate: Argo Rollouts v1.9.1; VirtualService, DestinationRule:
Istio 1.30.3) are validated against the openAPIV3Schema of their CRDs, vendored verbatim in
deploy/crds/ (its README.md names the source commits and pins the digests), by
tests/deploy/crd_schema.py as strictly as the API server's field validation (`kubectl apply
--validate=strict`, the default since Kubernetes 1.27): a field the schema does not name is
refused unless the schema preserves unknown fields there. Core kinds, and the Rollout's pod
template as a Deployment's, go through kubernetes-validate as in test_serving_artifacts.py. Each
check has a negative control. What the analysis decides is tested in test_rollout_analysis.py,
against a real Prometheus.
"""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path

import pytest

from tests.deploy import crd_schema
from tests.deploy.test_serving_artifacts import (
    K8S,
    MODEL_NAME,
    SERVING_IMAGE,
    k8s_manifests,
    k8s_object,
    load_yaml_docs,
    output,
    parse_model_server_config,
    serving_container,
)
from tests.helpers import dump_yaml, kubernetes_validate_objects

ROLLOUT = K8S / "rollout"
VARIANTS = {name: ROLLOUT / name for name in ("istio", "nginx", "replicas")}
VERSION_LABEL = "tf-serving/model-version"


def is_custom(doc: dict) -> bool:
    return crd_schema.serves(doc["apiVersion"], doc["kind"])


def docs(root: Path) -> list[dict]:
    return [doc for path in k8s_manifests(root) for doc in load_yaml_docs(path)]


def validate_core(objects: list[dict], tmp_path: Path) -> subprocess.CompletedProcess:
    return kubernetes_validate_objects(objects, tmp_path)


def as_deployment(rollout: dict) -> dict:
    """The Rollout's selector and pod template in a Deployment, for kubernetes-validate: the
    Rollout CRD leaves volumes unchecked (x-kubernetes-preserve-unknown-fields)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": rollout["metadata"]["name"]},
        "spec": {"selector": rollout["spec"]["selector"], "template": rollout["spec"]["template"]},
    }


def variant_object(variant: str, kind: str) -> dict:
    return k8s_object(kind, VARIANTS[variant])


# --------------------------------------------------------------------------------------------
# schema validation, with a negative control per kind


@pytest.mark.parametrize("variant", VARIANTS)
def test_custom_resources_validate_against_their_crds(variant):
    found = [d for d in docs(VARIANTS[variant]) if is_custom(d)]
    kinds = {d["kind"] for d in found}
    expected = {"Rollout", "AnalysisTemplate"} | (
        {"VirtualService", "DestinationRule"} if variant == "istio" else set())
    assert kinds == expected
    for doc in found:
        assert crd_schema.errors(doc) == [], (doc["kind"], doc["metadata"]["name"])


@pytest.mark.parametrize("variant", VARIANTS)
def test_core_objects_and_the_pod_template_validate_strictly(variant, tmp_path):
    found = docs(VARIANTS[variant])
    core = [d for d in found if not is_custom(d)]
    unknown = {d["kind"] for d in core} - {"ConfigMap", "Service", "PodDisruptionBudget",
                                          "PersistentVolumeClaim", "Ingress", "Role",
                                          "RoleBinding", "NetworkPolicy",
                                          "ValidatingAdmissionPolicy",
                                          "ValidatingAdmissionPolicyBinding"}
    assert not unknown, f"{unknown}: neither a vendored CRD nor a core kind"
    rollout = next(d for d in found if d["kind"] == "Rollout")
    objects = core + [as_deployment(rollout)]
    proc = validate_core(objects, tmp_path)
    assert proc.returncode == 0, output(proc)
    assert output(proc).count("passed") == len(objects)


def _misspelt(kind: str) -> tuple[dict, str]:
    """A copy of the variant's object of `kind` with one field misspelt, and that field."""
    if kind == "Rollout":
        doc = variant_object("istio", kind)
        doc["spec"]["strategy"]["canary"]["steps"][0] = {"setWieght": 5}
        return doc, "setWieght"
    if kind == "AnalysisTemplate":
        doc = variant_object("istio", kind)
        doc["spec"]["metrics"][0]["sucessCondition"] = doc["spec"]["metrics"][0].pop(
            "successCondition")
        return doc, "sucessCondition"
    if kind == "VirtualService":
        doc = variant_object("istio", kind)
        doc["spec"]["http"][0]["route"][0]["weigth"] = 100
        return doc, "weigth"
    doc = variant_object("istio", kind)
    doc["spec"]["subsets"][0]["label"] = doc["spec"]["subsets"][0].pop("labels")
    return doc, "label"


@pytest.mark.parametrize("kind", ["Rollout", "AnalysisTemplate", "VirtualService",
                                  "DestinationRule"])
def test_crd_validation_rejects_a_misspelt_field(kind):
    doc, field = _misspelt(kind)
    errors = crd_schema.errors(doc)
    assert errors and any(field in e for e in errors), errors


def test_crd_validation_rejects_a_wrong_type():
    rollout = variant_object("istio", "Rollout")
    rollout["spec"]["strategy"]["canary"]["steps"][0]["setWeight"] = "five percent"
    assert any("setWeight" in e for e in crd_schema.errors(rollout))


def test_crd_validation_checks_metadata_and_int_or_string_as_the_api_server_does():
    """metadata is ObjectMeta (a misspelt key refused), and an int-or-string field takes a
    number or a percentage, not a boolean (pkg/apiserver/schema: x-kubernetes-int-or-string)."""
    rollout = variant_object("istio", "Rollout")
    assert crd_schema.errors(rollout) == []
    rollout["metadata"]["lables"] = {"app": "x"}
    rollout["spec"]["strategy"]["canary"]["maxSurge"] = True
    errors = crd_schema.errors(rollout)
    assert any("lables" in e for e in errors) and any("maxSurge" in e for e in errors), errors
    rollout = variant_object("istio", "Rollout")
    rollout["spec"]["strategy"]["canary"]["maxSurge"] = "25%"
    assert crd_schema.errors(rollout) == []


def test_core_validation_rejects_a_broken_ingress_and_pod_template(tmp_path):
    ingress = variant_object("nginx", "Ingress")
    ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["prot"] = {}
    deployment = as_deployment(variant_object("nginx", "Rollout"))
    deployment["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaims"] = {}
    for obj, field in ((ingress, "prot"), (deployment, "persistentVolumeClaims")):
        proc = validate_core([obj], tmp_path)
        assert proc.returncode != 0, output(proc)
        assert field in output(proc)


# --------------------------------------------------------------------------------------------
# what the manifests say


@pytest.mark.parametrize("root", [ROLLOUT / "common", *VARIANTS.values()],
                         ids=lambda p: p.name)
def test_kustomization_lists_every_manifest(root):
    listed = {p for p in k8s_manifests(root) if p.parent == root}
    assert listed == set(root.glob("*.yaml")) - {root / "kustomization.yaml"}


def test_the_model_volume_is_the_deployments():
    assert (ROLLOUT / "common" / "pvc.yaml").read_text() == (K8S / "pvc.yaml").read_text()


def without_routing(rollout: dict) -> dict:
    rollout = copy.deepcopy(rollout)
    for key in ("trafficRouting", "canaryService", "stableService"):
        rollout["spec"]["strategy"]["canary"].pop(key, None)
    return rollout


def test_the_variants_differ_only_in_traffic_routing():
    rollouts = {v: variant_object(v, "Rollout") for v in VARIANTS}
    assert "trafficRouting" not in rollouts["replicas"]["spec"]["strategy"]["canary"]
    base = without_routing(rollouts["replicas"])
    for variant in ("istio", "nginx"):
        assert without_routing(rollouts[variant]) == base, variant


def test_steps_go_5_25_100_with_an_analysis_between():
    rollout = variant_object("istio", "Rollout")
    steps = rollout["spec"]["strategy"]["canary"]["steps"]
    shape = [("weight", s["setWeight"]) if "setWeight" in s else ("analysis",) for s in steps]
    assert shape == [("weight", 5), ("analysis",), ("weight", 25), ("analysis",), ("weight", 100)]
    template = variant_object("istio", "AnalysisTemplate")
    declared = {a["name"] for a in template["spec"]["args"]}
    required = {a["name"] for a in template["spec"]["args"] if "value" not in a}
    for step in steps:
        if "analysis" not in step:
            continue
        assert [t["templateName"] for t in step["analysis"]["templates"]] == [
            template["metadata"]["name"]]
        passed = {a["name"]: a["valueFrom"]["podTemplateHashValue"]
                  for a in step["analysis"]["args"]}
        assert passed == {"canary-hash": "Latest", "stable-hash": "Stable"}
        assert required <= set(passed) <= declared
    # A canary that never gets ready is aborted, not left waiting.
    assert rollout["spec"]["progressDeadlineAbort"] is True


def test_routing_objects_name_each_other():
    rollout = variant_object("istio", "Rollout")
    istio = rollout["spec"]["strategy"]["canary"]["trafficRouting"]["istio"]
    service = variant_object("istio", "Service")
    vs = variant_object("istio", "VirtualService")
    dr = variant_object("istio", "DestinationRule")
    assert istio["virtualService"]["name"] == vs["metadata"]["name"]
    assert istio["destinationRule"]["name"] == dr["metadata"]["name"]
    assert set(istio["virtualService"]["routes"]) <= {r["name"] for r in vs["spec"]["http"]}
    subsets = {s["name"] for s in dr["spec"]["subsets"]}
    assert {istio["destinationRule"]["canarySubsetName"],
            istio["destinationRule"]["stableSubsetName"]} == subsets
    assert dr["spec"]["host"] == service["metadata"]["name"] in vs["spec"]["hosts"]
    for route in vs["spec"]["http"]:
        assert {d["destination"]["subset"] for d in route["route"]} == subsets

    rollout = variant_object("nginx", "Rollout")
    canary = rollout["spec"]["strategy"]["canary"]
    ingress = variant_object("nginx", "Ingress")
    assert canary["trafficRouting"]["nginx"]["stableIngress"] == ingress["metadata"]["name"]
    backends = {p["backend"]["service"]["name"] for r in ingress["spec"]["rules"]
                for p in r["http"]["paths"]}
    assert backends == {canary["stableService"]}
    services = {d["metadata"]["name"]: d for d in docs(VARIANTS["nginx"]) if d["kind"] == "Service"}
    selector = rollout["spec"]["selector"]["matchLabels"]
    for name in (canary["stableService"], canary["canaryService"]):
        assert services[name]["spec"]["selector"] == selector, name


def rollout_pod(variant: str = "istio") -> dict:
    return variant_object(variant, "Rollout")["spec"]["template"]["spec"]


def test_the_server_is_the_deployments_but_for_the_pinned_config():
    (server,) = [c for c in rollout_pod()["containers"]
                 if c["image"].startswith(SERVING_IMAGE + ":")]
    deployed = copy.deepcopy(serving_container())
    # The Deployment re-reads a shared models.config; a rollout pod's is its own, fixed.
    deployed["args"] = [a.replace("/config/models.config", "/model-config/models.config")
                        for a in deployed["args"]
                        if not a.startswith("--model_config_file_poll_wait_seconds")]
    deployed["volumeMounts"].insert(2, {"name": "model-config", "mountPath": "/model-config",
                                        "readOnly": True})
    assert server == deployed
    deployment_pod = k8s_object("Deployment")["spec"]["template"]["spec"]
    assert rollout_pod()["securityContext"] == deployment_pod["securityContext"]


def model_config_script(pod: dict) -> tuple[list[str], dict]:
    (init,) = [c for c in pod["initContainers"] if c["name"] == "model-config"]
    env = {e["name"]: e for e in init["env"]}
    assert env["MODEL_VERSION"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        f"metadata.labels['{VERSION_LABEL}']")
    return init["command"] + init["args"], env


def run_model_config(pod: dict, version: str, tmp_path: Path) -> subprocess.CompletedProcess:
    command, env = model_config_script(pod)
    out = tmp_path / "models.config"
    return subprocess.run(command, env={"MODEL_VERSION": version, "MODEL_CONFIG": str(out),
                                        "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=30, check=False)


def test_the_pod_serves_exactly_the_version_of_its_label(tmp_path):
    """The init container's script, run here by /bin/sh as the image's would: its models.config
    parses as TF Serving's ModelServerConfig and loads that one version only."""
    pod = rollout_pod()
    proc = run_model_config(pod, "1717258117", tmp_path)
    assert proc.returncode == 0, output(proc)
    config = parse_model_server_config((tmp_path / "models.config").read_text())
    (model,) = config.model_config_list.config
    assert model.name == MODEL_NAME and model.base_path == f"/models/{MODEL_NAME}"
    assert list(model.model_version_policy.specific.versions) == [1717258117]
    labels = variant_object("istio", "Rollout")["spec"]["template"]["metadata"]["labels"]
    assert labels[VERSION_LABEL] == "unset", "the bundled manifests pin no version"
    # The version label is not part of the selector: a new version is a new revision of the same
    # Rollout, not another set of pods.
    selector = variant_object("istio", "Rollout")["spec"]["selector"]["matchLabels"]
    assert VERSION_LABEL not in selector


@pytest.mark.parametrize("version", ["unset", "", "17172581a7", "latest", "1 2"])
def test_the_pod_refuses_a_label_that_is_no_version(version, tmp_path):
    proc = run_model_config(rollout_pod(), version, tmp_path)
    assert proc.returncode != 0
    assert "not a version number" in proc.stderr
    assert not (tmp_path / "models.config").exists()


def test_a_renamed_copy_of_the_rollout_validates_and_serves_the_new_name(tmp_path):
    """make deploy-names (deploy/serving/rename.py) renames these files with the others."""
    from tests.deploy.test_rename import DNS_1123, NEW_NAME
    from tests.deploy.test_serving_artifacts import rename_tool

    copy_dir = tmp_path / "serving"
    changed = rename_tool.rename(NEW_NAME, K8S.parent, copy_dir)
    assert {p.name for p in changed} >= {"rollout.yaml", "analysis-template.yaml",
                                         "virtualservice.yaml", "ingress.yaml"}
    k8s_name = rename_tool.kubernetes_name(NEW_NAME)
    for variant in VARIANTS:
        root = copy_dir / "k8s" / "rollout" / variant
        found = docs(root)
        for doc in found:
            assert DNS_1123.match(doc["metadata"]["name"]), doc["metadata"]
            assert not re.search(rf"\b{MODEL_NAME}\b", dump_yaml(doc)), (variant, doc["kind"])
            if is_custom(doc):
                assert crd_schema.errors(doc) == [], (variant, doc["kind"])
        rollout = next(d for d in found if d["kind"] == "Rollout")
        assert rollout["metadata"]["name"] == f"tf-serving-{k8s_name}"
        proc = run_model_config(rollout["spec"]["template"]["spec"], "42", tmp_path)
        assert proc.returncode == 0, output(proc)
        (model,) = parse_model_server_config(
            (tmp_path / "models.config").read_text()).model_config_list.config
        assert (model.name, model.base_path) == (NEW_NAME, f"/models/{NEW_NAME}")
        template = next(d for d in found if d["kind"] == "AnalysisTemplate")
        assert f'model_name="{NEW_NAME}"' in dump_yaml(template["spec"]["metrics"])
        proc = validate_core([d for d in found if not is_custom(d)] + [as_deployment(rollout)],
                             tmp_path)
        assert proc.returncode == 0, output(proc)


def test_the_canary_steps_and_thresholds_follow_the_config(tmp_path):
    """make deploy-names writes serving.canary into the Rollout's steps and the
    AnalysisTemplate's arguments; the result still validates against the CRDs."""
    from core.config import CanaryConfig
    from tests.deploy.test_serving_artifacts import rename_tool

    canary = CanaryConfig(weights=[10, 50, 75], analysis_window="10m", min_requests=500,
                          max_error_ratio=0.02, p99_slo_ms=80, max_p99_ratio=2.0)
    copy_dir = tmp_path / "serving"
    rename_tool.rename(MODEL_NAME, K8S.parent, copy_dir, canary=canary.model_dump())
    for variant in VARIANTS:
        found = docs(copy_dir / "k8s" / "rollout" / variant)
        for doc in found:
            if is_custom(doc):
                assert crd_schema.errors(doc) == [], (variant, doc["kind"])
        rollout = next(d for d in found if d["kind"] == "Rollout")
        steps = rollout["spec"]["strategy"]["canary"]["steps"]
        assert [s.get("setWeight", "analysis") for s in steps] == [
            10, "analysis", 50, "analysis", 75, "analysis", 100]
        template = next(d for d in found if d["kind"] == "AnalysisTemplate")
        args = {a["name"]: a.get("value") for a in template["spec"]["args"]}
        assert (args["window"], args["min-requests"], args["max-error-ratio"],
                args["p99-slo-ms"], args["max-p99-ratio"]) == ("10m", "500", "0.02", "80", "2")
