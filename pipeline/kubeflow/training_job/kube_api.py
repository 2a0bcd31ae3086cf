"""The Kubernetes calls the Trainer step makes on its training job, its NetworkPolicy and its
pods (`JobApi`), each retried on transient errors with bounded backoff.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Callable, List

from pipeline.kubeflow.training_job.kinds import TFJOB, JobKind, TFJobError
from pipeline.kubeflow.training_job.manifest import policy_name

# API answers worth another try (overload, a restarting API server, a dropped connection).
TRANSIENT_STATUS = {0, 429, 500, 502, 503, 504}
API_ATTEMPTS = 6


class JobApi:
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


def api_error(api: JobApi, error, doing: str) -> TFJobError:
    hint = {403: f"may this service account create, get and delete {api.kind.plural}, create, "
                 "patch and delete networkpolicies and list pods? deploy/training/rbac.yaml; a "
                 "NetworkPolicy refused by name or content: deploy/training/"
                 "networkpolicy-admission.yaml",
            404: f"is {api.kind.installed} installed in this cluster? "
                 "deploy/training/README.md"}.get(error.status, "")
    return TFJobError(f"could not {doing} {api.kind.kind} {api.namespace}/{api.name}: "
                      f"{error.status} "
                      f"{error.reason}" + (f" ({hint})" if hint else ""))
