"""The training job's manifests: the TFJob (`tfjob_manifest`; the TrainJob's is trainjob.py), its
name, the workers' arguments, and the NetworkPolicy that admits only the job's own pods
(TensorFlow's gRPC server on port 2222 has no authentication). Pure: no Kubernetes client.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, Iterable, List, Mapping, Optional

from pipeline.kubeflow.training_job.kinds import (CONTAINER, ENTRY, GROUP, JOB_NAME_LABEL,
                                                  OPERATOR_NAME, OPERATOR_NAME_LABEL, PORT,
                                                  RUN_AS_USER, TFJOB, TMP_DIR, VERSION, JobKind,
                                                  checked_env, kind_of)


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
    extra_env = checked_env(env)

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
        # backoffLimit (see job_status.Restarts).
        return {"replicas": count, "restartPolicy": "ExitCode", "template": {
            # Istio's sidecar would keep a finished replica's pod Running, so worker 0 never
            # reaches Succeeded on multi-user Kubeflow; the operator's SDK turns it off too
            # (sdk/python/kubeflow/training/utils/utils.py, constants.ISTIO_SIDECAR_INJECTION).
            "metadata": {"labels": dict(labels or {}),
                         "annotations": {"sidecar.istio.io/inject": "false"}},
            "spec": pod}}

    specs = {"Worker": replica(workers, int(tfjob["gpus_per_worker"]))}
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
                          "backoffLimit": int(tfjob["max_restarts"]),
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
    gpus = int(training["job"]["gpus_per_worker"])
    return gpus > 0 and training["collective_implementation"] in ("nccl", "auto")


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

