"""A Kubernetes API with the Training Operator v1.8.1 behind it, for the TFJob tests.

It answers the calls pipeline/kubeflow/training_job/kube_api.py makes (CustomObjectsApi for tfjobs,
CoreV1Api.list_namespaced_pod and read_namespaced_pod, NetworkingV1Api for the job's
NetworkPolicy) as the API server and the operator would, each behaviour
beside the kubeflow/training-operator v1.8.1 file it mirrors. A test scripts what the
replicas do (exit codes, per poll) and what the API does (transient errors); the operator
reacts. Every TFJob created here is first validated as the API server and the operator's
admission webhook would (`validate_tfjob`).
"""
from __future__ import annotations

import copy
import functools
import itertools
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Optional

from tests.helpers import load_yaml

SCHEMA = Path(__file__).parent / "fixtures" / "tfjob_crd_v1.8.1_schema.yaml"
_uids = itertools.count(1)


@functools.lru_cache(maxsize=1)
def _validator():
    import jsonschema

    schema = load_yaml(SCHEMA.read_text())
    return jsonschema.Draft7Validator(_strict(schema))


def _strict(node):
    """Unknown fields are errors. The API server prunes them silently under its default
    fieldValidation (Warn; k8s.io/apiextensions-apiserver pruning), so a misspelt field would
    be lost without a word: here it fails instead, as under fieldValidation=Strict."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _strict(value) for key, value in node.items()}
    if ("properties" in node and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        node["additionalProperties"] = False
    return node


def validate_tfjob(body: dict) -> List[str]:
    """Why the API server or the operator's webhook would refuse this TFJob ([] if neither)."""
    errors = [f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
              for e in _validator().iter_errors(body)]
    # The admission webhook (pkg/webhooks/tensorflow/tfjob_webhook.go, validateTFJob).
    name = (body.get("metadata") or {}).get("name", "")
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) or len(name) > 63:
        errors.append(f"metadata.name: {name!r} is not a DNS-1035 label")
    specs = (body.get("spec") or {}).get("tfReplicaSpecs")
    if not specs:
        errors.append("spec.tfReplicaSpecs: must be required")
    for rtype, spec in (specs or {}).items():
        containers = (((spec or {}).get("template") or {}).get("spec") or {}).get("containers")
        if not containers:
            errors.append(f"spec.tfReplicaSpecs[{rtype}]: containers must be specified")
        elif not any(c.get("name") == "tensorflow" for c in containers):
            errors.append(f"spec.tfReplicaSpecs[{rtype}]: must have at least one container "
                          "with name tensorflow")
        elif not all(c.get("image") for c in containers):
            errors.append(f"spec.tfReplicaSpecs[{rtype}]: image must be required")
    if sum(1 for rtype in specs or {} if rtype in ("Chief", "Master")) > 1:
        errors.append("spec.tfReplicaSpecs: must not have more than 1 Chief or Master role")
    return errors


def is_distributed(body: dict) -> bool:
    """pkg/controller.v1/tensorflow/util.go isDistributed: more than one replica in all."""
    return sum(int(spec.get("replicas", 1)) for spec in body["spec"]["tfReplicaSpecs"]
               .values()) != 1


def tf_config(body: dict, rtype: str, index: int) -> Optional[str]:
    """The TF_CONFIG the operator appends to the `tensorflow` container, or None when it sets
    none (tfjob_controller.go SetClusterSpec; tensorflow.go genTFConfigJSONStr/genClusterSpec)."""
    if not is_distributed(body):
        return None
    name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
    cluster = {rt.lower(): [f"{name}-{rt.lower()}-{i}.{namespace}.svc:2222"
                            for i in range(int(spec["replicas"]))]
               for rt, spec in body["spec"]["tfReplicaSpecs"].items()}
    return json.dumps({"cluster": cluster, "task": {"type": rtype.lower(), "index": index},
                       "environment": "cloud"})


def api_error(status: int, reason: str) -> Exception:
    """The Kubernetes client's ApiException, imported when raised: the client's package takes
    ~3 s to import, which collecting the tests should not pay (tests/README.md)."""
    from kubernetes.client.exceptions import ApiException

    return ApiException(status=status, reason=reason)


class FakeTrainingOperator:
    """CustomObjectsApi and CoreV1Api as the API server answers with the operator running.

    `script`: one entry per read of the TFJob after it exists: a dict of replica exits
    {("worker", 1): 137, ...} applied before the read, or an ApiException the read raises
    instead (a transient API error). Without a script entry the replicas keep running."""

    def __init__(self, script=(), create_error=None):
        self.script, self.create_error = list(script), create_error
        self.jobs: Dict[str, dict] = {}
        self.pods: Dict[str, dict] = {}
        self.created, self.deleted, self.reads = [], [], 0
        self.overlaps = 0  # creates while pods of an earlier job of that name still ran
        self._collect: List[str] = []  # owners deleted in the background: pods go next read
        self.policies: Dict[str, dict] = {}  # NetworkPolicies by name
        self.policies_deleted: List[str] = []
        self.step_pods: Dict[str, dict] = {}  # pods read_namespaced_pod finds (the step's)
        self.pod_read_error: Optional[Exception] = None
        self.on_create = None  # called after a TFJob is created (a test's hook)

    def earlier_attempt(self, body: dict, final: Optional[str]) -> None:
        """The TFJob a previous attempt of the step created, still Running or finished."""
        self._start(copy.deepcopy(body))
        if final:
            _set(self.jobs[body["metadata"]["name"]],
                 _condition(final, f"TFJob {body['metadata']['name']} {final.lower()}."))

    # What the job is and how its pods are labelled (fake_trainer.py names a TrainJob's).
    RESOURCE = ("kubeflow.org", "v1", "tfjobs")
    JOB_LABEL = "training.kubeflow.org/job-name"

    def _problems(self, body: dict) -> List[str]:
        return validate_tfjob(body)

    # --- CustomObjectsApi -------------------------------------------------------------
    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        assert (group, version, plural) == self.RESOURCE
        if self.create_error is not None:
            raise self.create_error
        problems = self._problems(body)
        if problems:  # the API server's schema check or the webhook refuse it
            raise api_error(422, "Invalid: " + "; ".join(problems))
        name = body["metadata"]["name"]
        if name in self.jobs:
            raise api_error(409, "AlreadyExists")
        if any(p["metadata"]["labels"].get(self.JOB_LABEL) == name for p in self.pods.values()):
            self.overlaps += 1
        self.created.append(copy.deepcopy(body))
        self._start(copy.deepcopy(body))
        if self.on_create:
            self.on_create(self)
        return body

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        self.reads += 1
        for gone in self._collect:
            self._remove_pods(gone)
        self._collect = []
        job = self.jobs.get(name)
        if job is not None and job["metadata"].get("deletionTimestamp"):
            # Foreground deletion: the garbage collector removes the pods, then the job.
            self._remove(name)
            job = None
        if job is None:
            raise api_error(404, "NotFound")
        if self.script and not self._is_finished(job):
            step = self.script.pop(0)
            if isinstance(step, Exception):
                raise step
            for (rtype, index), code in step.items():
                self._exit(job, rtype, index, code)
        return copy.deepcopy(job)

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name,
                                        propagation_policy=None):
        if name not in self.jobs:
            raise api_error(404, "NotFound")
        self.deleted.append(name)
        if propagation_policy == "Foreground":  # the job stays until its pods are gone
            self.jobs[name]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        else:  # Background (the default for custom resources): the job goes, pods linger
            self._collect.append(self.jobs.pop(name)["metadata"]["uid"])

    def _is_finished(self, job: dict) -> bool:
        return _finished(job)

    # --- CoreV1Api --------------------------------------------------------------------
    def list_namespaced_pod(self, namespace, label_selector, _preload_content=True):
        key, _, value = label_selector.partition("=")
        assert key == self.JOB_LABEL and not _preload_content
        items = [p for p in self.pods.values() if p["metadata"]["labels"].get(key) == value]
        return SimpleNamespace(data=json.dumps({"kind": "PodList", "items": items}).encode())

    def read_namespaced_pod(self, name, namespace, _preload_content=True):
        assert not _preload_content
        if self.pod_read_error is not None:
            raise self.pod_read_error
        if name not in self.step_pods:
            raise api_error(404, "NotFound")
        return SimpleNamespace(data=json.dumps(self.step_pods[name]).encode())

    # --- NetworkingV1Api --------------------------------------------------------------
    def create_namespaced_network_policy(self, namespace, body):
        name = body["metadata"]["name"]
        if name in self.policies:
            raise api_error(409, "AlreadyExists")
        self.policies[name] = copy.deepcopy(body)
        return body

    def patch_namespaced_network_policy(self, name, namespace, body):
        """A JSON patch (a list): the executor's one `add` of /metadata/ownerReferences."""
        if name not in self.policies:
            raise api_error(404, "NotFound")
        assert isinstance(body, list)
        for op in body:
            assert op["op"] == "add" and op["path"] == "/metadata/ownerReferences"
            self.policies[name]["metadata"]["ownerReferences"] = copy.deepcopy(op["value"])
        return self.policies[name]

    def delete_namespaced_network_policy(self, name, namespace):
        if name not in self.policies:
            raise api_error(404, "NotFound")
        self.policies_deleted.append(name)
        del self.policies[name]

    # --- the operator -----------------------------------------------------------------
    def _start(self, body: dict) -> None:
        name = body["metadata"]["name"]
        body["metadata"]["uid"] = f"uid-{next(_uids)}"
        # onOwnerCreateFunc sets Created (tfjob_controller.go); pods come up Running.
        body["status"] = {"conditions": [_condition("Created", f"TFJob {name} is created.")]}
        self.jobs[name] = body
        for rtype, spec in body["spec"]["tfReplicaSpecs"].items():
            for index in range(int(spec["replicas"])):
                self._new_pod(body, rtype.lower(), index)
        _set(body, _condition("Running", f"TFJob {body['metadata']['namespace']}/{name} is "
                                         "running."))

    def _new_pod(self, body: dict, rt: str, index: int) -> None:
        # pod.go createNewPod: name <job>-<type>-<index>, the job's labels plus type/index.
        name = body["metadata"]["name"]
        rtype = next(k for k in body["spec"]["tfReplicaSpecs"] if k.lower() == rt)
        template = body["spec"]["tfReplicaSpecs"][rtype]["template"]
        env = list(template["spec"]["containers"][0].get("env") or [])
        config = tf_config(body, rtype, index)
        if config is not None:
            env.append({"name": "TF_CONFIG", "value": config})
        self.pods[f"{name}-{rt}-{index}"] = {
            "metadata": {"name": f"{name}-{rt}-{index}", "uid": f"uid-{next(_uids)}",
                         # The garbage collector deletes pods with their owner.
                         "ownerReferences": [{"kind": "TFJob", "name": name,
                                              "uid": body["metadata"]["uid"]}],
                         "labels": {**template["metadata"].get("labels", {}),
                                    "training.kubeflow.org/job-name": name,
                                    "training.kubeflow.org/operator-name": "tfjob-controller",
                                    "training.kubeflow.org/replica-type": rt,
                                    "training.kubeflow.org/replica-index": str(index)}},
            "spec": {"serviceAccountName": template["spec"].get("serviceAccountName",
                                                                "default"),
                     "env": env},
            "status": {"phase": "Running"}}

    def _exit(self, job: dict, rt: str, index: int, code: int) -> None:
        """A replica's container ends with `code` (ReconcilePods, pkg/controller.v1/common/
        pod.go; UpdateJobStatus, tfjob_controller.go)."""
        name = job["metadata"]["name"]
        pod = self.pods[f"{name}-{rt}-{index}"]
        pod["status"] = {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": [
            {"name": "tensorflow", "state": {"terminated": {
                "exitCode": code, "reason": "OOMKilled" if code == 137 else "Error"}}}]}
        rtype = next(k for k in job["spec"]["tfReplicaSpecs"] if k.lower() == rt)
        chief = "Chief" in job["spec"]["tfReplicaSpecs"]
        if code == 0:
            if (rt == "chief") or (not chief and rt == "worker" and index == 0):
                _set(job, _condition("Succeeded", f"TFJob {name} successfully completed."))
            return
        if code >= 128:  # train_util.go IsRetryableExitCode: delete and recreate the pod
            del self.pods[f"{name}-{rt}-{index}"]
            self._new_pod(job, rt, index)
            _set(job, _condition("Restarting", f"job {name} is restarting because {rtype} "
                                               "replica(s) failed."))
        else:  # non-retryable under ExitCode: the job fails (v1.8.0+, #2071)
            _set(job, _condition("Failed", f"job \"{name}\" is failing because \"{rtype}\" "
                                           "replica(s) failed."))

    def _remove(self, name: str) -> None:
        self._remove_pods(self.jobs.pop(name)["metadata"]["uid"])

    def _remove_pods(self, owner_uid: str) -> None:
        """The garbage collector: the pods and the NetworkPolicy the job owned."""
        for pod in [p for p, v in self.pods.items()
                    if v["metadata"]["ownerReferences"][0]["uid"] == owner_uid]:
            del self.pods[pod]
        for name in [n for n, v in self.policies.items()
                     if any(o["uid"] == owner_uid
                            for o in v["metadata"].get("ownerReferences") or [])]:
            del self.policies[name]


def _condition(kind: str, message: str) -> dict:
    return {"type": kind, "status": "True", "reason": f"TFJob{kind}", "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z"}


def _finished(job: dict) -> bool:
    return any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True"
               for c in job["status"]["conditions"])


def _set(job: dict, condition: dict) -> None:
    """pkg/util/status.go setCondition: nothing after Failed; Running and Restarting replace
    each other (filterOutCondition); Succeeded/Failed turn Running False."""
    conditions = job["status"]["conditions"]
    if any(c["type"] == "Failed" and c["status"] == "True" for c in conditions):
        return
    kind, kept = condition["type"], []
    for c in conditions:
        if c["type"] == kind or {c["type"], kind} == {"Running", "Restarting"}:
            continue
        if kind in ("Succeeded", "Failed") and c["type"] == "Running":
            c = {**c, "status": "False"}
        kept.append(c)
    job["status"]["conditions"] = kept + [condition]
