"""Who the Trainer step's pod is: its service account (from its token), its namespace, and the
ownerReference that ties the training job to the pod (`step_pod_owner`).
"""
from __future__ import annotations

import base64
import json
import logging
import os
from typing import Mapping, Optional

from pipeline.kubeflow.training_job.kinds import TFJobError

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


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


def pod_service_account(directory: str = SERVICE_ACCOUNT_DIR) -> str:
    try:
        with open(f"{directory}/token") as f:
            return service_account_from_token(f.read())
    except OSError:
        raise TFJobError(f"no service account token in {directory}: outside a pod (or with "
                         "automountServiceAccountToken off) set kubeflow.service_account, or "
                         "the TFJob's pods would run as the namespace's 'default'") from None


def pod_namespace(directory: str = SERVICE_ACCOUNT_DIR) -> Optional[str]:
    try:
        with open(f"{directory}/namespace") as f:
            return f.read().strip() or None
    except OSError:
        return None


def in_cluster_namespace() -> str:
    return pod_namespace() or "default"


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
        own_namespace = pod_namespace()
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
