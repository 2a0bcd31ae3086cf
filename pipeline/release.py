"""Release a pushed model version as the canary of the serving Rollout.

    python -m pipeline.release [--config configs/pipeline.yaml] [--version V]
        [--server https://HOST:PORT --token-file F [--ca-file F]]

With `serving.release: canary`, sets the pod label tf-serving/model-version of the Argo Rollout
tf-serving-<model> in `serving.namespace` (deploy/serving/k8s/rollout) to the version: the
Rollout then runs its canary steps and analysis, and promotes the version or takes it back by
itself. The version defaults to the newest one the Pusher wrote under <serving_dir>/<model_name>.
With `serving.release: direct` there is nothing to do: TF Serving loads new versions itself.

It talks to the Kubernetes API directly (no kubectl, no client library): in a pod with the
service account's token (KUBERNETES_SERVICE_HOST), else --server/--token-file. It needs exactly
what deploy/serving/k8s/rollout/common/release-rbac.yaml grants: get and patch on that one
Rollout. The patch is a JSON merge patch with fieldValidation=Strict, so the API server refuses it
rather than drop a field it does not know.

It does not re-release: when the Rollout already has the version it reports the Rollout's state
and changes nothing, and when that version's canary was aborted (status.abort) it says so and
exits 3, so an unchanged nightly re-run does not push an aborted model again (retry it by hand:
kubectl argo rollouts retry rollout ...). While another version's canary is still running it
releases nothing (exit 3). With the patch it records the stable version in the Rollout's
annotation tf-serving/stable-model-version (stable_version() reads it back).

Exit status: 0 released or nothing to do, 2 bad config or arguments, 3 the version was aborted
or another canary is running, 4 the Kubernetes API refused or could not be reached.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import List, Optional

from core.config import ConfigError, load_config

# The pod label the Rollout's model-config init container reads (deploy/serving/k8s/rollout).
VERSION_LABEL = "tf-serving/model-version"
# The Rollout's annotation: the stable version when the last release was made. The Rollout's status
# names the stable revision by pod-template hash only; while a canary runs, or after it was
# aborted, the pod template holds the canary's version, and this says which version the stable
# pods serve (without reading their ReplicaSet, which the release step may not).
STABLE_ANNOTATION = "tf-serving/stable-model-version"
ROLLOUTS = "/apis/argoproj.io/v1alpha1/namespaces/{namespace}/rollouts/{name}"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ReleaseError(Exception):
    """The Kubernetes API refused a request or could not be reached."""


def kubernetes_name(model_name: str) -> str:
    """The model name in Kubernetes object names (deploy/serving/rename.py's rule)."""
    return re.sub(r"[^a-z0-9-]+", "-", model_name.lower()).strip("-")


def rollout_name(model_name: str) -> str:
    return f"tf-serving-{kubernetes_name(model_name)}"


def check_version(version: str) -> str:
    """A TF Serving version: the Pusher's folder name, digits only (the init container refuses
    anything else; a label value is at most 63 characters)."""
    if not re.fullmatch(r"[0-9]{1,18}", version):
        raise ValueError(f"version {version!r} is not a version number (a pushed folder's name)")
    return version


def newest_version(model_base_path: Path) -> str:
    """The newest version the Pusher wrote: the largest all-digit folder name."""
    versions = [p.name for p in Path(model_base_path).iterdir()
                if p.is_dir() and p.name.isdigit()] if Path(model_base_path).is_dir() else []
    if not versions:
        raise ValueError(f"no pushed version under {model_base_path}")
    return max(versions, key=int)


@dataclasses.dataclass(frozen=True)
class Cluster:
    server: str
    token: str
    ca_file: Optional[str] = None

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

    def request(self, method: str, path: str, body: Optional[dict] = None,
                content_type: str = "application/json") -> dict:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Accept": "application/json",
            **({"Content-Type": content_type} if data is not None else {})})
        context = None
        if self.server.startswith("https:"):
            context = ssl.create_default_context(cafile=self.ca_file)
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
        return version if version and version.isdigit() else None
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


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=Path("configs/pipeline.yaml"))
    parser.add_argument("--version", help="default: the newest pushed version")
    parser.add_argument("--server", help="the Kubernetes API (default: in-cluster)")
    parser.add_argument("--token-file", type=Path)
    parser.add_argument("--ca-file")
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    serving = config.serving
    if serving.release != "canary":
        print("serving.release is direct: TF Serving loads the newest pushed version itself; "
              "nothing to release")
        return 0
    try:
        version = check_version(args.version) if args.version else newest_version(
            config.model_base_path)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.server and not args.token_file:
        print("error: --server needs --token-file", file=sys.stderr)
        return 2
    try:
        cluster = (Cluster(args.server, args.token_file.read_text().strip(), args.ca_file)
                   if args.server else Cluster.in_cluster())
        outcome = release(cluster, serving.namespace, rollout_name(serving.model_name), version)
    except ReleaseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 4
    print(outcome.message)
    return 3 if outcome.action in ("aborted", "in-progress") else 0


if __name__ == "__main__":
    sys.exit(main())
