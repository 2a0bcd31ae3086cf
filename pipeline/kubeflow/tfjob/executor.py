"""Multi-worker training on Kubeflow: the Trainer step runs as a Kubeflow Trainer v2 TrainJob
(trainjob.py, `training.operator: trainjob`, the default) or a Training Operator v1 TFJob (the
legacy path, `training.operator: tfjob`). Both go through the same launch, wait, policy,
ownership and clean-up code here; `JobKind` holds what differs.

`TFJobTrainerExecutor` is the Trainer's executor for multi_worker_mirrored and parameter_server
on Kubeflow. It creates a TFJob (kubeflow.org/v1, Training Operator v1.8.1) whose replicas run
the pipeline's image with `python -m pipeline.kubeflow.tfjob.worker`, handing them the URIs of the
Trainer's inputs and outputs and the Trainer's own exec-properties, waits for it, and returns:
the chief has written the SavedModel into the Trainer's model artifact, which the Evaluator and
Pusher then pick up as usual. The replicas run as the step's own service account.

TensorFlow's gRPC server (port 2222) has no authentication, so each job comes with a
NetworkPolicy (`network_policy`) that lets only the same job's pods in, on that port; the
replicas run without a Kubernetes API token, as a non-root user with no capabilities and a
read-only root file system. The TFJob is owned by the step's pod, and the step deletes it (and
its policy) when it is terminated (SIGTERM/SIGINT), so a cancelled run leaves no replicas.

Behaviours of the operator this module relies on or works around are named beside the code,
with the training-operator v1.8.1 file they come from. `tfjob_manifest` is the pure part
(tests, pipeline/kubeflow/tfjob/render.py); `run_tfjob` launches and waits.
"""
from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import signal
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional

from tfx.components.trainer.executor import GenericExecutor
from tfx.types import artifact_utils
from tfx.utils import path_utils

from pipeline.kubeflow.tfjob.kinds import (  # noqa: F401  (re-exported for callers)
    CONTAINER, ENTRY, GROUP, JOB_NAME_LABEL, JOBSET_NAME_LABEL, KINDS, OPERATOR_NAME,
    OPERATOR_NAME_LABEL, PLURAL, PORT, REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL,
    REPLICATED_JOB_LABEL, RESTART_ATTEMPT_LABEL, RUN_AS_USER, TFJOB, TMP_DIR, TRAINER_NODE,
    TRAINJOB, VERSION, JobKind, kind_of)
from pipeline.kubeflow.tfjob.kinds import checked_env as _checked_env

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# API answers worth another try (overload, a restarting API server, a dropped connection).
TRANSIENT_STATUS = {0, 429, 500, 502, 503, 504}
API_ATTEMPTS = 6


class TFJobError(RuntimeError):
    """The training job (TFJob or TrainJob) failed, timed out, or could not be created or
    watched."""


def job_name(model_uri: str) -> str:
    """Stable per Trainer execution (its model artifact URI), short enough for pod names; a
    DNS-1035 label, as the operator's webhook requires (pkg/webhooks/tensorflow/
    tfjob_webhook.go).

    A retried step keeps its model URI, so it finds its job: KFP puts the retry strategy on the
    executor's pod template, not the driver's (backend/src/v2/compiler/argocompiler/
    container.go), and only the driver makes output URIs (driver.go provisionOutputs; since
    2.5.0 with a random salt per driver run). A new run gets new URIs and a new job."""
    return "trainer-" + hashlib.sha256(model_uri.encode()).hexdigest()[:12]


def worker_args(exec_properties: Mapping[str, Any], examples: str, transform_graph: str,
                model: str, model_run: str) -> List[str]:
    return ["--exec-properties", json.dumps(dict(exec_properties), sort_keys=True, default=str),
            "--examples", examples, "--transform-graph", transform_graph, "--model", model,
            "--model-run", model_run]


def tfjob_manifest(name: str, namespace: str, image: str, strategy: str, tfjob: Mapping,
                   args: List[str], service_account: Optional[str] = None,
                   labels: Optional[Mapping[str, str]] = None,
                   env: Iterable[Mapping] = (), owner: Optional[Mapping] = None) -> dict:
    """The TFJob: Workers (and, for parameter_server, a Chief and PS replicas), all running
    the same image and entry point; the Training Operator gives each its TF_CONFIG.

    `env`: Kubernetes EnvVar dicts (e.g. secretKeyRef entries for S3 credentials) added to
    every replica's container. `owner`: an ownerReference (the step's pod, `step_pod_owner`):
    the garbage collector deletes the job when that pod is deleted."""
    if strategy not in ("multi_worker_mirrored", "parameter_server"):
        raise ValueError(f"a TFJob is for multi-worker strategies, not '{strategy}'")
    workers = int(tfjob["workers"])
    if strategy == "multi_worker_mirrored" and workers < 2:
        # isDistributed counts the replicas of every type; with one, SetClusterSpec sets no
        # TF_CONFIG (pkg/controller.v1/tensorflow/util.go, tfjob_controller.go). parameter_server
        # always has a Chief, a Worker and a PS, so it is always distributed.
        raise ValueError("multi_worker_mirrored needs at least 2 workers: the Training Operator "
                         "sets no TF_CONFIG in a one-replica TFJob")
    cpu_memory = {"cpu": str(tfjob["cpu"]), "memory": str(tfjob["memory"])}
    extra_env = _checked_env(env)

    def replica(count: int, gpus: int = 0) -> dict:
        limits = {**cpu_memory, **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
        # Hardened (the Pod Security Standards' "restricted" profile): the worker needs no
        # Kubernetes API (no token), and writes locally only under /tmp (an emptyDir): the
        # non-chief workers' scratch export (components/trainer/distribution.py mkdtemp) and
        # Keras' ~/.keras fallback; the model and logs go to the artifact URIs.
        pod: Dict[str, Any] = {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS_USER,
                                "runAsGroup": RUN_AS_USER,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [{"name": "tmp", "emptyDir": {}}],
            "containers": [{
                "name": CONTAINER, "image": image, "command": ENTRY, "args": list(args),
                "ports": [{"name": "tfjob-port", "containerPort": PORT}],
                "resources": {"requests": dict(limits), "limits": limits},
                "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}, *extra_env],
                "volumeMounts": [{"name": "tmp", "mountPath": TMP_DIR}],
                "securityContext": {"allowPrivilegeEscalation": False, "privileged": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}}}]}
        if service_account:
            pod["serviceAccountName"] = service_account
        # ExitCode (pkg/controller.v1/common/pod.go ReconcilePods, pkg/util/train/train_util.go):
        # exit 1-127 (a setup error, exit 2) fails the job at once (v1.8.0+, #2071) and keeps
        # the failed pod's logs; 128+ (killed: 137 from the startup deadline, OOM, a node lost)
        # deletes and recreates the pod. Those recreations are bounded by run_tfjob, not by
        # backoffLimit (see _Restarts).
        return {"replicas": count, "restartPolicy": "ExitCode", "template": {
            # Istio's sidecar would keep a finished replica's pod Running, so worker 0 never
            # reaches Succeeded on multi-user Kubeflow; the operator's SDK turns it off too
            # (sdk/python/kubeflow/training/utils/utils.py, constants.ISTIO_SIDECAR_INJECTION).
            "metadata": {"labels": dict(labels or {}),
                         "annotations": {"sidecar.istio.io/inject": "false"}},
            "spec": pod}}

    specs = {"Worker": replica(workers, int(tfjob.get("gpus_per_worker", 0)))}
    if strategy == "parameter_server":
        specs = {"Chief": replica(1), **specs, "PS": replica(int(tfjob["parameter_servers"]))}
    metadata: Dict[str, Any] = {"name": name, "namespace": namespace,
                                "labels": dict(labels or {})}
    if owner:
        metadata["ownerReferences"] = [dict(owner)]
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TFJob", "metadata": metadata,
        "spec": {
            # Done when the chief (worker 0 without a Chief replica) succeeds; parameter-server
            # workers and PS tasks serve until then and are deleted with cleanPodPolicy.
            # backoffLimit: v1.8.1 counts container restarts only (pkg/core/job.go
            # PastBackoffLimit), which ExitCode's recreated pods never have; set for operators
            # that count them, enforced by run_tfjob.
            "runPolicy": {"cleanPodPolicy": "Running",
                          "backoffLimit": int(tfjob.get("max_restarts", 3)),
                          "activeDeadlineSeconds": int(tfjob["timeout_s"]),
                          "ttlSecondsAfterFinished": 3600},
            "tfReplicaSpecs": specs}}


def policy_name(job: str) -> str:
    return f"{job}-peers"


def job_pod_labels(job: str) -> Dict[str, str]:
    """Labels the operator puts on every replica pod of `job`, and only on those (pod.go
    createNewPod; the keys: pkg/apis/kubeflow.org/v1/common_types.go JobNameLabel,
    OperatorNameLabel)."""
    return {JOB_NAME_LABEL: job, OPERATOR_NAME_LABEL: OPERATOR_NAME}


def all_peer_ports(training: Mapping) -> bool:
    """NCCL between hosts connects on ports of its own choosing (not TensorFlow's 2222): with
    GPUs and collective_implementation nccl (or auto, which picks NCCL on GPUs) the job's pods
    may reach each other on any TCP port; everyone else still on none."""
    gpus = int((training.get("tfjob") or {}).get("gpus_per_worker", 0) or 0)
    return gpus > 0 and training.get("collective_implementation", "auto") in ("nccl", "auto")


def network_policy(manifest: Mapping, job_uid: Optional[str] = None,
                   any_port: bool = False) -> dict:
    """The NetworkPolicy of a TFJob: its replica pods accept connections only from pods of the
    same job, and only on TensorFlow's port (any TCP port with `any_port`, for NCCL); nothing
    else gets in (TensorFlow's gRPC server runs any graph op it is sent, unauthenticated).
    Egress is left alone (the replicas read and write the artifact store). Owned by the TFJob
    (`job_uid`), so the garbage collector deletes it with the job."""
    name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    kind = kind_of(manifest)
    peers = kind.peer_labels(name)
    ingress: Dict[str, Any] = {"from": [{"podSelector": {"matchLabels": dict(peers)}}]}
    ingress["ports"] = [{"protocol": "TCP"}] if any_port else [
        {"protocol": "TCP", "port": PORT}]
    metadata: Dict[str, Any] = {"name": policy_name(name), "namespace": namespace,
                                "labels": dict(manifest["metadata"].get("labels") or {})}
    if job_uid:
        metadata["ownerReferences"] = [_job_owner(name, job_uid, kind)]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": metadata,
            "spec": {"podSelector": {"matchLabels": dict(peers)}, "policyTypes": ["Ingress"],
                     "ingress": [ingress]}}


def _job_owner(name: str, uid: str, kind: JobKind = TFJOB) -> dict:
    # No blockOwnerDeletion: setting it needs update on the owner's finalizers
    # (OwnerReferencesPermissionEnforcement), which the step's RBAC does not grant.
    return {"apiVersion": f"{kind.group}/{kind.version}", "kind": kind.kind, "name": name,
            "uid": uid}


def _conditions(job: Mapping) -> Dict[str, dict]:
    return {c.get("type"): c for c in (job.get("status") or {}).get("conditions") or []
            if c.get("status") == "True"}


def _finished(job: Mapping, success: str = "Succeeded") -> Optional[str]:
    """'Succeeded: ...' (a TrainJob's: 'Complete: ...') or 'Failed: ...' once the job has either
    condition (training-operator pkg/util/status.go: a Failed job takes no further condition;
    Trainer v2 pkg/runtime/framework/plugins/jobset/jobset.go Status: from the JobSet's)."""
    conditions = _conditions(job)
    for kind in ("Failed", success):
        if kind in conditions:
            message = conditions[kind].get("message")
            return kind + (f": {message}" if message else "")
    return None


class _Restarts:
    """Counts the replica pods the operator replaced after a retryable exit.

    Under ExitCode the operator deletes a failed pod and creates another of the same name
    (pkg/controller.v1/common/pod.go ReconcilePods); nothing in the TFJob's status accumulates
    them (replicaStatuses counts current pods), and backoffLimit does not see them
    (kubeflow/trainer#2045). Each pod has its own UID, so a slot (replica type and index)
    showing a new UID, or a pod seen Failed with an exit the operator retries, is one restart.
    A pod that lived and was replaced between two polls is counted when its successor is seen.
    A pod that failed for good (exit 1-127) is not: the job's Failed condition reports it."""

    def __init__(self) -> None:
        self.current: Dict[tuple, str] = {}
        self.failed: Dict[str, str] = {}  # uid -> "worker-1 exit 137 (OOMKilled)"

    def update(self, pods: Iterable[Mapping]) -> int:
        for pod in pods:
            meta = pod.get("metadata") or {}
            labels, uid = meta.get("labels") or {}, meta.get("uid")
            slot = (labels.get(REPLICA_TYPE_LABEL), labels.get(REPLICA_INDEX_LABEL))
            previous = self.current.get(slot)
            if previous and previous != uid:
                self.failed.setdefault(previous, f"{slot[0]}-{slot[1]} replaced")
            self.current[slot] = uid
            code = _exit_code(pod)
            # Retried: exit 128+, or no exit code at all (the operator's 0xbeef; evicted).
            if (pod.get("status") or {}).get("phase") == "Failed" and (
                    code is None or code >= 128):
                self.failed[uid] = f"{slot[0]}-{slot[1]} {_exit(pod)}"
        return len(self.failed)

    def describe(self) -> str:
        return "; ".join(list(self.failed.values())[-5:])


class _JobSetRestarts:
    """Counts a TrainJob's restarts: JobSet recreates all its Jobs after a failure its
    failurePolicy retries (RestartJobSet, up to the runtime's maxRestarts) and labels every
    new pod with the attempt (jobset.sigs.k8s.io/restart-attempt = status.restarts: JobSet
    v0.12.0 jobset_controller.go labelAndAnnotateObject). The highest attempt seen is the count;
    the failed pods seen are the reasons. The runtime's maxRestarts bounds them too; this holds
    the step to training.tfjob.max_restarts whatever the runtime says."""

    def __init__(self) -> None:
        self.attempt = 0
        self.failed: Dict[str, str] = {}

    def update(self, pods: Iterable[Mapping]) -> int:
        for pod in pods:
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            try:
                self.attempt = max(self.attempt, int(labels.get(RESTART_ATTEMPT_LABEL, 0)))
            except ValueError:
                pass
            if (pod.get("status") or {}).get("phase") == "Failed":
                self.failed[meta.get("uid")] = f"{meta.get('name')} {_exit(pod)}"
        return self.attempt

    def describe(self) -> str:
        return "; ".join(list(self.failed.values())[-5:]) or "pods replaced"


def _terminated(pod: Mapping) -> Optional[dict]:
    """The training container's end, which the operator judges the pod by (the TFJob's
    `tensorflow`: pod.go; the TrainJob's `node`: its Job's podFailurePolicy)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") in (CONTAINER, TRAINER_NODE) and (
                status.get("state") or {}).get("terminated"):
            return status["state"]["terminated"]
    return None


def _exit_code(pod: Mapping) -> Optional[int]:
    code = (_terminated(pod) or {}).get("exitCode")
    return int(code) if code is not None else None


def _exit(pod: Mapping) -> str:
    terminated = _terminated(pod)
    if not terminated:
        return "failed"
    reason = terminated.get("reason")
    return f"exit {terminated.get('exitCode')}" + (f" ({reason})" if reason else "")


class _Api:
    """The calls run_tfjob makes, each retried on transient errors with bounded backoff."""

    def __init__(self, custom, core, name: str, namespace: str,
                 sleep: Callable[[float], None], networking=None, kind: JobKind = TFJOB) -> None:
        self.custom, self.core, self.name, self.namespace = custom, core, name, namespace
        self.networking, self.kind = networking, kind
        self.where = dict(group=kind.group, version=kind.version, namespace=namespace,
                          plural=kind.plural)
        self.sleep = sleep

    def _call(self, what: str, call: Callable[[], Any]):
        import urllib3
        from kubernetes.client.exceptions import ApiException

        for attempt in range(1, API_ATTEMPTS + 1):
            try:
                return call()
            except ApiException as error:
                if error.status not in TRANSIENT_STATUS:
                    raise
                last = f"{error.status} {error.reason}"
            except (urllib3.exceptions.HTTPError, OSError) as error:  # no answer at all
                last = f"{type(error).__name__}: {error}"
            if attempt < API_ATTEMPTS:
                delay = min(2.0 ** attempt, 30.0)
                logging.warning("Kubernetes API: %s failed (%s); retrying in %.0fs", what, last,
                                delay)
                self.sleep(delay)
        raise TFJobError(f"the Kubernetes API kept failing to {what} {self.kind.kind} "
                         f"{self.namespace}/{self.name} ({API_ATTEMPTS} attempts over about "
                         f"a minute; last: {last}); the job may still be running: "
                         f"kubectl -n {self.namespace} get {self.kind.kind.lower()} "
                         f"{self.name}")

    def create(self, body: dict) -> None:
        self._call("create", lambda: self.custom.create_namespaced_custom_object(
            body=body, **self.where))

    def get(self) -> dict:
        return self._call("read", lambda: self.custom.get_namespaced_custom_object(
            name=self.name, **self.where))

    def delete(self) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            # Foreground: the TFJob stays (with a deletionTimestamp) until its pods are gone, so
            # "not found" means no replica of it is left running.
            self._call("delete", lambda: self.custom.delete_namespaced_custom_object(
                name=self.name, propagation_policy="Foreground", **self.where))
        except ApiException as error:
            if error.status != 404:
                raise

    def create_policy(self, body: dict) -> None:
        """Before the job: its pods are covered from the moment they exist. One already there
        (a retried step's, or one whose step died before creating the job) is kept."""
        from kubernetes.client.exceptions import ApiException

        try:
            self._call("create the NetworkPolicy of", lambda: (
                self.networking.create_namespaced_network_policy(self.namespace, body)))
        except ApiException as error:
            if error.status != 409:
                raise

    def own_policy(self, body: dict) -> None:
        """Hands the policy to the job (`body` carries its ownerReference): replaces the
        policy's owners, or creates it if it is gone (deleted with an earlier attempt's job)."""
        from kubernetes.client.exceptions import ApiException

        patch = [{"op": "add", "path": "/metadata/ownerReferences",
                  "value": body["metadata"]["ownerReferences"]}]
        try:
            self._call("set the owner of the NetworkPolicy of", lambda: (
                self.networking.patch_namespaced_network_policy(
                    body["metadata"]["name"], self.namespace, patch)))
        except ApiException as error:
            if error.status != 404:
                raise
            self._call("create the NetworkPolicy of", lambda: (
                self.networking.create_namespaced_network_policy(self.namespace, body)))

    def delete_policy(self) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self._call("delete the NetworkPolicy of", lambda: (
                self.networking.delete_namespaced_network_policy(policy_name(self.name),
                                                                 self.namespace)))
        except ApiException as error:
            if error.status != 404:
                raise

    def pods(self) -> List[dict]:
        response = self._call("list the pods of", lambda: self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{self.kind.name_label}={self.name}",
            _preload_content=False))
        return json.loads(response.data).get("items") or []


def _api_error(api: _Api, error, doing: str) -> TFJobError:
    hint = {403: f"may this service account create, get and delete {api.kind.plural}, create, "
                 "patch and delete networkpolicies and list pods? deploy/training/rbac.yaml; a "
                 "NetworkPolicy refused by name or content: deploy/training/"
                 "networkpolicy-admission.yaml",
            404: f"is {api.kind.installed} installed in this cluster? "
                 "deploy/training/README.md"}.get(error.status, "")
    return TFJobError(f"could not {doing} {api.kind.kind} {api.namespace}/{api.name}: "
                      f"{error.status} "
                      f"{error.reason}" + (f" ({hint})" if hint else ""))


class StepTerminated(BaseException):
    """SIGTERM or SIGINT reached the step while it waited (a BaseException, so no `except
    Exception` on the way swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


def _raise_terminated(signum, frame):
    raise StepTerminated(signum)


def _ignore_while_cleaning_up(signum, frame):
    logging.warning("signal %d again: still deleting the TFJob", signum)


class _Signals:
    """While installed (main thread only: Python runs handlers there), SIGTERM and SIGINT go
    to `handler`; the previous handlers come back on exit."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, handler=_raise_terminated) -> None:
        self.handler = handler

    def __enter__(self):
        self.previous = {}
        if threading.current_thread() is not threading.main_thread():
            logging.warning("run_tfjob is not on the main thread: a SIGTERM will not delete "
                            "the TFJob (its ownerReference to the step's pod still will)")
            return self
        for signum in self.SIGNALS:
            self.previous[signum] = signal.signal(signum, self.handler)
        return self

    def __exit__(self, *exc) -> None:
        for signum, previous in self.previous.items():
            signal.signal(signum, previous)


def run_tfjob(custom_api, core_api, manifest: dict, timeout_s: float, max_restarts: int,
              poll_s: float = 15.0, clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep, networking_api=None,
              any_port: bool = False) -> str:
    """Creates the TFJob (and its NetworkPolicy) and waits for Succeeded; returns that
    condition's text.

    A retried step finds its job by name: one still running is waited for, one that
    Succeeded is taken, one that Failed (kept an hour by ttlSecondsAfterFinished) is deleted,
    and only once it is gone, pods and all, created again, so two never run at once.
    `custom_api`/`core_api`/`networking_api`: kubernetes.client CustomObjectsApi/CoreV1Api/
    NetworkingV1Api (`networking_api` defaults to `core_api`, for one fake answering all).
    Raises TFJobError on failure, timeout, too many restarts (after deleting the job) or a
    failing API. On SIGTERM or SIGINT it deletes the job and its policy and exits 128 + the
    signal (143 for SIGTERM, as a killed step), restoring the previous handlers first."""
    api = _Api(custom_api, core_api, manifest["metadata"]["name"],
               manifest["metadata"]["namespace"], sleep,
               networking_api if networking_api is not None else core_api, kind_of(manifest))
    try:
        with _Signals():
            return _run(api, manifest, timeout_s, max_restarts, poll_s, clock, sleep, any_port)
    except StepTerminated as stop:
        logging.warning("signal %d: deleting %s %s/%s and its NetworkPolicy before exiting",
                        stop.signum, api.kind.kind, api.namespace, api.name)
        with _Signals(_ignore_while_cleaning_up):  # a second signal must not cut it short
            _delete_all(api)
        raise SystemExit(128 + stop.signum) from None


def _delete_all(api: _Api) -> None:
    for what, delete in ((api.kind.kind, api.delete), ("NetworkPolicy", api.delete_policy)):
        try:
            delete()
        except Exception as error:  # noqa: BLE001  (clean up what can be, report the rest)
            logging.error("could not delete the %s of %s/%s: %s", what, api.namespace,
                          api.name, error)


def _run(api: _Api, manifest: dict, timeout_s: float, max_restarts: int, poll_s: float,
         clock, sleep, any_port: bool) -> str:
    from kubernetes.client.exceptions import ApiException

    kind = api.kind.kind
    where = f"{kind} {api.namespace}/{api.name}"
    logs = (f"kubectl -n {api.namespace} logs -l {api.kind.name_label}={api.name} --prefix; "
            f"kubectl -n {api.namespace} describe {kind.lower()} {api.name}")
    deadline = clock() + timeout_s
    restarts = _Restarts() if api.kind is TFJOB else _JobSetRestarts()
    try:
        job = _create_or_adopt(api, manifest, deadline, clock, sleep, poll_s, any_port)
        api.own_policy(network_policy(manifest, job["metadata"]["uid"], any_port))
        while True:
            state = _finished(job, api.kind.success)
            if state and state.startswith(api.kind.success):
                return state
            if state:
                raise TFJobError(f"{where} {state} ({logs})")
            count = restarts.update(api.pods())
            if count > max_restarts:
                api.delete()
                raise TFJobError(
                    f"{where}: its replicas failed {count} times, more than "
                    f"training.tfjob.max_restarts ({max_restarts}): {restarts.describe()}. "
                    f"Deleted it (the operator would restart them until the deadline). "
                    f"Logs of the last attempt: {logs}")
            if clock() >= deadline:
                api.delete()
                raise TFJobError(f"{where} did not finish within {timeout_s:.0f}s "
                                 "(training.tfjob.timeout_s); deleted it")
            sleep(poll_s)
            job = api.get()
    except ApiException as error:
        if error.status == 404:
            raise TFJobError(f"{where} disappeared while the step waited for it (deleted "
                             "by someone else?); the step fails so a retry starts it again"
                             ) from None
        raise _api_error(api, error, "create or watch") from None


def _create_or_adopt(api: _Api, manifest: dict, deadline: float, clock, sleep,
                     poll_s: float, any_port: bool = False) -> dict:
    """The job to wait for: the one created here, or a retried step's earlier one."""
    from kubernetes.client.exceptions import ApiException

    while True:
        try:
            api.create_policy(network_policy(manifest, any_port=any_port))
            api.create(manifest)
            logging.info("created %s %s/%s", api.kind.kind, api.namespace, api.name)
            return api.get()
        except ApiException as error:
            if error.status != 409:
                raise _api_error(api, error, "create") from None
        try:
            job = api.get()
        except ApiException as error:
            if error.status == 404:  # deleted between our create and get: create again
                continue
            raise
        state = _finished(job, api.kind.success)
        deleting = (job.get("metadata") or {}).get("deletionTimestamp")
        if not deleting and (state is None or state.startswith(api.kind.success)):
            logging.info("%s %s/%s exists (a retried step): %s", api.kind.kind, api.namespace,
                         api.name, state or "waiting for it")
            return job
        if not deleting:
            logging.info("%s %s/%s from an earlier attempt %s: deleting it to start again",
                         api.kind.kind, api.namespace, api.name, state)
            api.delete()
        if clock() >= deadline:
            raise TFJobError(f"{api.kind.kind} {api.namespace}/{api.name} from an earlier "
                             "attempt was still being deleted at training.tfjob.timeout_s")
        sleep(poll_s)


def service_account_from_token(token: str) -> str:
    """The service account a pod's token belongs to, from its claims (no API call, no RBAC).

    Kubernetes writes `sub: system:serviceaccount:<namespace>:<name>` into both bound and
    legacy tokens, and the bound ones also `kubernetes.io.serviceaccount.name`
    (kubernetes pkg/serviceaccount/claims.go and legacy.go; MakeUsername in
    k8s.io/apiserver/pkg/authentication/serviceaccount/util.go). The signature is not
    checked: the token is the pod's own, read from its own file system."""
    try:
        payload = token.strip().split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError) as error:
        raise TFJobError(f"the pod's service account token is not a JWT ({error}); set "
                         "kubeflow.service_account") from None
    name = ((claims.get("kubernetes.io") or {}).get("serviceaccount") or {}).get("name")
    if not name:
        prefix, _, rest = str(claims.get("sub", "")).partition("system:serviceaccount:")
        name = rest.partition(":")[2] if not prefix and rest.count(":") == 1 else None
    if not name:
        raise TFJobError("the pod's service account token names no service account; set "
                         "kubeflow.service_account")
    return name


def _own_service_account(directory: str = SERVICE_ACCOUNT_DIR) -> str:
    try:
        with open(f"{directory}/token") as f:
            return service_account_from_token(f.read())
    except OSError:
        raise TFJobError(f"no service account token in {directory}: outside a pod (or with "
                         "automountServiceAccountToken off) set kubeflow.service_account, or "
                         "the TFJob's pods would run as the namespace's 'default'") from None


def _own_namespace(directory: str = SERVICE_ACCOUNT_DIR) -> Optional[str]:
    try:
        with open(f"{directory}/namespace") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _in_cluster_namespace() -> str:
    return _own_namespace() or "default"


def step_pod_owner(core_api, namespace: str, environ: Mapping[str, str] = os.environ,
                   own_namespace: Optional[str] = None) -> Optional[dict]:
    """The ownerReference that ties the TFJob to the step's own pod: deleting the pod (a
    cancelled run's clean-up, pod GC) deletes the job and its replicas.

    The pod's name and uid come from the downward API env KFP's compiler gives every executor
    pod (KFP_POD_NAME, KFP_POD_UID: backend/src/v2/compiler/argocompiler/common.go
    commonEnvs), else the name from HOSTNAME (a pod's default) and the uid read from the API
    (get pods, deploy/training/rbac.yaml). None, with a warning, when the pod cannot be named
    or read, or the job is in another namespace (an owner must be in the dependent's
    namespace, or the garbage collector deletes the dependent at once): the job is then
    bounded by the step's SIGTERM handling and activeDeadlineSeconds only."""
    if own_namespace is None:
        own_namespace = _own_namespace()
    name, uid = environ.get("KFP_POD_NAME") or environ.get("HOSTNAME"), environ.get(
        "KFP_POD_UID")
    if own_namespace != namespace or not name:
        logging.warning("TFJob not owned by the step's pod (pod %s in namespace %s, job in "
                        "%s): it outlives a deleted step pod until its deadline", name,
                        own_namespace, namespace)
        return None
    if not uid:
        try:
            response = core_api.read_namespaced_pod(name, namespace, _preload_content=False)
            uid = (json.loads(response.data).get("metadata") or {}).get("uid")
        except Exception as error:  # noqa: BLE001  (403, 404, no API: carry on without it)
            status = getattr(error, "status", None)
            logging.warning("could not read the step's pod %s/%s (%s%s), so the TFJob is not "
                            "owned by it: it outlives a deleted step pod until its deadline "
                            "(allow get on pods: deploy/training/rbac.yaml)", namespace, name,
                            f"{status} " if status else "", getattr(error, "reason", error))
            return None
    if not uid:
        logging.warning("the step's pod %s/%s has no uid; the TFJob is not owned by it",
                        namespace, name)
        return None
    return {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}


def _kubernetes_apis():
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.CustomObjectsApi(), client.CoreV1Api(), client.NetworkingV1Api()


class TFJobTrainerExecutor(GenericExecutor):
    """The Trainer's executor for multi-worker strategies on Kubeflow (see the module doc): a
    TrainJob (training.operator trainjob, trainjob.py) or a TFJob (tfjob)."""

    def Do(self, input_dict, output_dict, exec_properties) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        fn_args = self._GetFnArgs(input_dict, output_dict, exec_properties)
        custom = fn_args.custom_config
        training, pod = custom["training"], custom["tfjob_pod"]
        model_uri = artifact_utils.get_single_uri(output_dict["model"])
        args = worker_args(
            exec_properties, artifact_utils.get_single_uri(input_dict["examples"]),
            fn_args.transform_graph_path, model_uri,
            artifact_utils.get_single_uri(output_dict["model_run"]))
        # The operator leaves serviceAccountName as the template has it, so unset the pods
        # would run as the namespace's 'default': give them the step's own identity instead.
        service_account = pod.get("service_account") or _own_service_account()
        namespace = pod.get("namespace") or _in_cluster_namespace()
        custom_api, core_api, networking_api = _kubernetes_apis()
        build = tfjob_manifest
        if training.get("operator", "tfjob") == "trainjob":
            from pipeline.kubeflow.tfjob.trainjob import trainjob_manifest as build
        manifest = build(
            job_name(model_uri), namespace, pod["image"],
            training["distribution_strategy"], training["tfjob"], args,
            service_account=service_account,
            labels={"app.kubernetes.io/part-of": custom.get("model_name", "trainer")},
            env=pod.get("env") or [], owner=step_pod_owner(core_api, namespace))
        state = run_tfjob(custom_api, core_api, manifest, training["tfjob"]["timeout_s"],
                          int(training["tfjob"].get("max_restarts", 3)),
                          networking_api=networking_api, any_port=all_peer_ports(training))
        from tfx.dsl.io import fileio

        # The file, not the folder: on s3:// a folder exists only through its objects.
        saved_model = f"{path_utils.serving_model_dir(model_uri)}/saved_model.pb"
        if not fileio.exists(saved_model):
            raise TFJobError(f"the {manifest['kind']} {state.lower()} but wrote no model: "
                             f"{saved_model} is missing")
        logging.info("%s %s: the chief's model is in %s", manifest["kind"], state, saved_model)
