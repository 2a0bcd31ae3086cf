"""What kubectl shows of a KFP install, for `python -m pipeline.doctor --runner kubeflow`.

Reads, each one `kubectl -n NS get ... -o json` with the user's kube config, nothing changed on
the cluster: the Deployments in kubeflow (the API server's image tag is the backend's version;
the profile controller's presence makes it multi-user), the Services there (the object store),
the run namespace's kfp-launcher ConfigMap, and the keys (never the values: a go-template lists
them) of the Secrets the launcher and the steps are given. `s3_session` then works out what the
launcher would do with it for an s3:// root, as the backend's Go code does.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from typing import Dict, List, Optional, Tuple

import yaml

from core import kfp_backends

REQUEST_TIMEOUT_S = 10


class Unreachable(Exception):
    """kubectl is absent, or reaches no cluster; the message says which."""


class Refused(Exception):
    """The API server answered with an error (Forbidden, NotFound, ...)."""


def kubectl_json(namespace: str, *what: str) -> dict:
    return json.loads(_kubectl_get(namespace, what, "json"))


def _kubectl_get(namespace: str, what, output: str) -> str:
    kubectl = shutil.which("kubectl")
    if not kubectl:
        raise Unreachable("kubectl is not on PATH")
    command = [kubectl, f"--request-timeout={REQUEST_TIMEOUT_S}s", "-n", namespace, "get",
               *what, "-o", output]
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=REQUEST_TIMEOUT_S * 2)
    except subprocess.TimeoutExpired:
        raise Unreachable(f"kubectl reaches no cluster: no answer within "
                          f"{REQUEST_TIMEOUT_S * 2} s") from None
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        server = [line for line in lines if line.startswith("Error from server")]
        if server:
            raise Refused(server[0])
        # klog's retries come first; the last line is kubectl's own summary.
        raise Unreachable("kubectl reaches no cluster: "
                          + (lines[-1] if lines else f"exit status {done.returncode}"))
    return done.stdout


@dataclasses.dataclass(frozen=True)
class Install:
    image: str                       # the API server's image
    version: Optional[str]           # its tag, when it is a release ("2.17.0")
    multi_user: bool
    services: Dict[str, List[dict]]  # Service name -> its ports, in kubeflow


def read_install(namespace: str = kfp_backends.NAMESPACE) -> Optional[Install]:
    """The KFP install in namespace, None when it holds no API server; Unreachable, Refused."""
    deployments = {d["metadata"]["name"]: d
                   for d in kubectl_json(namespace, "deployments").get("items", [])}
    api = deployments.get(kfp_backends.API_SERVER_DEPLOYMENT)
    if api is None:
        return None
    containers = api["spec"]["template"]["spec"]["containers"]
    image = next((c["image"] for c in containers
                  if c["name"] == kfp_backends.API_SERVER_CONTAINER), containers[0]["image"])
    tag = image.rsplit("/", 1)[-1].partition("@")[0].partition(":")[2]
    services = {s["metadata"]["name"]: s["spec"].get("ports", [])
                for s in kubectl_json(namespace, "services").get("items", [])}
    return Install(image=image, version=tag.lstrip("v") or None,
                   multi_user=kfp_backends.PROFILE_CONTROLLER in deployments,
                   services=services)


def read_launcher_config(namespace: str) -> Optional[dict]:
    """namespace's kfp-launcher ConfigMap, None when there is none (the launcher's defaults
    then: backend/src/v2/config/env.go FromConfigMap)."""
    try:
        return kubectl_json(namespace, "configmap", kfp_backends.LAUNCHER_CONFIG_MAP)
    except Refused as refused:
        if "(NotFound)" in str(refused):
            return None
        raise


# The keys of a Secret's data, never its values.
SECRET_KEYS_TEMPLATE = "go-template={{range $key, $value := .data}}{{$key}} {{end}}"


def read_secret_keys(namespace: str, name: str) -> Optional[List[str]]:
    """The keys Secret `name` holds in namespace, None when there is none; Unreachable,
    Refused (e.g. Forbidden)."""
    try:
        return sorted(_kubectl_get(namespace, ("secret", name), SECRET_KEYS_TEMPLATE).split())
    except Refused as refused:
        if "(NotFound)" in str(refused):
            return None
        raise


def _field(holder, name: str):
    """holder[name] as Go's encoding/json finds it: exact, else case-insensitive (sigs.k8s.io/
    yaml turns the YAML into JSON first)."""
    if not isinstance(holder, dict):
        return None
    if name in holder:
        return holder[name]
    return next((v for k, v in holder.items() if k.lower() == name.lower()), None)


def s3_session(launcher_data: Optional[dict], root: str) -> Tuple[Dict[str, str], Optional[str]]:
    """The session params the driver gives the launcher for an s3:// root, and the error it
    would stop with instead (backend/src/v2/config/s3.go S3ProviderConfig.ProvideSessionInfo,
    2.4.1 to 2.17.0; maxRetries from 2.15.0). No providers.s3 (or a query string): fromEnv."""
    try:
        providers = yaml.safe_load((launcher_data or {}).get("providers") or "") or {}
    except yaml.YAMLError as error:
        return {}, f"failed to unmarshall kfp bucket providers: {error}"
    s3 = _field(providers, "s3") or {}
    default, overrides = _field(s3, "default"), _field(s3, "overrides") or []
    if (default is None and not overrides) or "?" in root:
        return {"fromEnv": "true"}, None
    if default is None or _field(default, "credentials") is None:
        return {}, "invalid provider config: missing default credentials"
    bucket, _, key = root.split("://", 1)[1].partition("/")
    prefix = key.strip("/") + "/" if key.strip("/") else ""
    params = _settings({}, default, defaults=True)
    params.update(_credentials(_field(default, "credentials")))
    for override in overrides:
        if _field(override, "bucketName") == bucket and prefix.startswith(
                _field(override, "keyPrefix") or ""):
            params = _settings(params, override, defaults=False)
            if _field(override, "credentials") is None:
                return {}, "invalid provider config: missing override credentials"
            for k in ("secretName", "accessKeyKey", "secretKeyKey"):
                params.pop(k, None)
            params.update(_credentials(_field(override, "credentials")))
            break
    return params, None


def _settings(params: dict, entry: dict, defaults: bool) -> dict:
    params = dict(params)
    for name, fallback in (("endpoint", ""), ("region", ""), ("disableSSL", "false"),
                           ("forcePathStyle", "true"), ("maxRetries", "5")):
        value = _field(entry, name)
        if value is not None and value != "":
            params[name] = str(value).lower() if isinstance(value, bool) else str(value)
        elif defaults:
            params[name] = fallback
    return params


def _credentials(credentials: dict) -> Dict[str, str]:
    from_env = bool(_field(credentials, "fromEnv"))
    if from_env:
        return {"fromEnv": "true"}
    ref = _field(credentials, "secretRef") or {}
    return {"fromEnv": "false", "secretName": _field(ref, "secretName") or "",
            "accessKeyKey": _field(ref, "accessKeyKey") or "",
            "secretKeyKey": _field(ref, "secretKeyKey") or ""}


def host_port(endpoint: str) -> str:
    """"seaweedfs.kubeflow:9000" for http://seaweedfs.kubeflow.svc.cluster.local:9000/."""
    address = endpoint.split("://", 1)[-1].rstrip("/")
    host, _, port = address.partition(":")
    for suffix in (".svc.cluster.local", ".svc"):
        host = host.removesuffix(suffix)
    return f"{host}:{port}" if port else host


def providers_patch(namespace: str, endpoint: str, secret: str, access_key_key: str,
                    secret_key_key: str, region: str) -> str:
    """The kubectl command that adds providers.s3 for endpoint to namespace's kfp-launcher,
    keeping its other keys (a merge patch; what the profile controller wrote stays)."""
    providers = (f"s3:\n  default:\n    endpoint: {endpoint.split('://', 1)[-1]}\n"
                 f"    disableSSL: {'true' if endpoint.startswith('http://') else 'false'}\n"
                 f"    region: {region}\n    credentials:\n      fromEnv: false\n"
                 f"      secretRef: {{secretName: {secret}, accessKeyKey: {access_key_key}, "
                 f"secretKeyKey: {secret_key_key}}}\n")
    patch = json.dumps({"data": {"providers": providers}})
    return (f"kubectl -n {namespace} patch configmap {kfp_backends.LAUNCHER_CONFIG_MAP} "
            f"--type merge -p '{patch}'")
