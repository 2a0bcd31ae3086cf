"""The kubernetes PlatformSpec: what each step's pod gets that a PipelineSpec cannot say.

When a path the steps open is s3:// (MinIO, KFP's own object store, or any S3 API), every step
needs the variables tensorflow-io and boto3 read (core/storage.py): S3_ENDPOINT,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION. The credentials come from a Kubernetes
Secret; the spec names the Secret and its keys, never their values.

Written as kfp-kubernetes 1.x writes it, a second YAML document beside the PipelineSpec:

    platforms: {kubernetes: {deploymentSpec: {executors: {<executor label>:
        {secretAsEnv: [{secretName: S, keyToEnv: [{secretKey: K, envVar: V}]}]}}}}}

Read against KFP 2.3.0's source (same lines at 2.0.5 and 2.5.0 unless said):
- backend/src/apiserver/template/v2_template.go (NewV2SpecTemplate): each YAML document that
  protojson-parses as a PlatformSpec with a `kubernetes` platform is the platform spec; a second
  one is refused ("multiple platform specs provided").
- backend/src/v2/compiler/argocompiler: each executor's entry is handed to its driver, which
  parses it with jsonpb into KubernetesExecutorConfig (backend/src/v2/cmd/driver/main.go): an
  unknown field fails the step, so only fields of kubernetes_platform/proto/
  kubernetes_executor_config.proto are written.
- backend/src/v2/driver/driver.go extendPodSpecPatch: secretAsEnv -> env with secretKeyRef
  (2.0.5 on); configMapAsEnv -> env with configMapKeyRef (2.3.0 on: the 2.0.5 driver has no such
  field, so an endpoint from a ConfigMap needs KFP >= 2.3.0).
- driver.go initPodSpecPatch: the container's own `env` (name/value) goes to the pod as is; the
  endpoint and region, which are no secrets, travel there by default.
"""
from __future__ import annotations

import copy
from typing import Dict, Iterable, List, Optional

from core import storage
from core.config import KubeflowConfig, ObjectStoreConfig

ACCESS_KEY_ENV, SECRET_KEY_ENV = "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"
ENDPOINT_ENV, REGION_ENV = "S3_ENDPOINT", "AWS_REGION"


def uses_object_store(paths: Iterable[Optional[str]]) -> bool:
    """True when a path the steps open is s3://."""
    return any(path and storage.scheme(path) == "s3" for path in paths)


def needs_object_store(kubeflow: KubeflowConfig) -> bool:
    """True when a path the steps open is s3://. Only the kubeflow paths can be: the local ones
    they fall back to are refused as buckets on load (core/config/loader.py)."""
    return uses_object_store([kubeflow.pipeline_root, kubeflow.input_base, kubeflow.serving_dir,
                              kubeflow.schema_file])


def executor_config(store: ObjectStoreConfig) -> dict:
    """One executor's KubernetesExecutorConfig (JSON form): the credentials, and the endpoint when
    it comes from a ConfigMap."""
    config: dict = {"secretAsEnv": [{"secretName": store.secret, "keyToEnv": [
        {"secretKey": store.access_key_key, "envVar": ACCESS_KEY_ENV},
        {"secretKey": store.secret_key_key, "envVar": SECRET_KEY_ENV}]}]}
    if store.endpoint_config_map:
        config["configMapAsEnv"] = [{"configMapName": store.endpoint_config_map.name,
                                     "keyToEnv": [{"configMapKey": store.endpoint_config_map.key,
                                                   "envVar": ENDPOINT_ENV}]}]
    return config


def platform_spec(spec: dict, store: ObjectStoreConfig) -> dict:
    """The PlatformSpec document giving every executor of spec the object store's env."""
    labels = sorted(spec["deploymentSpec"]["executors"])
    return {"platforms": {"kubernetes": {"deploymentSpec": {"executors": {
        label: executor_config(store) for label in labels}}}}}


def plain_env(store: ObjectStoreConfig) -> List[Dict[str, str]]:
    """The container env (name/value) that is no secret: the endpoint (unless a ConfigMap gives
    it) and the region."""
    env = [{"name": ENDPOINT_ENV, "value": store.endpoint}] if store.endpoint else []
    return env + [{"name": REGION_ENV, "value": store.region}]


def with_object_store(spec: dict, store: ObjectStoreConfig) -> dict:
    """A copy of spec whose containers also set plain_env (a variable already set is kept)."""
    spec = copy.deepcopy(spec)
    for executor in spec["deploymentSpec"]["executors"].values():
        container = executor.get("container")
        if container is None:
            continue
        env = container.setdefault("env", [])
        names = {e["name"] for e in env}
        env.extend(e for e in plain_env(store) if e["name"] not in names)
    return spec


def pod_env(store: ObjectStoreConfig) -> List[dict]:
    """The same env as Kubernetes EnvVars, for pods the steps create themselves (TFJob replicas):
    the credentials as secretKeyRef, the endpoint as a value or configMapKeyRef."""
    env = [{"name": ACCESS_KEY_ENV, "valueFrom": {"secretKeyRef": {
                "name": store.secret, "key": store.access_key_key}}},
           {"name": SECRET_KEY_ENV, "valueFrom": {"secretKeyRef": {
               "name": store.secret, "key": store.secret_key_key}}}]
    if store.endpoint_config_map:
        env.append({"name": ENDPOINT_ENV, "valueFrom": {"configMapKeyRef": {
            "name": store.endpoint_config_map.name, "key": store.endpoint_config_map.key}}})
    return env + plain_env(store)


__all__ = ["uses_object_store", "needs_object_store", "executor_config", "platform_spec",
           "plain_env", "with_object_store", "pod_env"]
