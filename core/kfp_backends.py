"""The open-source KFP backends this template supports, and what each one's install gives the steps.

One table, read at the kubeflow/pipelines release tags (`git show TAG:PATH`); each row names the
files it follows. The config takes its object-store defaults from it (core/config/kubeflow.py),
the doctor compares a cluster with it (pipeline/doctor/cluster.py), and the local backend
emulation (devtools/kfp_backend.py) reads the same rows. Releases: 2.4.1, 2.5.0, then 2.14.0
(there is no 2.6 to 2.13 backend), 2.14.x, 2.15.0, 2.16.x, 2.17.0 (CHANGELOG.md at 2.17.0).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Optional, Tuple

DEFAULT_VERSION = "2.17.0"
SUPPORTED = "2.4.1 to 2.17.x"
_OLDEST = (2, 4, 1)
_MINORS = (4, 5, 14, 15, 16, 17)  # the 2.x release lines from 2.4 on

# Where the platform-agnostic manifests install KFP (manifests/kustomize/env/platform-agnostic/
# kustomization.yaml `namespace: kubeflow`) and the bucket its store holds (base/installs/
# generic/pipeline-install-config.yaml `bucketName: mlpipeline`), at every tag here.
NAMESPACE = "kubeflow"
BUCKET = "mlpipeline"
# The object store's credentials, the same name and keys at every tag: third-party/minio/base/
# and third-party/seaweedfs/base/seaweedfs/mlpipeline-minio-artifact-secret.yaml; the launcher's
# default session (backend/src/v2/config/env.go minioArtifactSecretName, ...AccessKeyKey).
SECRET, ACCESS_KEY_KEY, SECRET_KEY_KEY = "mlpipeline-minio-artifact", "accesskey", "secretkey"
# The API server: deployment ml-pipeline, container ml-pipeline-api-server, image
# ghcr.io/kubeflow/kfp-api-server:<tag> (base/pipeline/ml-pipeline-apiserver-deployment.yaml and
# the `images:` newTag of base/pipeline/kustomization.yaml).
API_SERVER_DEPLOYMENT, API_SERVER_CONTAINER = "ml-pipeline", "ml-pipeline-api-server"
# Multi-user installs only (base/installs/multi-user/pipelines-profile-controller/).
PROFILE_CONTROLLER = "kubeflow-pipelines-profile-controller"
LAUNCHER_CONFIG_MAP = "kfp-launcher"  # backend/src/v2/config/env.go configMapName


@dataclasses.dataclass(frozen=True)
class Backend:
    releases: str
    store: str             # what the manifests install: "minio" or "seaweedfs"
    service: str           # the Service in NAMESPACE that answers S3 on `port`
    port: int
    service_manifest: str  # the file under manifests/kustomize/ that declares it
    # The launcher's endpoint for minio:// roots (backend/src/v2/objectstore/config.go).
    launcher_default_endpoint: str
    # Multi-user: the profile controller gives each namespace its own key, allowed only on
    # key_prefixes(namespace) (pipelines-profile-controller/sync.py iam.put_user_policy);
    # before, it copied the store's one key into every namespace.
    scoped_keys: bool
    # providers.s3 reads maxRetries (backend/src/v2/config/s3.go S3ProviderDefault).
    max_retries: bool
    # credentials.fromEnv: true with an endpoint: the launcher builds its client from the
    # provider's endpoint and the pod's env credentials (objectstore/object_store.go
    # createS3BucketSession, HasStructuredS3Settings); before, fromEnv dropped the endpoint.
    env_credentials_with_endpoint: bool

    @property
    def endpoint(self) -> str:
        """The S3 API as the steps' pods reach it (S3_ENDPOINT)."""
        return f"http://{self.service}.{NAMESPACE}:{self.port}"


_MINIO = Backend(
    releases="2.4.1 to 2.14.x", store="minio", service="minio-service", port=9000,
    service_manifest="third-party/minio/base/minio-service.yaml",
    launcher_default_endpoint="minio-service.kubeflow:9000",  # defaultMinioEndpointInMultiUserMode
    scoped_keys=False, max_retries=False, env_credentials_with_endpoint=False)
# 2.15.0 installs SeaweedFS (env/platform-agnostic -> third-party/seaweedfs/base) and keeps a
# minio-service in front of it, 9000 -> 8333 (third-party/seaweedfs/base/seaweedfs/
# minio-service.yaml), which the launcher still names (DefaultMinioEndpointInMultiUserMode).
_SEAWEEDFS_215 = dataclasses.replace(
    _MINIO, releases="2.15.x", store="seaweedfs",
    service_manifest="third-party/seaweedfs/base/seaweedfs/minio-service.yaml",
    scoped_keys=True, max_retries=True)
# 2.16.0 drops minio-service: the seaweedfs Service answers S3 on 9000 (port http-s3-compat,
# targetPort 8333: third-party/seaweedfs/base/seaweedfs/seaweedfs-service.yaml), and the launcher
# names it (DefaultEndpointInMultiUserMode = "seaweedfs.kubeflow:9000").
_SEAWEEDFS_216 = dataclasses.replace(
    _SEAWEEDFS_215, releases="2.16.x", service="seaweedfs",
    service_manifest="third-party/seaweedfs/base/seaweedfs/seaweedfs-service.yaml",
    launcher_default_endpoint="seaweedfs.kubeflow:9000")
_SEAWEEDFS_217 = dataclasses.replace(_SEAWEEDFS_216, releases="2.17.x",
                                     env_credentials_with_endpoint=True)
# 2.x minor -> its row.
BACKENDS = {4: _MINIO, 5: _MINIO, 14: _MINIO, 15: _SEAWEEDFS_215, 16: _SEAWEEDFS_216,
            17: _SEAWEEDFS_217}


def parse(version: str) -> Tuple[int, int, int]:
    """(2, 17, 0) for "2.17.0"; ValueError naming what is supported otherwise."""
    match = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)", str(version).strip())
    numbers = tuple(int(n) for n in match.groups()) if match else None
    if numbers is None or numbers < _OLDEST or numbers[0] != 2 or numbers[1] not in _MINORS:
        raise ValueError(
            f"'{version}' is not a KFP backend release this template supports: {SUPPORTED} "
            f"(2.4.1, 2.5.0, then 2.14.x to 2.17.x: no 2.6 to 2.13 backend was released)")
    return numbers  # type: ignore[return-value]


def backend(version: str) -> Backend:
    return BACKENDS[parse(version)[1]]


def key_prefixes(namespace: str) -> Tuple[str, ...]:
    """The keys of BUCKET a namespace's own key may use on a multi-user install with
    scoped_keys (sync.py at 2.15.0 to 2.17.0: mlpipeline/{artifacts,private-artifacts/<ns>,
    private/<ns>,shared}/*). The controller also expires `private-artifacts/` objects after
    ARTIFACT_RETENTION_DAYS when that is positive (upsert_lifecycle_policy)."""
    return ("artifacts/", f"private-artifacts/{namespace}/", f"private/{namespace}/", "shared/")


def multi_user_default_root(namespace: str) -> str:
    """The defaultPipelineRoot the profile controller writes into each namespace's kfp-launcher
    from 2.15.0 (sync.py); runs of this template send their own root instead."""
    return f"minio://{BUCKET}/private-artifacts/{namespace}/v2/artifacts"


def allowed_uris(namespace: str) -> str:
    return ", ".join(f"s3://{BUCKET}/{p}" for p in key_prefixes(namespace))


def outside_key_prefixes(uri: str, namespace: str) -> Optional[str]:
    """Why a namespace's scoped key cannot read and write uri (an s3:// URI), or None."""
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    if bucket != BUCKET:
        return f"bucket {bucket}, not {BUCKET}"
    if not any((key.rstrip("/") + "/").startswith(p) for p in key_prefixes(namespace)):
        return "outside those prefixes"
    return None
