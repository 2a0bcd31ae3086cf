"""The cluster kubectl reaches (--runner kubeflow): the KFP backend's version, its object
store, the run namespace's kfp-launcher ConfigMap and the Secrets it and the steps name."""
from __future__ import annotations

import re
from typing import Dict, List, Optional

from core import kfp_backends
from core.config import PipelineConfig
from pipeline.kubeflow.client import cluster
from pipeline.doctor.findings import FAIL, INFO, OK, WARN, Finding


def cluster_findings(config: PipelineConfig) -> List[Finding]:
    """What kubectl shows of the KFP install, against the config's kubeflow section."""
    kf, found = config.kubeflow, []
    try:
        install = cluster.read_install()
    except cluster.Unreachable as why:
        return [Finding("cluster", INFO, f"not checked: {why}")]
    except cluster.Refused as why:
        install = None
        found.append(Finding("cluster", WARN, f"cannot read namespace {kfp_backends.NAMESPACE} "
                             f"({why}): the backend's version and object store are not checked",
                             "usual for a profile's user on multi-user KFP; an admin can run "
                             "this check, or `kubectl -n kubeflow get deployment ml-pipeline`"))
    else:
        if install is None:
            return [Finding("cluster", WARN, "no KFP API server (Deployment "
                            f"{kfp_backends.API_SERVER_DEPLOYMENT}) in namespace "
                            f"{kfp_backends.NAMESPACE}", "check kubectl's context "
                            "(kubectl config current-context)")]
        found += _install_findings(install, config)
    backend = _backend_or_none(install.version if install else kf.backend_version) or \
        kf.backend
    multi_user = install.multi_user if install else kf.multi_user
    namespace = kf.namespace if multi_user else kfp_backends.NAMESPACE
    if not namespace:
        return found  # _install_findings asked for kubeflow.namespace
    try:
        launcher = cluster.read_launcher_config(namespace)
    except (cluster.Refused, cluster.Unreachable) as why:
        return found + [Finding("cluster", WARN, f"cannot read {namespace}/"
                                f"{kfp_backends.LAUNCHER_CONFIG_MAP}: {why}")]
    found += launcher_findings(config, launcher, namespace, backend,
                               install.services if install else None)
    found += secret_findings(config, launcher, namespace)
    if multi_user and not kf.multi_user and backend.scoped_keys and (
            kf.object_store.secret == kfp_backends.SECRET):  # else the config refused them
        for key, uri in kf.s3_paths().items():
            why = kfp_backends.outside_key_prefixes(uri, namespace)
            if why:
                found.append(Finding("cluster", FAIL, f"kubeflow.{key} {uri}: the namespace's "
                                     f"key may use only {kfp_backends.allowed_uris(namespace)} "
                                     f"({why})", f"move it under s3://{kfp_backends.BUCKET}/"
                                     f"private/{namespace}/ (data, serving) or private-artifacts/"
                                     f"{namespace}/ (pipeline root)"))
    return found


def _backend_or_none(version: Optional[str]) -> Optional[kfp_backends.Backend]:
    try:
        return kfp_backends.backend(version or "")
    except ValueError:
        return None


def _install_findings(install: cluster.Install, config: PipelineConfig) -> List[Finding]:
    kf, found = config.kubeflow, []
    mode = "multi-user" if install.multi_user else "single-user"
    backend = _backend_or_none(install.version)
    if backend is None and not re.fullmatch(r"\d+\.\d+\.\d+", install.version or ""):
        found.append(Finding("cluster", WARN, f"cannot tell the KFP release from the API "
                             f"server's image {install.image}", "set kubeflow.backend_version "
                             "to the release it was built from"))
    elif backend is None:
        found.append(Finding("cluster", FAIL, f"KFP {install.version} (image {install.image}) "
                             f"is not a release this template supports: "
                             f"{kfp_backends.SUPPORTED}", "upgrade the backend"))
    else:
        found.append(Finding("cluster", OK, f"KFP {install.version}, {mode} (Deployment "
                             f"{kfp_backends.API_SERVER_DEPLOYMENT}: {install.image})"))
        if install.version != kf.backend_version:
            found.append(Finding("cluster", WARN, f"kubeflow.backend_version is "
                                 f"{kf.backend_version}; the cluster runs {install.version}",
                                 f"set kubeflow.backend_version: \"{install.version}\" (the "
                                 "object store's default endpoint follows it)"))
    if install.multi_user and not (kf.multi_user and kf.namespace):
        found.append(Finding("cluster", WARN, f"the cluster is multi-user (Deployment "
                             f"{kfp_backends.PROFILE_CONTROLLER}); the config is not",
                             "set kubeflow.multi_user: true and kubeflow.namespace: your "
                             "profile's namespace"))
    elif kf.multi_user and not install.multi_user:
        found.append(Finding("cluster", WARN, "kubeflow.multi_user is true; the cluster is "
                             "single-user (no profile controller)", "set it to false"))
    stores = [name for name in ("seaweedfs", "minio-service") if name in install.services]
    found.append(Finding("cluster", INFO if stores else WARN, "object store: " + (", ".join(
        f"Service {name} (S3: {_ports(_s3_ports(install.services[name]))})" for name in stores)
        or f"no seaweedfs or minio-service Service in {kfp_backends.NAMESPACE}")))
    endpoint = kf.object_store.endpoint
    if kf.s3_paths() and endpoint:
        problem = _service_problem(endpoint, install.services)
        if problem:
            default = backend.endpoint if backend else None
            found.append(Finding("cluster", FAIL, f"kubeflow.object_store.endpoint {endpoint}: "
                                 f"{problem}", (f"remove object_store.endpoint (the default for "
                                                f"KFP {install.version} is {default})")
                                 if default else "name the object store's Service"))
        else:
            found.append(Finding("cluster", OK, f"kubeflow.object_store.endpoint {endpoint}: "
                                 "a Service of this install"))
    return found


def _s3_ports(ports: List[dict]) -> List[dict]:
    # SeaweedFS's Service also serves IAM, master and filer ports (seaweedfs-service.yaml).
    return [p for p in ports if "s3" in p.get("name", "") or p.get("port") == 9000] or ports


def _ports(ports: List[dict]) -> str:
    return ", ".join(f"{p.get('port')} -> {p.get('targetPort', p.get('port'))}" for p in ports)


def _service_problem(endpoint: str, services: Optional[Dict[str, List[dict]]]) -> Optional[str]:
    """Why endpoint names no Service port of KFP's namespace (None: it does, or it is not
    in that namespace, which is not checked)."""
    host, _, port = cluster.host_port(endpoint).partition(":")
    name, _, namespace = host.partition(".")
    if services is None or namespace != kfp_backends.NAMESPACE:
        return None
    if name not in services:
        return (f"no Service {name} in namespace {namespace} (there: "
                f"{', '.join(n for n in ('seaweedfs', 'minio-service') if n in services)})")
    port = int(port or (443 if endpoint.startswith("https") else 80))
    if port not in {p.get("port") for p in services[name]}:
        return f"Service {name} has no port {port} ({_ports(services[name])})"
    return None


def launcher_findings(config: PipelineConfig, launcher: Optional[dict], namespace: str,
                      backend: kfp_backends.Backend,
                      services: Optional[Dict[str, List[dict]]]) -> List[Finding]:
    """Whether the launcher, with namespace's kfp-launcher, reads and writes the steps' root."""
    kf, where = config.kubeflow, f"{namespace}/{kfp_backends.LAUNCHER_CONFIG_MAP}"
    data = (launcher or {}).get("data") or {}
    owner = ((launcher or {}).get("metadata", {}).get("annotations") or {}).get(
        "metacontroller.k8s.io/decorator-controller")
    found = [Finding("cluster", INFO, f"{where}: " + (
        "none (the launcher's defaults)" if launcher is None
        else f"written by {owner}" if owner else "present"))]
    if data.get("defaultPipelineRoot") and kf.pipeline_root:
        found.append(Finding("cluster", INFO, f"{where} defaultPipelineRoot "
                             f"{data['defaultPipelineRoot']}: not used, every run of this "
                             "pipeline sends kubeflow.pipeline_root"))
    root = kf.pipeline_root or ""
    if root.startswith("gs://"):
        found.append(Finding("cluster", INFO, f"kubeflow.pipeline_root {root}: the launcher "
                             "uses providers.gs or the pod's Google credentials (not checked)"))
    if not root.startswith("s3://"):
        return found
    store = kf.object_store
    fix = cluster.providers_patch(namespace, store.endpoint or "https://s3.amazonaws.com",
                                  store.secret, store.access_key_key, store.secret_key_key,
                                  store.region)
    fix += " (the setup step: deploy/kubeflow/README.md, SeaweedFS / MinIO / S3)"
    if owner:
        fix += (f" (the profile controller never updates {where} once written, so the patch "
                "stays; if the ConfigMap is deleted it writes it again without providers: "
                "patch again)")
    params, error = cluster.s3_session(data, root)
    if error:
        return found + [Finding("cluster", FAIL, f"{where}: the driver would stop: {error}",
                                fix)]
    if params == {"fromEnv": "true"}:
        if store.endpoint is None:
            return found + [Finding("cluster", OK, f"{where}: no providers.s3: the launcher "
                                    "opens the root on AWS S3 with the pod's AWS_* env (the "
                                    f"spec sets them from Secret {store.secret})")]
        return found + [Finding(
            "cluster", FAIL, f"{where} has no providers.s3: the launcher would open {root} on "
            f"AWS's endpoint, not {store.endpoint}, and fail to download the steps' inputs and "
            "upload their outputs (backend/src/v2/config/s3.go, objectstore/object_store.go)",
            fix)]
    problems = []
    endpoint = params.get("endpoint", "")
    if params.get("fromEnv") == "true" and not backend.env_credentials_with_endpoint:
        problems.append(f"credentials.fromEnv: true makes KFP {backend.releases} drop the "
                        "provider's endpoint (objectstore/object_store.go createS3BucketSession; "
                        "kept from 2.17.0): use secretRef")
    elif params.get("fromEnv") == "false" and not params.get("secretName"):
        problems.append("credentials.secretRef names no Secret")
    if store.endpoint and cluster.host_port(endpoint) != cluster.host_port(store.endpoint):
        problems.append(f"its endpoint {endpoint or '(none: AWS)'} is not the steps' "
                        f"{store.endpoint}")
    elif endpoint and (problem := _service_problem(endpoint, services)):
        problems.append(f"its endpoint {endpoint}: {problem}")
    if ("://" not in endpoint and params.get("disableSSL") != "true"
            and (store.endpoint or "").startswith("http://")):
        problems.append(f"disableSSL is not true: the launcher would use https://{endpoint}")
    if params.get("forcePathStyle") == "false" and store.endpoint:
        problems.append("forcePathStyle: false: the launcher would address BUCKET.host, which "
                        "in-cluster DNS does not resolve")
    if problems:
        return found + [Finding("cluster", FAIL, f"{where} providers.s3: " + "; ".join(problems),
                                fix)]
    secret = (f"Secret {params['secretName']}" if params.get("fromEnv") == "false"
              else "the pod's AWS_* env")
    found.append(Finding("cluster", OK, f"{where} providers.s3: the launcher reads and writes "
                         f"{root} at {endpoint} with {secret}"))
    if params.get("fromEnv") == "false" and params["secretName"] != store.secret:
        found.append(Finding("cluster", WARN, f"the launcher uses Secret {params['secretName']}, "
                             f"the steps {store.secret}", "both keys must be allowed on the "
                             "pipeline root; simplest: the same Secret in both"))
    return found


def secret_findings(config: PipelineConfig, launcher: Optional[dict],
                    namespace: str) -> List[Finding]:
    """Whether the Secrets the launcher (kfp-launcher's secretRef) and the steps (the spec's
    secretAsEnv) are given exist in namespace with their keys. Without the launcher's, it stops
    at OpenBucket ("failed to retrieve credentials", objectstore/object_store.go); without the
    steps', no step's container starts (CreateContainerConfigError)."""
    kf, wanted = config.kubeflow, {}
    root = kf.pipeline_root or ""
    if root.startswith("s3://"):
        params, error = cluster.s3_session(((launcher or {}).get("data") or {}), root)
        if not error and params.get("fromEnv") == "false" and params.get("secretName"):
            wanted.setdefault(params["secretName"], []).append(
                ("the launcher's (kfp-launcher providers.s3 secretRef)",
                 [params.get("accessKeyKey", ""), params.get("secretKeyKey", "")]))
    if kf.s3_paths():
        store = kf.object_store
        wanted.setdefault(store.secret, []).append(
            ("the steps' (kubeflow.object_store.secret)",
             [store.access_key_key, store.secret_key_key]))
    found = []
    for name, users in wanted.items():
        try:
            keys = cluster.read_secret_keys(namespace, name)
        except (cluster.Refused, cluster.Unreachable) as why:
            found.append(Finding("cluster", WARN, f"cannot read Secret {namespace}/{name}: "
                                 f"{why}"))
            continue
        who = " and ".join(user for user, _ in users)
        missing = sorted({k for _, needed in users for k in needed} - set(keys or []))
        if keys is None or missing:
            what = "does not exist" if keys is None else f"has no key {', '.join(missing)}"
            found.append(Finding(
                "cluster", FAIL, f"Secret {namespace}/{name}, {who}, {what}",
                f"create it: kubectl -n {namespace} create secret generic {name} "
                f"--from-literal=KEY=... for each key (deploy/kubeflow/README.md, SeaweedFS / "
                "MinIO / S3)"))
        else:
            found.append(Finding("cluster", OK, f"Secret {namespace}/{name}, {who}: present "
                                 f"with {', '.join(sorted({k for _, n in users for k in n}))}"))
    return found
