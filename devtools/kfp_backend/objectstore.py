"""The launcher's bucket (objectstore/object_store.go, objectstore/config.go): s3:// and minio://
as S3 through boto3, gs:// refused here.

The session comes from the namespace's kfp-launcher ConfigMap as the driver reads it
(config/env.go GetStoreSessionInfo; config/s3.go, config/minio.go ProvideSessionInfo): its
`providers` give the endpoint, region, disableSSL, forcePathStyle and the credentials (a
secretRef into the namespace's Secrets, here --secrets, or fromEnv: the pod's AWS_* env). With
no providers.s3 an s3:// root is fromEnv, and the launcher's client is AWS's own (2.4.1 to 2.16:
createS3BucketSession returns no session and OpenBucket opens `s3://bucket` with the AWS SDK's
defaults; 2.17.0: newS3Client(ctx, nil, nil)): the steps' store is never reached, and the first
download or upload fails. The AWS SDK's AWS_ENDPOINT_URL* variables are not modelled: the spec
never sets them.
"""
from __future__ import annotations

import json
import os
import posixpath
import re
import threading
from pathlib import Path
from typing import Optional

import yaml

from core import yaml_text
from devtools.kfp_backend.errors import SpecError, TaskFailed
from devtools.kfp_backend.versions import Backend

# objectstore/config.go: bucketPattern.
BUCKET_PATTERN = re.compile(r"(^[a-z][a-z0-9]+:///?)([^/?]+)(/[^?]*)?(\?.+)?$")
# config/env.go minioArtifactSecretName and its keys: the default minio:// session.
MINIO_SECRET, MINIO_ACCESS_KEY, MINIO_SECRET_KEY = "mlpipeline-minio-artifact", "accesskey", \
    "secretkey"


def split_uri(uri: str) -> tuple[str, str, str]:
    """(scheme://, bucket, key) as objectstore/config.go ParseBucketPathToConfig parses a URI."""
    match = BUCKET_PATTERN.match(uri)
    if not match:
        raise SpecError(f"{uri}: unrecognized pipeline root format "
                        "(objectstore/config.go ParseBucketPathToConfig)")
    return match.group(1), match.group(2), (match.group(3) or "").strip("/")


def session_params(root: str, backend: Backend, launcher_config: dict | None = None
                   ) -> tuple[str, dict[str, str]]:
    """(provider, params) the driver gives the launcher for root (config/env.go
    GetStoreSessionInfo); TaskFailed where the driver stops (a malformed `providers`, missing
    credentials: "invalid provider config")."""
    from pipeline.kubeflow.client.cluster import s3_session  # the same reading of config/s3.go

    scheme = split_uri(root)[0][:-3]
    data = ((launcher_config or {}).get("data") or {})
    if scheme not in ("s3", "minio"):
        return scheme, {"fromEnv": "true"}
    try:
        providers = yaml_text.load(data.get("providers") or "") or {}
        if not isinstance(providers, dict):
            raise yaml.YAMLError(f"a {type(providers).__name__}, not a mapping")
    except yaml.YAMLError as error:
        raise TaskFailed(f"failed to unmarshall kfp bucket providers, ensure that providers "
                         f"config is well formed: {error}") from None
    if scheme == "minio" and not (providers.get("minio") or "?" in root):
        return "minio", _default_minio_params(backend)  # config/minio.go, config/env.go
    entry = {"providers": json.dumps({"s3": providers.get(scheme) or {}})}
    params, error = s3_session(entry, root)
    if error:
        raise TaskFailed(f"driver: {error} (kfp-launcher providers.{scheme})")
    if not backend.session_max_retries:  # config/s3.go: maxRetries from 2.15.0
        params.pop("maxRetries", None)
    return scheme, params


def _default_minio_params(backend: Backend) -> dict[str, str]:
    """config/env.go getDefaultMinioSessionInfo."""
    params = {"accessKeyKey": MINIO_ACCESS_KEY, "disableSSL": "true", "fromEnv": "false",
              "region": "minio", "secretKeyKey": MINIO_SECRET_KEY, "secretName": MINIO_SECRET,
              # objectstore/config.go, the endpoint outside the kubeflow namespace
              "endpoint": "seaweedfs.kubeflow:9000" if backend.seaweedfs_endpoint
              else "minio-service.kubeflow:9000"}
    if backend.session_max_retries:
        params["maxRetries"] = "5"
    return params


def session_info(root: str, backend: Backend, launcher_config: dict | None = None) -> str:
    """The store_session_info every artifact records (metadata/client.go RecordArtifact); Go's
    json.Marshal sorts the keys."""
    if "://" not in root:
        return json.dumps({"Provider": "local", "Params": {}})
    provider, params = session_params(root, backend, launcher_config)
    return json.dumps({"Provider": provider, "Params": dict(sorted(params.items()))},
                      separators=(",", ":"))


class AwsS3:
    """The client a fromEnv session without an endpoint gets: AWS's S3, which the steps' store
    is not. Nothing is sent: every call fails as the launcher's does there (no such host
    without internet, InvalidAccessKeyId with it)."""

    def __init__(self, region: str):
        self.endpoint = f"https://s3.{region}.amazonaws.com"

    def error(self, operation: str) -> str:
        return (f"operation error S3: {operation}, {self.endpoint}: the launcher's client is "
                "AWS S3's, not the steps' store: the kfp-launcher ConfigMap has no "
                "providers.s3 for this root (config/s3.go: fromEnv), so objectstore.OpenBucket "
                "used the AWS SDK's defaults; add providers (deploy/kubeflow/README.md)")


class ObjectStore:
    """objectstore.OpenBucket's bucket: S3 for s3:// and minio://, via boto3; one client per
    session (boto3's is thread-safe). secrets: the namespace's Secrets, {name: {key: value}}."""

    def __init__(self, backend: Backend, launcher_config: dict | None = None,
                 secrets: dict[str, dict[str, str]] | None = None, namespace: str = "kubeflow"):
        self.backend, self.launcher_config = backend, launcher_config
        self.secrets, self.namespace = secrets or {}, namespace
        self._clients: dict[tuple, object] = {}
        self._opening = threading.Lock()

    def client(self, uri: str, env: dict[str, str] | None = None):
        """OpenBucket for uri; env: the pod's (fromEnv credentials)."""
        scheme = split_uri(uri)[0]
        if scheme == "gs://":
            raise SpecError(f"{uri}: gs:// cannot be reached from here; use s3:// or a local "
                            "root for a conformance run")
        provider, params = session_params(uri, self.backend, self.launcher_config)
        with self._opening:
            return self._open(uri, params, dict(env or {}))

    def _open(self, uri: str, params: dict[str, str], env: dict[str, str]):
        bucket = split_uri(uri)[1]
        from_env = params.get("fromEnv") == "true"
        endpoint = params.get("endpoint", "")
        if from_env and not (self.backend.env_credentials_with_endpoint and endpoint):
            endpoint = ""  # createS3BucketSession: no session, the AWS SDK's defaults
        if endpoint == _default_minio_params(self.backend)["endpoint"]:
            # Checked first (the launcher reads the Secret first): the cause, here.
            raise TaskFailed(
                f"the launcher cannot open the bucket of {uri}: its default minio:// session "
                f"(config/env.go getDefaultMinioSessionInfo) is the cluster's Service "
                f"{endpoint}, which this runner cannot reach; give --launcher-config with "
                "providers.minio (an endpoint reachable here) and --secrets")
        if from_env:
            access, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
        else:
            access, secret = self._credentials(bucket, params)
        region = params.get("region") or env.get("AWS_REGION") or "us-east-1"
        if not endpoint or re.match(r"^(https://)?s3\.amazonaws\.com", endpoint.lower()):
            return AwsS3(region)
        if "://" not in endpoint:  # object_store.go newS3Client; 2.5.0: aws.Config.DisableSSL
            endpoint = ("http://" if params.get("disableSSL") == "true" else "https://") + endpoint
        key = (endpoint, region, access, secret, params.get("forcePathStyle", "true"))
        if key not in self._clients:
            import boto3
            from botocore.config import Config

            style = "path" if params.get("forcePathStyle", "true") == "true" else "virtual"
            self._clients[key] = boto3.client(
                "s3", endpoint_url=endpoint, aws_access_key_id=access,
                aws_secret_access_key=secret, region_name=region,
                config=Config(s3={"addressing_style": style}))
        return self._clients[key]

    def _credentials(self, bucket: str, params: dict[str, str]) -> tuple[str, str]:
        """object_store.go getS3BucketCredential: the Secret's two keys."""
        name = params.get("secretName", "")
        values = self.secrets.get(name)
        where = (f"Failed to open bucket {bucket!r}: failed to retrieve credentials for bucket "
                 f"{bucket}: failed to get Bucket credentials from secret name={name!r} "
                 f"namespace={self.namespace!r}")
        if values is None:
            raise TaskFailed(f"{where}: secrets {name!r} not found (pass it with --secrets)")
        access, secret = values.get(params.get("accessKeyKey", "")), values.get(
            params.get("secretKeyKey", ""))
        if not access or not secret:
            raise TaskFailed(f"{where}: could not find specified keys "
                             f"{params.get('accessKeyKey')!r} or {params.get('secretKeyKey')!r}")
        return access, secret

    def download(self, uri: str, local_dir: Path, pod: Optional[Path] = None,
                 env: dict[str, str] | None = None) -> int:
        """objectstore/object_store.go DownloadBlob: every object listed with the key as prefix
        (to 2.16: also a sibling `<key>-x`, which lands beside local_dir by filepath.Rel; from
        2.17.0 only the key and what is under `<key>/`, and no `..`), to local_dir/<relative
        key>. An object whose key ends in "/" is written as a file.
        `pod`: the emulated pod's folder (default: local_dir). To 2.16 a key with `../` is
        written wherever filepath.Join puts it, inside the real pod's file system; here that
        would be this machine's, so a target outside `pod` fails the task instead (issue 25)."""
        _, bucket, key = split_uri(uri)
        client, count = self.client(uri, env), 0
        if isinstance(client, AwsS3):
            raise TaskFailed(f"failed to download input artifact from remote storage URI "
                             f"{uri!r}: failed to list objects in remote storage {key!r}: "
                             + client.error("ListObjectsV2"))
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key):
            for obj in page.get("Contents", []):
                if self.backend.download_under_key and not (
                        obj["Key"] == key or obj["Key"].startswith(key.rstrip("/") + "/")):
                    continue  # isBlobKeyUnderPrefix
                target = local_dir / go_rel(key, obj["Key"])
                if self.backend.download_under_key and (
                        ".." in obj["Key"].split("/") or not _within(target, local_dir)):
                    raise TaskFailed(f"failed to download input artifact from URI {uri!r}: "
                                     f"path traversal detected: blob key {obj['Key']!r} "
                                     "(objectstore/object_store.go sanitizeDownloadPath)")
                if not _within(target, pod or local_dir):
                    raise TaskFailed(
                        f"failed to download input artifact from URI {uri!r}: blob key "
                        f"{obj['Key']!r} lands at {os.path.normpath(target)}, outside the pod's "
                        f"folder {pod or local_dir}: KFP to 2.16 writes it there inside the pod; "
                        "the emulation refuses to write outside its own folders")
                self._download_file(client, bucket, obj["Key"], target, uri)
                count += 1
        return count

    @staticmethod
    def _download_file(client, bucket: str, key: str, target: Path, uri: str) -> None:
        # filepath.Rel + Join: a folder marker "<key>/" lands as a FILE at local_dir (or
        # local_dir/sub), and the files below it then cannot be written.
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_dir():
                raise IsADirectoryError(f"{target} is a directory")
            client.download_file(bucket, key, str(target))
        except OSError as error:
            raise TaskFailed(f"failed to download input artifact from remote storage URI "
                             f"{uri!r}: downloadFile(): unable to complete copying {key!r} to "
                             f"local storage {str(target)!r}: {error}") from None

    def upload(self, local: Path, uri: str, env: dict[str, str] | None = None) -> int:
        """objectstore/object_store.go UploadBlob: a file to the key, a folder's files to
        <key>/<relative path>."""
        _, bucket, key = split_uri(uri)
        client, count = self.client(uri, env), 0
        if isinstance(client, AwsS3):
            raise TaskFailed(f"failed to upload output artifact to remote storage URI {uri!r}: "
                             f"uploadFile(): unable to complete copying {str(local)!r} to remote "
                             f"storage {key!r}: " + client.error("PutObject"))
        if local.is_file():
            client.upload_file(str(local), bucket, key)
            return 1
        for path in sorted(local.rglob("*")):
            if path.is_file():
                client.upload_file(str(path), bucket, f"{key}/{path.relative_to(local)}")
                count += 1
        return count


def go_rel(base: str, target: str) -> str:
    """Go's filepath.Rel on two relative slash paths, as DownloadBlob calls it: lexical, after
    Clean, so `<key>/../../x` climbs as many levels as it says (Python's os.path.relpath would
    first resolve both against this process's working directory and stop at /)."""
    base_parts = [p for p in posixpath.normpath(base).split("/") if p not in ("", ".")]
    target_parts = [p for p in posixpath.normpath(target).split("/") if p not in ("", ".")]
    common = 0
    while (common < min(len(base_parts), len(target_parts))
           and base_parts[common] == target_parts[common]):
        common += 1
    if ".." in base_parts[common:]:
        raise ValueError(f"Rel: can't make {target} relative to {base}")
    return "/".join([".."] * (len(base_parts) - common) + target_parts[common:]) or "."


def _within(path: Path, folder: Path) -> bool:
    path, folder = Path(os.path.abspath(path)), Path(os.path.abspath(folder))
    return path == folder or folder in path.parents
