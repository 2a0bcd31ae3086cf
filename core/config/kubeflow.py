"""The kubeflow section: the image, where the steps read and write as the cluster's pods see it,
the object store, the run lease, the schedule."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Optional

from pydantic import Field, field_validator, model_validator

from core import kfp_backends, storage
from core.resources import ResourcesConfig
from core.config.base import renamed_key, Section, K8S_NAME, K8S_KEY
from core.config.runs import BeamArgs


class ConfigMapKeyConfig(Section):
    name: str = Field(pattern=K8S_NAME)
    key: str = Field(pattern=K8S_KEY)


class ObjectStoreConfig(Section):
    """What the steps' pods get when a kubeflow path is s3:// (SeaweedFS, MinIO or any S3 API).

    The credentials come from a Kubernetes Secret in the run's namespace and the compiled
    spec names only the Secret and its keys (pipeline/kubeflow/client/kubernetes_platform.py);
    core/storage.py lists the variables the steps read.
    """
    # The Secret and its keys: by default the one KFP's manifests give the object store
    # (core/kfp_backends.py); on multi-user KFP the profile controller writes it per namespace.
    secret: str = Field(kfp_backends.SECRET, pattern=K8S_NAME)
    access_key_key: str = Field(kfp_backends.ACCESS_KEY_KEY, pattern=K8S_KEY)
    secret_key_key: str = Field(kfp_backends.SECRET_KEY_KEY, pattern=K8S_KEY)
    # The S3 API as the pods reach it (S3_ENDPOINT); null for AWS S3. Unset: the store of
    # kubeflow.backend_version's manifests (KubeflowConfig fills it in; this default is that of
    # the default backend).
    endpoint: Optional[str] = kfp_backends.backend(kfp_backends.DEFAULT_VERSION).endpoint
    # Or a ConfigMap key that holds it (needs KFP >= 2.3.0's driver), so that one spec serves
    # several clusters; then `endpoint` must be null.
    endpoint_config_map: Optional[ConfigMapKeyConfig] = None
    region: str = Field("us-east-1", pattern=r"^[a-z0-9-]+$")

    @field_validator("endpoint")
    @classmethod
    def _endpoint_url(cls, endpoint: Optional[str]) -> Optional[str]:
        if endpoint is not None and not re.fullmatch(r"https?://[^/\s:]+(:\d+)?/?", endpoint):
            raise ValueError(f"'{endpoint}' is not an S3 endpoint URL: http(s)://host[:port], "
                             "e.g. http://seaweedfs.kubeflow:9000")
        return endpoint.rstrip("/") if endpoint else endpoint

    @model_validator(mode="before")
    @classmethod
    def _one_endpoint(cls, raw):
        if isinstance(raw, dict) and raw.get("endpoint_config_map"):
            if raw.get("endpoint"):
                raise ValueError("set 'endpoint' or 'endpoint_config_map', not both")
            raw = {**raw, "endpoint": None}  # the ConfigMap replaces the default endpoint
        return raw


class RunLeaseConfig(Section):
    """One Kubeflow run of the pipeline at a time may push (core/run_lease.py): a run's first
    step takes a lease object beside the runs (<pipeline_root>/<pipeline>/.night-lease.json), a
    second run started meanwhile stops there, the Pusher pushes only for the holder, and the last
    step (or a failing one) releases it."""
    enabled: bool = True
    # How long a run holds the lease at most: a run killed before it could release it blocks the
    # next ones until then. Longer than the longest night (training.timeout_s bounds the TFJob
    # alone); a run still going at the expiry pushes nothing. 26 h by default: a nightly run
    # after a killed one is refused once, with the holder named, rather than risking two pushes.
    expiry_s: int = Field(26 * 3600, ge=600)


class KubeflowConfig(Section):
    """Kubeflow Pipelines (open-source KFP v2): the image, where steps read and write, the schedule.

    Paths here are as the cluster's pods see them (gs:// or s3:// URIs); unset ones fall back to
    the local paths above, which only a local run of the compiled spec
    (devtools.kfp_backend) can use.
    """
    image: str = "tfx-pipeline-template:0.1.0"
    output_dir: Optional[Path] = None
    pipeline_root: Optional[str] = None
    input_base: Optional[str] = None
    serving_dir: Optional[str] = None
    schema_file: Optional[str] = None
    endpoint: Optional[str] = None
    # The KFP backend release the cluster runs (the ml-pipeline deployment's image tag, which
    # `python -m pipeline.doctor --runner kubeflow` reads): the object store's defaults follow it.
    backend_version: str = kfp_backends.DEFAULT_VERSION
    # Full Kubeflow (the profile controller owns each namespace's kfp-launcher and, from KFP
    # 2.15.0, gives it a key that may use only a few prefixes of the bucket): needs `namespace`.
    multi_user: bool = False
    namespace: Optional[str] = Field(None, pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    service_account: Optional[str] = None
    experiment: str = Field("nightly", min_length=1)
    schedule: str = "0 2 * * *"
    beam_args: BeamArgs = []
    # For s3:// paths: the Secret with the credentials, the endpoint and region.
    object_store: ObjectStoreConfig = ObjectStoreConfig()
    # KFP's max_concurrency holds within one recurring run only: the lease keeps a manual or
    # second run from pushing against the same baseline.
    run_lease: RunLeaseConfig = RunLeaseConfig()
    # CPU and memory of each step's pod (Kubernetes quantities; core/resources.py).
    resources: ResourcesConfig = ResourcesConfig()

    @model_validator(mode="before")
    @classmethod
    def _renamed_night_lease(cls, raw):
        return renamed_key(raw, "kubeflow", "night_lease", "run_lease",
                            "it guards any run, manual ones too")

    @model_validator(mode="before")
    @classmethod
    def _store_of_the_backend(cls, raw):
        """An object_store.endpoint left unset is the store kubeflow.backend_version installs
        (SeaweedFS's service from 2.16.0, MinIO's before: core/kfp_backends.py)."""
        if not isinstance(raw, dict):
            return raw
        try:
            backend = kfp_backends.backend(raw.get("backend_version",
                                                   kfp_backends.DEFAULT_VERSION))
        except ValueError:
            return raw  # reported by _supported_backend
        store = raw.get("object_store") or {}
        if isinstance(store, dict) and "endpoint" not in store and not store.get(
                "endpoint_config_map"):
            raw = {**raw, "object_store": {**store, "endpoint": backend.endpoint}}
        return raw

    @field_validator("backend_version", mode="before")
    @classmethod
    def _supported_backend(cls, version) -> str:
        if not isinstance(version, str):  # YAML reads 2.17 unquoted as a number
            raise ValueError(f"{version!r} is not text: quote the release, e.g. "
                             "backend_version: \"2.17.0\"")
        kfp_backends.parse(version)
        return version

    @property
    def backend(self) -> kfp_backends.Backend:
        return kfp_backends.backend(self.backend_version)

    @model_validator(mode="after")
    def _multi_user_paths(self) -> "KubeflowConfig":
        """On multi-user KFP 2.15+ the namespace's own key (the profile controller's Secret) may
        use only a few prefixes of the bucket: a path outside them fails in a pod with Access
        Denied, after the upload, so it is refused here, where the config says so."""
        if not self.multi_user:
            return self
        if not self.namespace:
            raise ValueError("multi_user needs namespace: your profile's namespace, where the "
                             "runs, their kfp-launcher ConfigMap and their object-store key are")
        if not self.backend.scoped_keys or self.object_store.secret != kfp_backends.SECRET:
            return self
        ns = self.namespace
        outside = [f"{key} {uri} ({why})" for key, uri in self.s3_paths().items()
                   if (why := kfp_backends.outside_key_prefixes(uri, ns))]
        if outside:
            raise ValueError(
                f"on multi-user KFP {self.backend_version} the namespace's key (Secret "
                f"{kfp_backends.SECRET} in {ns}, written by the profile controller) may use only "
                f"{kfp_backends.allowed_uris(ns)}: {'; '.join(outside)} would be refused. Put "
                f"them there (e.g. pipeline_root s3://{kfp_backends.BUCKET}/private-artifacts/"
                f"{ns}/tfx/..., data and serving under s3://{kfp_backends.BUCKET}/private/{ns}/), "
                "or name a Secret of your own in object_store.secret")
        return self

    def s3_paths(self) -> Dict[str, str]:
        """The kubeflow paths on s3://, by key."""
        return {key: getattr(self, key) for key in ("pipeline_root", "input_base", "serving_dir",
                                                    "schema_file")
                if (getattr(self, key) or "").startswith("s3://")}

    @field_validator("pipeline_root", "input_base", "serving_dir", "schema_file")
    @classmethod
    def _openable(cls, uri: Optional[str]) -> Optional[str]:
        # A URI the steps' TensorFlow cannot open (minio://, ...) fails here, not in a pod.
        problem = storage.problem(uri) if uri and "://" in uri else None
        if problem:
            raise ValueError(problem)
        return uri

    @field_validator("image")
    @classmethod
    def _pinned_image(cls, image: str) -> str:
        # A run must use the code its spec was compiled from: an explicit tag or digest.
        name, _, digest = image.partition("@")
        tag = name.rsplit("/", 1)[-1].partition(":")[2]
        if not re.fullmatch(r"[a-z0-9][a-z0-9._/:-]*", name) or not (
                re.fullmatch(r"sha256:[0-9a-f]{64}", digest) if digest
                else re.fullmatch(r"[\w][\w.-]{0,127}", tag) and tag != "latest"):
            raise ValueError(f"'{image}' is not name:tag (or name@sha256:...) with a pinned tag; "
                             "':latest' or no tag would let a run use other code than it was "
                             "compiled from")
        return image

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, endpoint: Optional[str]) -> Optional[str]:
        if endpoint is not None and not re.fullmatch(r"https?://[^/\s]+(/\S*)?", endpoint):
            raise ValueError(f"'{endpoint}' is not an http(s) URL of the KFP API")
        return endpoint

    @field_validator("schedule")
    @classmethod
    def _cron(cls, schedule: str) -> str:
        if len(schedule.split()) not in (5, 6):
            raise ValueError(f"'{schedule}' is not a cron expression: 5 fields (minute hour "
                             "day month weekday) or 6 with seconds first")
        return schedule

    @property
    def kfp_cron(self) -> str:
        """KFP's scheduler takes 6 fields, seconds first."""
        fields = self.schedule.split()
        return " ".join(["0", *fields] if len(fields) == 5 else fields)
