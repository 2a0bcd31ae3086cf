"""The Kubeflow Trainer v2 TrainJob that runs a multi_worker_mirrored Trainer on N nodes.

trainer.kubeflow.org/v1alpha1, Trainer v2.3.0. The job runs on the ClusterTrainingRuntime
`training.job.runtime` (deploy/training/clustertrainingruntime.yaml, `tfx-tensorflow`): a
JobSet of one Indexed Job, `node`, with no ML policy source, so the PlainML plugin applies
(pkg/runtime/framework/plugins/plainml/plainml.go): it sets the node count from
`trainer.numNodes` and upserts `trainer.env` into the `node` container, and the JobSet builder
(pkg/runtime/framework/plugins/jobset/builder.go Trainer) sets its image, command and args. No
operator sets TF_CONFIG here: the replica builds it (jobset_cluster.py) from TFX_TRAINJOB_NAME,
TFX_TRAINJOB_NUM_NODES (set below) and the pod's JOB_COMPLETION_INDEX.

The hardening the TFJob carries in its pod templates lives in two places here: the runtime
(no service account token, restartPolicy, the failure policies: fields a TrainJob cannot
patch), and this TrainJob's `runtimePatches` (the pod and container securityContext, the /tmp
emptyDir, the service account, labels and Istio's annotation: PodSpecPatch/ContainerPatch in
pkg/apis/trainer/v1alpha1/trainjob_types.go, merged into the runtime's template by strategic
merge, pkg/runtime/core/trainingruntime.go mergeRuntimePatches), so a runtime that forgot them
still gets them.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional

from pipeline.kubeflow.training_job import jobset_cluster
from pipeline.kubeflow.training_job.kinds import (ENTRY, RUN_AS_USER, TMP_DIR, TRAINER_NODE,
                                                  TRAINJOB, checked_env)

RUNTIME_KIND = "ClusterTrainingRuntime"
# The runtimePatches entry this step owns (a list-map keyed by manager; immutable).
PATCH_MANAGER = "tfx-pipeline/trainer-step"
_OWN_ENV = (jobset_cluster.NAME_ENV, jobset_cluster.NODES_ENV, jobset_cluster.INDEX_ENV)

POD_SECURITY = {"runAsNonRoot": True, "runAsUser": RUN_AS_USER, "runAsGroup": RUN_AS_USER,
                "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "privileged": False,
                      "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


def trainjob_manifest(name: str, namespace: str, image: str, strategy: str, tfjob: Mapping,
                      args: List[str], service_account: Optional[str] = None,
                      labels: Optional[Mapping[str, str]] = None,
                      env: Iterable[Mapping] = (), owner: Optional[Mapping] = None) -> dict:
    """The TrainJob: `tfjob.workers` nodes of the pipeline's image running the worker entry
    point, on the runtime `tfjob.runtime`. `env`, `owner`: as for tfjob_manifest."""
    if strategy != "multi_worker_mirrored":
        raise ValueError(f"a TrainJob runs multi_worker_mirrored only, not '{strategy}' "
                         "(parameter_server: training.operator tfjob)")
    workers = int(tfjob["workers"])
    if workers < 2:
        raise ValueError("multi_worker_mirrored needs at least 2 workers")
    extra_env = checked_env(env)
    taken = [e["name"] for e in extra_env if e["name"] in _OWN_ENV]
    if taken:
        raise ValueError(f"tfjob env must leave {taken} alone: the TrainJob's replicas build "
                         "TF_CONFIG from them")
    gpus = int(tfjob["gpus_per_worker"])
    limits = {"cpu": str(tfjob["cpu"]), "memory": str(tfjob["memory"]),
              **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    pod: Dict[str, Any] = {
        "securityContext": dict(POD_SECURITY),
        "volumes": [{"name": "tmp", "emptyDir": {}}],
        "containers": [{"name": TRAINER_NODE, "securityContext": dict(CONTAINER_SECURITY),
                        "volumeMounts": [{"name": "tmp", "mountPath": TMP_DIR}]}]}
    if service_account:
        pod["serviceAccountName"] = service_account
    template = {
        # Istio's sidecar would keep a finished replica's pod running (deploy/training/README.md).
        "metadata": {"labels": dict(labels or {}),
                     "annotations": {"sidecar.istio.io/inject": "false"}},
        "spec": pod}
    metadata: Dict[str, Any] = {"name": name, "namespace": namespace,
                                "labels": dict(labels or {})}
    if owner:
        metadata["ownerReferences"] = [dict(owner)]
    return {
        "apiVersion": f"{TRAINJOB.group}/{TRAINJOB.version}", "kind": TRAINJOB.kind,
        "metadata": metadata,
        "spec": {
            "runtimeRef": {"apiGroup": TRAINJOB.group, "kind": RUNTIME_KIND,
                           "name": str(tfjob["runtime"])},
            # The TrainJob fails with DeadlineExceeded after this (trainjob_types.go).
            "activeDeadlineSeconds": int(tfjob["timeout_s"]),
            "trainer": {
                "image": image, "command": list(ENTRY), "args": list(args),
                "numNodes": workers,
                "resourcesPerNode": {"requests": dict(limits), "limits": limits},
                "env": [{"name": "PYTHONUNBUFFERED", "value": "1"},
                        {"name": jobset_cluster.NAME_ENV, "value": name},
                        {"name": jobset_cluster.NODES_ENV, "value": str(workers)},
                        *extra_env]},
            "runtimePatches": [{"manager": PATCH_MANAGER, "trainingRuntimeSpec": {
                "template": {"spec": {"replicatedJobs": [{
                    "name": TRAINER_NODE,
                    "template": {"spec": {"template": template}}}]}}}}]}}
