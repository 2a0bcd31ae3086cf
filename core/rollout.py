"""The serving Rollout through the Kubernetes API: what the release step and ServingBaseline share.

pipeline/release.py (`python -m pipeline.release`), components/release (the pipeline's release
step) and components/serving_baseline (the Evaluator's baseline under `serving.release: canary`)
all reach the Argo Rollout tf-serving-<model> (deploy/serving/k8s/rollout) through this module:
one client, one reading of the stable version, one release rule. It talks to the API directly
(no kubectl, no client library) and imports no TensorFlow.

Where the API is (Cluster.connect): in a pod, the service account's token
(KUBERNETES_SERVICE_HOST; a Kubeflow step runs as pipeline-runner, which
deploy/serving/k8s/rollout/common/release-rbac.yaml lets get and patch that one Rollout); outside
one, the current context of the kube config ($KUBECONFIG's first file, else ~/.kube/config) with
a bearer token or a client certificate. A context that authenticates through an exec plugin or an
auth provider (EKS, GKE) is refused with what to do instead: `kubectl create token` and
--server/--token-file. No cluster at all is an error (KubernetesError), never a silent fallback.
"""
from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import ssl
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Optional

import yaml

from core import storage

# The pod label the Rollout's model-config init container reads (deploy/serving/k8s/rollout).
VERSION_LABEL = "tf-serving/model-version"
# The Rollout's annotation: the stable version when the last release was made. The Rollout's status
# names the stable revision by pod-template hash only; while a canary runs, or after it was
# aborted, the pod template holds the canary's version, and this says which version the stable
# pods serve (without reading their ReplicaSet, which the release step may not).
STABLE_ANNOTATION = "tf-serving/stable-model-version"
ROLLOUTS = "/apis/argoproj.io/v1alpha1/namespaces/{namespace}/rollouts/{name}"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def kubeconfig_path() -> Path:
    first = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    return Path(first).expanduser() if first else Path.home() / ".kube" / "config"


class ReleaseError(Exception):
    """The Kubernetes API refused a request, could not be reached, or is not configured."""


def kubernetes_name(model_name: str) -> str:
    """The model name in Kubernetes object names (deploy/serving/rename.py's rule)."""
    return re.sub(r"[^a-z0-9-]+", "-", model_name.lower()).strip("-")


def rollout_name(model_name: str) -> str:
    return f"tf-serving-{kubernetes_name(model_name)}"


def rollout_ref(serving) -> str:
    """The serving Rollout as "namespace/name" under serving.release: canary (the config's
    `serving` section), "" under direct."""
    if serving.release != "canary":
        return ""
    return f"{serving.namespace}/{rollout_name(serving.model_name)}"


def check_version(version: str) -> str:
    """A TF Serving version: the Pusher's folder name, digits only (the init container refuses
    anything else; a label value is at most 63 characters)."""
    if not re.fullmatch(r"[0-9]{1,18}", version):
        raise ValueError(f"version {version!r} is not a version number (a pushed folder's name)")
    return version


def newest_version(model_base_path: Path) -> str:
    """The newest version the Pusher wrote: the largest all-digit folder name."""
    newest = storage.newest_version(p.name for p in Path(model_base_path).iterdir()
                                    if p.is_dir()) if Path(model_base_path).is_dir() else None
    if newest is None:
        raise ValueError(f"no pushed version under {model_base_path}")
    return newest


@dataclasses.dataclass(frozen=True)
class Cluster:
    server: str
    token: Optional[str] = None
    ca_file: Optional[str] = None
    ca_data: Optional[str] = None  # PEM
    client_cert: Optional[str] = None  # PEM, with client_key: a kube config's client certificate
    client_key: Optional[str] = None
    insecure: bool = False  # the kube config's insecure-skip-tls-verify

    @classmethod
    def in_cluster(cls) -> "Cluster":
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get(
            "KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise ReleaseError("not in a Kubernetes pod (KUBERNETES_SERVICE_HOST unset): pass "
                               "--server and --token-file")
        if ":" in host:
            host = f"[{host}]"
        return cls(f"https://{host}:{port}", (SERVICE_ACCOUNT / "token").read_text().strip(),
                   str(SERVICE_ACCOUNT / "ca.crt"))

    @classmethod
    def from_kubeconfig(cls, path: Optional[Path] = None) -> "Cluster":
        """The kube config's current context (kubectl's file: $KUBECONFIG's first, else
        ~/.kube/config)."""
        path = Path(path) if path else kubeconfig_path()
        try:
            config = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as error:
            raise ReleaseError(f"kube config {path}: {error}") from None

        def named(kind: str, name: Optional[str]) -> dict:
            for entry in config.get(kind + "s") or []:
                if entry.get("name") == name:
                    return entry.get(kind) or {}
            raise ReleaseError(f"kube config {path}: no {kind} {name!r}")

        context = named("context", config.get("current-context"))
        cluster, user = named("cluster", context.get("cluster")), named("user", context.get("user"))
        if "exec" in user or "auth-provider" in user:
            raise ReleaseError(
                f"kube config {path}: user {context.get('user')!r} authenticates through an exec "
                "plugin or auth provider, which this client does not run; use a token: "
                "`kubectl create token SERVICE_ACCOUNT > token` and --server/--token-file")

        def pem(key: str, source: dict) -> Optional[str]:
            if source.get(key + "-data"):
                return base64.b64decode(source[key + "-data"], validate=True).decode()
            if source.get(key):
                return (path.parent / source[key]).read_text()
            return None

        if not cluster.get("server"):
            raise ReleaseError(f"kube config {path}: cluster {context.get('cluster')!r} has no "
                               "server")
        try:
            token = user.get("token")
            if not token and user.get("tokenFile"):
                token = (path.parent / user["tokenFile"]).read_text().strip()
            return cls(cluster["server"], token, ca_data=pem("certificate-authority", cluster),
                       client_cert=pem("client-certificate", user),
                       client_key=pem("client-key", user),
                       insecure=bool(cluster.get("insecure-skip-tls-verify")))
        except (OSError, ValueError) as error:  # a file it names, base64 that is not
            raise ReleaseError(f"kube config {path}: {error}") from None

    @classmethod
    def connect(cls) -> "Cluster":
        """In a pod its service account, else the kube config; neither: ReleaseError."""
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return cls.in_cluster()
        path = kubeconfig_path()
        if path.is_file():
            return cls.from_kubeconfig(path)
        raise ReleaseError(
            "no Kubernetes cluster: not in a pod (KUBERNETES_SERVICE_HOST unset) and no kube "
            f"config at {path}; serving.release: canary needs the Rollout "
            "(set serving.release: direct to run without a cluster)")

    def _context(self) -> Optional[ssl.SSLContext]:
        if not self.server.startswith("https:"):
            return None
        context = ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_data)
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.client_cert and self.client_key:
            with tempfile.TemporaryDirectory() as folder:  # ssl loads a chain from files only
                cert, key = Path(folder) / "cert.pem", Path(folder) / "key.pem"
                cert.write_text(self.client_cert)
                key.touch(mode=0o600)
                key.write_text(self.client_key)
                context.load_cert_chain(str(cert), str(key))
        return context

    def request(self, method: str, path: str, body: Optional[dict] = None,
                content_type: str = "application/json") -> dict:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method, headers={
            **({"Authorization": f"Bearer {self.token}"} if self.token else {}),
            "Accept": "application/json",
            **({"Content-Type": content_type} if data is not None else {})})
        try:
            context = self._context()
        except (OSError, ssl.SSLError) as error:
            raise ReleaseError(f"TLS settings for {self.server}: {error}") from None
        try:
            with urllib.request.urlopen(request, timeout=30, context=context) as response:
                return json.load(response)
        except urllib.error.HTTPError as error:
            try:
                message = json.load(error).get("message", "")
            except ValueError:
                message = ""
            raise ReleaseError(f"{method} {path}: {error.code} {message}".strip()) from None
        except OSError as error:
            raise ReleaseError(f"{method} {path}: {error}") from None


@dataclasses.dataclass(frozen=True)
class Outcome:
    action: str  # released | unchanged | aborted | in-progress
    version: str
    previous: Optional[str]
    phase: Optional[str]  # the Rollout's status.phase when read
    message: str


def pod_version(rollout: dict) -> Optional[str]:
    return rollout.get("spec", {}).get("template", {}).get("metadata", {}).get(
        "labels", {}).get(VERSION_LABEL)


def stable_version(rollout: dict) -> Optional[str]:
    """The version the Rollout's stable pods serve, None when unknown: the pod template's when the
    stable revision is the current one (promoted, nothing in flight), else the annotation the
    last release left."""
    status = rollout.get("status", {})
    stable_hash = status.get("stableRS")
    if stable_hash and stable_hash == status.get("currentPodHash") and not status.get("abort"):
        version = pod_version(rollout)
        return version if version and storage.is_version(version) else None
    return rollout.get("metadata", {}).get("annotations", {}).get(STABLE_ANNOTATION)


def release(cluster: Cluster, namespace: str, name: str, version: str) -> Outcome:
    """Makes `version` the Rollout's pod version, unless it is already (then reports)."""
    check_version(version)
    path = ROLLOUTS.format(namespace=namespace, name=name)
    rollout = cluster.request("GET", path)
    current = pod_version(rollout)
    status = rollout.get("status", {})
    phase = status.get("phase")
    if current == version:
        if status.get("abort"):
            return Outcome("aborted", version, current, phase,
                           f"{name}: the canary of version {version} was aborted "
                           f"({status.get('message', 'see kubectl argo rollouts get rollout')}); "
                           "not released again (retry: kubectl argo rollouts retry rollout "
                           f"{name})")
        return Outcome("unchanged", version, current, phase,
                       f"{name} already runs version {version} ({phase or 'no status yet'})")
    if status.get("stableRS") and status.get("stableRS") != status.get("currentPodHash") and (
            not status.get("abort")):
        return Outcome("in-progress", version, current, phase,
                       f"{name}: the canary of version {current} is still running ({phase}); "
                       f"version {version} not released (run again once it is promoted or "
                       "aborted)")
    stable = stable_version(rollout)
    patch = {"spec": {"template": {"metadata": {"labels": {VERSION_LABEL: version}}}}}
    if stable:
        patch["metadata"] = {"annotations": {STABLE_ANNOTATION: stable}}
    cluster.request("PATCH", path + "?" + urllib.parse.urlencode({"fieldValidation": "Strict"}),
                    patch, content_type="application/merge-patch+json")
    return Outcome("released", version, current, phase,
                   f"{name}: version {version} released as the canary (was {current}); "
                   f"watch: kubectl argo rollouts get rollout {name} -n {namespace} --watch")




def read_rollout(cluster: Cluster, namespace: str, name: str) -> dict:
    return cluster.request("GET", ROLLOUTS.format(namespace=namespace, name=name))
