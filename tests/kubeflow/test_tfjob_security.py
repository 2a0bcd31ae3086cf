"""The TFJob's replicas are closed to everyone but each other, run without a Kubernetes token as
a restricted non-root user, and do not outlive the Trainer step (its pod owns the job; SIGTERM
deletes it). Issue 25, items 1 and 2.

TensorFlow's gRPC server (port 2222) runs any graph op a client sends, with no authentication,
and the replicas hold the step's object store credentials: the NetworkPolicy is what keeps
other pods out. No cluster here: tests/kubeflow/fake_training_operator.py answers as the API
server, the Training Operator v1.8.1 and the garbage collector would.
"""
from __future__ import annotations

import copy
import logging
import os
import re
import signal
import threading
import time

import pytest
import yaml

from tests.helpers import REPO, kubernetes_validate, load_yaml_all
from tests.kubeflow.fake_training_operator import FakeTrainingOperator, validate_tfjob
from tests.kubeflow.test_tfjob import (S3_ENV, ChiefWrites, _manifest, _pod, _props, _run,
                                       _trainer_artifacts, two_workers)

STRATEGIES = [("multi_worker_mirrored", {}), ("parameter_server", {"env": S3_ENV}),
              ("multi_worker_mirrored", {"service_account": "pipeline-runner"})]


# --- the replica pods ----------------------------------------------------------------------

def pod_problems(template: dict) -> list:
    """Why a replica's pod template is not locked down (the Pod Security Standards' restricted
    profile, plus no API token and a read-only root): [] if it is."""
    spec, problems = template["spec"], []
    if spec.get("automountServiceAccountToken") is not False:
        problems.append("automountServiceAccountToken is not false")
    for key in ("hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace"):
        if spec.get(key):
            problems.append(f"{key} is set")
    if any("hostPath" in volume for volume in spec.get("volumes") or []):
        problems.append("a hostPath volume")
    context = spec.get("securityContext") or {}
    if context.get("runAsNonRoot") is not True:
        problems.append("runAsNonRoot is not true")
    if not isinstance(context.get("runAsUser"), int) or context["runAsUser"] <= 0:
        problems.append("runAsUser is not a numeric non-root user")
    if (context.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        problems.append("seccompProfile is not RuntimeDefault")
    empty_dirs = {v["name"] for v in spec.get("volumes") or [] if "emptyDir" in v}
    for container in spec["containers"] + spec.get("initContainers", []):
        c = container.get("securityContext") or {}
        if c.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{container['name']}: allowPrivilegeEscalation is not false")
        if c.get("privileged"):
            problems.append(f"{container['name']}: privileged")
        if (c.get("capabilities") or {}).get("drop") != ["ALL"] or (
                c.get("capabilities") or {}).get("add"):
            problems.append(f"{container['name']}: capabilities are not drop ALL")
        if c.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{container['name']}: the root file system is writable")
        if c.get("runAsUser") == 0 or c.get("runAsNonRoot") is False:
            problems.append(f"{container['name']}: runs as root")
        if not any(m["mountPath"] == "/tmp" and m["name"] in empty_dirs
                   for m in container.get("volumeMounts") or []):
            problems.append(f"{container['name']}: /tmp is not an emptyDir")
        if any(port.get("hostPort") for port in container.get("ports") or []):
            problems.append(f"{container['name']}: a hostPort")
    return problems


@pytest.mark.parametrize("strategy, kwargs", STRATEGIES)
def test_replica_pods_have_no_token_and_run_restricted(strategy, kwargs):
    manifest = _manifest(strategy, **kwargs)
    assert validate_tfjob(manifest) == []  # the CRD's PodTemplateSpec takes every field
    for replica in manifest["spec"]["tfReplicaSpecs"]:
        assert pod_problems(_pod(manifest, replica)) == [], replica


def test_the_pod_check_catches_an_open_pod():
    """Negative control: each weakening is reported."""
    for breaks, expected in [
            (lambda s: s.pop("automountServiceAccountToken"), "automountServiceAccountToken"),
            (lambda s: s.update(hostNetwork=True), "hostNetwork"),
            (lambda s: s["securityContext"].update(runAsUser=0), "runAsUser"),
            (lambda s: s["securityContext"].pop("seccompProfile"), "seccompProfile"),
            (lambda s: s["containers"][0]["securityContext"].update(
                allowPrivilegeEscalation=True), "allowPrivilegeEscalation"),
            (lambda s: s["containers"][0]["securityContext"]["capabilities"].update(
                add=["NET_RAW"]), "capabilities"),
            (lambda s: s["containers"][0]["securityContext"].pop("readOnlyRootFilesystem"),
             "writable"),
            (lambda s: s["containers"][0].pop("volumeMounts"), "/tmp")]:
        template = copy.deepcopy(_pod(_manifest(), "Worker"))
        breaks(template["spec"])
        assert any(expected in problem for problem in pod_problems(template)), expected


def test_the_replicas_user_is_the_image_s_and_they_write_only_tmp():
    """runAsUser is the image's own user (deploy/kubeflow/Dockerfile), so the root file system
    can stay read-only: the worker's only local writes are the non-chief scratch export
    (tempfile.mkdtemp, under TMPDIR=/tmp) and Keras' ~/.keras fallback to /tmp."""
    from pipeline.kubeflow.training_job.kinds import RUN_AS_USER

    dockerfile = (REPO / "deploy" / "kubeflow" / "Dockerfile").read_text()
    assert re.search(rf"^USER {RUN_AS_USER}$", dockerfile, re.M)
    assert f"--uid {RUN_AS_USER}" in dockerfile
    source = (REPO / "components" / "trainer" / "distribution.py").read_text()
    assert re.findall(r"tempfile\.mkdtemp\(([^)]*)\)", source) == [
        'prefix=f"{cluster.task_type}{cluster.task_index}-scratch-"']  # no dir=: TMPDIR


# --- the NetworkPolicy ---------------------------------------------------------------------

def _selects(selector: dict, labels: dict) -> bool:
    assert set(selector) <= {"matchLabels"}, f"unexpected selector {selector}"
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def policy_problems(policy: dict, job_pods: list, other_pods: list, port: int = 2222) -> list:
    """Why `policy` does not close the job's pods to all but each other on `port` ([] if it
    does). `job_pods`/`other_pods`: the labels of the job's replica pods (as the operator
    sets them) and of pods that are not the job's (another TFJob's, the step's, anyone's)."""
    spec, problems = policy["spec"], []
    if "Ingress" not in spec.get("policyTypes", ["Ingress"]):
        problems.append("policyTypes has no Ingress")
    if not all(_selects(spec["podSelector"], labels) for labels in job_pods):
        problems.append("the podSelector misses some of the job's pods")
    if any(_selects(spec["podSelector"], labels) for labels in other_pods):
        problems.append("the podSelector takes pods that are not the job's")
    for rule in spec.get("ingress") or []:
        peers = rule.get("from")
        if not peers:
            problems.append("an ingress rule from anywhere")
        for peer in peers or []:
            if set(peer) != {"podSelector"}:
                problems.append(f"an ingress peer beyond the namespace's pods: {peer}")
            elif any(_selects(peer["podSelector"], labels) for labels in other_pods):
                problems.append("an ingress peer admits pods that are not the job's")
            elif not all(_selects(peer["podSelector"], labels) for labels in job_pods):
                problems.append("an ingress peer misses some of the job's pods")
        ports = rule.get("ports")
        if not ports or any(p.get("protocol", "TCP") != "TCP" or p.get("port") != port
                            or p.get("endPort") for p in ports):
            problems.append(f"an ingress rule on ports other than {port}: {ports}")
    return problems


def _pod_labels(*manifests) -> list:
    """The labels the operator puts on the replica pods of each TFJob (the fake, after
    pkg/controller.v1/common/pod.go createNewPod), plus two pods no TFJob made."""
    api = FakeTrainingOperator()
    for manifest in manifests:
        api.create_namespaced_custom_object("kubeflow.org", "v1", "ml", "tfjobs", manifest)
    return [p["metadata"]["labels"] for p in api.pods.values()]


def test_the_policy_admits_only_the_job_s_own_pods_on_2222(tmp_path):
    from pipeline.kubeflow.training_job.manifest import all_peer_ports, network_policy

    manifest = _manifest("parameter_server", labels={"app.kubernetes.io/part-of": "demo"})
    other = copy.deepcopy(manifest)
    other["metadata"]["name"] = "trainer-y"
    job_pods = _pod_labels(manifest)
    other_pods = _pod_labels(other) + [
        {"app.kubernetes.io/part-of": "demo"},  # the step's pod, say: same part-of label
        {"training.kubeflow.org/job-name": "trainer-x"}]  # not made by the operator
    assert len(job_pods) == 6 and all(labels["training.kubeflow.org/job-name"] == "trainer-x"
                                      for labels in job_pods)
    policy = network_policy(manifest, job_uid="uid-job")
    assert policy_problems(policy, job_pods, other_pods) == []
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress (the bucket) unchanged
    assert policy["metadata"]["namespace"] == "ml"
    assert policy["metadata"]["ownerReferences"] == [
        {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "trainer-x",
         "uid": "uid-job"}]
    # With NCCL on GPUs the job's pods reach each other on any port, others still on none.
    nccl = network_policy(manifest, any_port=True)
    assert [p for p in policy_problems(nccl, job_pods, other_pods)
            if "ports other than" not in p] == []
    assert nccl["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP"}]
    assert all_peer_ports({"collective_implementation": "nccl",
                                 "job": {"gpus_per_worker": 1}})
    assert not all_peer_ports({"collective_implementation": "auto",
                                     "job": {"gpus_per_worker": 0}})
    assert not all_peer_ports({"collective_implementation": "ring",
                                     "job": {"gpus_per_worker": 2}})
    # The API server would take both (kubernetes-validate --strict, the repository's version).
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump_all([policy, nccl]))
    result = kubernetes_validate([tmp_path / "policy.yaml"])
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_policy_check_rejects_open_policies():
    """Negative control: broken copies of the policy, each opening the replicas, are caught."""
    from pipeline.kubeflow.training_job.manifest import network_policy

    manifest = _manifest()
    other = copy.deepcopy(manifest)
    other["metadata"]["name"] = "trainer-y"
    job_pods, other_pods = _pod_labels(manifest), _pod_labels(other) + [{}]
    good = network_policy(manifest)

    def broken(change):
        policy = copy.deepcopy(good)
        change(policy["spec"])
        return policy_problems(policy, job_pods, other_pods)

    assert broken(lambda s: s.update(ingress=[{}]))  # allow all
    assert broken(lambda s: s["ingress"][0].pop("from"))  # from anywhere on 2222
    assert broken(lambda s: s["ingress"][0].pop("ports"))  # the job's pods, any port
    assert broken(lambda s: s["ingress"][0]["from"].append({"namespaceSelector": {}}))
    assert broken(lambda s: s["ingress"][0]["from"].append(
        {"ipBlock": {"cidr": "0.0.0.0/0"}}))
    assert broken(lambda s: s["ingress"][0].update(
        {"from": [{"podSelector": {}}]}))  # every pod of the namespace
    assert broken(lambda s: s.update(podSelector={"matchLabels": {
        "training.kubeflow.org/job-name": "trainer-y"}}))  # another job's pods
    assert broken(lambda s: s.update(policyTypes=["Egress"]))


def test_the_step_s_rbac_allows_the_policy_and_reading_its_pod():
    rules = [rule for doc in load_yaml_all(
        (REPO / "deploy" / "training" / "rbac.yaml").read_text()) if doc["kind"] == "Role"
        for rule in doc["rules"]]

    def verbs(group, resource):
        return {verb for rule in rules if group in rule["apiGroups"]
                and resource in rule["resources"] for verb in rule["verbs"]}

    assert {"create", "patch", "delete"} <= verbs("networking.k8s.io", "networkpolicies")
    assert "get" in verbs("", "pods")
    assert {"create", "get", "delete"} <= verbs("kubeflow.org", "tfjobs")


def test_the_policy_exists_before_the_job_and_goes_with_it():
    """Created before the TFJob (its pods are covered from the start), then owned by it, so
    the garbage collector deletes it with the job."""
    seen = []
    api = FakeTrainingOperator([{}, {("worker", 0): 0}])
    api.on_create = lambda fake: seen.append(set(fake.policies))
    assert _run(api).startswith("Succeeded")
    assert seen == [{"trainer-x-peers"}]
    [policy] = api.policies.values()
    assert policy["metadata"]["ownerReferences"] == [
        {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "trainer-x",
         "uid": api.jobs["trainer-x"]["metadata"]["uid"]}]
    api._remove("trainer-x")  # the job goes (its TTL): the policy goes with it
    assert api.policies == {}


def test_a_retried_step_s_new_job_owns_a_policy():
    """The earlier attempt's Failed job took its policy with it when deleted; the new job gets
    one of its own (and a job adopted while running gets its policy handed over)."""
    from pipeline.kubeflow.training_job.manifest import network_policy

    api = FakeTrainingOperator([{}, {("worker", 0): 0}])
    api.earlier_attempt(two_workers(), "Failed")
    old_uid = api.jobs["trainer-x"]["metadata"]["uid"]
    api.policies["trainer-x-peers"] = network_policy(two_workers(), old_uid)
    assert _run(api).startswith("Succeeded")
    [policy] = api.policies.values()
    assert policy["metadata"]["ownerReferences"][0]["uid"] == api.jobs["trainer-x"][
        "metadata"]["uid"] != old_uid

    running = FakeTrainingOperator([{("worker", 0): 0}])
    running.earlier_attempt(two_workers(), None)  # its step died before owning the policy
    running.policies["trainer-x-peers"] = network_policy(two_workers())
    assert _run(running).startswith("Succeeded")
    assert running.policies["trainer-x-peers"]["metadata"]["ownerReferences"][0]["uid"] == \
        running.jobs["trainer-x"]["metadata"]["uid"]


# --- the step's pod owns the TFJob ---------------------------------------------------------

def _executor_run(tmp_path, monkeypatch, api, env):
    from pipeline.kubeflow.training_job import executor, identity
    from pipeline.kubeflow.training_job.executor import TrainingJobExecutor

    _, props = _props(tmp_path, **{"kubeflow.service_account": "trainer"})
    inputs, outputs = _trainer_artifacts(tmp_path)
    monkeypatch.setattr(executor, "_kubernetes_apis", lambda: (api, api, api))
    monkeypatch.setattr(identity, "pod_namespace", lambda: "ml")
    for key in ("KFP_POD_NAME", "KFP_POD_UID", "HOSTNAME"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    TrainingJobExecutor().Do(inputs, outputs, props)
    [manifest] = api.created
    assert manifest["metadata"]["name"] + "-peers" in api.policies
    return manifest["metadata"].get("ownerReferences")


def test_the_created_tfjob_is_owned_by_the_step_s_pod(tmp_path, monkeypatch):
    """KFP's executor pods carry KFP_POD_NAME/KFP_POD_UID (downward API); without them the
    name is HOSTNAME and the uid is read from the API."""
    api = ChiefWrites(tmp_path / "model")
    owner = _executor_run(tmp_path, monkeypatch, api, {
        "KFP_POD_NAME": "demo-trainer-abc", "KFP_POD_UID": "pod-uid-1", "HOSTNAME": "x"})
    assert owner == [{"apiVersion": "v1", "kind": "Pod", "name": "demo-trainer-abc",
                      "uid": "pod-uid-1"}]

    (tmp_path / "by-hostname").mkdir()
    api = ChiefWrites(tmp_path / "by-hostname" / "model")
    api.step_pods["demo-trainer-def"] = {"metadata": {"name": "demo-trainer-def",
                                                      "uid": "pod-uid-2"}}
    owner = _executor_run(tmp_path / "by-hostname", monkeypatch, api,
                          {"HOSTNAME": "demo-trainer-def"})
    assert owner == [{"apiVersion": "v1", "kind": "Pod", "name": "demo-trainer-def",
                      "uid": "pod-uid-2"}]


def _step_owner(api, environ, own_namespace="ml"):
    from pipeline.kubeflow.training_job.identity import step_pod_owner

    return step_pod_owner(api, "ml", environ, own_namespace=own_namespace)


def test_an_unreadable_step_pod_is_logged_and_the_job_runs_unowned(tmp_path, monkeypatch,
                                                                    caplog):
    from tests.kubeflow.fake_training_operator import api_error

    api = ChiefWrites(tmp_path / "model")
    api.pod_read_error = api_error(403, "Forbidden")
    with caplog.at_level(logging.WARNING):
        assert _executor_run(tmp_path, monkeypatch, api, {"HOSTNAME": "demo-trainer"}) is None
    assert "could not read the step's pod ml/demo-trainer (403 Forbidden)" in caplog.text
    assert _step_owner(FakeTrainingOperator(), {"HOSTNAME": "gone"}) is None  # 404
    # An owner in another namespace would have the garbage collector delete the job at once.
    assert _step_owner(api, {"KFP_POD_NAME": "p", "KFP_POD_UID": "u"}, "kubeflow") is None
    assert _step_owner(api, {}) is None


# --- SIGTERM deletes the job ---------------------------------------------------------------

@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_terminated_step_deletes_its_job_and_policy_and_exits_as_killed(signum):
    """The waiting loop (on the main thread, as the step runs it) gets the signal from another
    thread, as from the kubelet: it deletes the TFJob and its NetworkPolicy, exits 128 +
    signal (143 for SIGTERM), and the handlers in place before are back."""
    from pipeline.kubeflow.training_job.watch import run_tfjob

    assert threading.current_thread() is threading.main_thread()
    received = []

    def before(number, frame):  # stands for the process's own handler; also keeps a broken
        received.append(number)  # run_tfjob from killing the test run

    previous = {s: signal.signal(s, before) for s in (signal.SIGTERM, signal.SIGINT)}
    api, polled = FakeTrainingOperator(), threading.Event()
    list_pods = api.list_namespaced_pod

    def list_and_tell(*args, **kwargs):
        polled.set()
        return list_pods(*args, **kwargs)

    api.list_namespaced_pod = list_and_tell

    def kill():
        if polled.wait(5):
            os.kill(os.getpid(), signum)

    sender = threading.Thread(target=kill, daemon=True)
    try:
        sender.start()
        started = time.monotonic()
        with pytest.raises(SystemExit) as stop:
            run_tfjob(api, api, two_workers(), timeout_s=5, max_restarts=3, poll_s=0.02,
                            networking_api=api)
        assert time.monotonic() - started < 5
        sender.join(5)
        assert stop.value.code == 128 + signum and (signum != signal.SIGTERM
                                                    or stop.value.code == 143)
        assert api.deleted == ["trainer-x"] and api.policies_deleted == ["trainer-x-peers"]
        assert api.jobs["trainer-x"]["metadata"]["deletionTimestamp"]  # foreground: pods first
        assert received == []  # run_tfjob's handler had it, not the one before
        assert signal.getsignal(signal.SIGTERM) is before
        assert signal.getsignal(signal.SIGINT) is before
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
