"""The launcher's bucket (objectstore/object_store.go, objectstore/config.go): s3:// and minio://
as S3 through boto3, gs:// refused here.

The endpoint and credentials come from this process's environment (S3_ENDPOINT,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION), where on a cluster the launcher takes them
from the kfp-launcher config and its Secret (objectstore.OpenBucket).
"""
from __future__ import annotations

import json
import os
import posixpath
import re
import threading
from pathlib import Path
from typing import Optional

from devtools.kfp_backend.errors import SpecError, TaskFailed
from devtools.kfp_backend.versions import Backend

# objectstore/config.go: bucketPattern.
BUCKET_PATTERN = re.compile(r"(^[a-z][a-z0-9]+:///?)([^/?]+)(/[^?]*)?(\?.+)?$")


def split_uri(uri: str) -> tuple[str, str, str]:
    """(scheme://, bucket, key) as objectstore/config.go ParseBucketPathToConfig parses a URI."""
    match = BUCKET_PATTERN.match(uri)
    if not match:
        raise SpecError(f"{uri}: unrecognized pipeline root format "
                        "(objectstore/config.go ParseBucketPathToConfig)")
    return match.group(1), match.group(2), (match.group(3) or "").strip("/")


def session_info(root: str, backend: Backend) -> str:
    """The store_session_info every artifact records (metadata/client.go RecordArtifact), as
    config/env.go GetStoreSessionInfo gives it with no providers in kfp-launcher: the MinIO
    defaults for minio://, fromEnv for s3://; Go's json.Marshal sorts the keys."""
    if "://" not in root:
        return json.dumps({"Provider": "local", "Params": {}})
    provider = split_uri(root)[0][:-3]
    params = {"fromEnv": "true"}
    if provider == "minio":  # config/env.go getDefaultMinioSessionInfo
        params = {"accessKeyKey": "accesskey", "disableSSL": "true", "fromEnv": "false",
                  "region": "minio", "secretKeyKey": "secretkey",
                  "secretName": "mlpipeline-minio-artifact",
                  # objectstore/config.go, the endpoint outside the kubeflow namespace
                  "endpoint": "seaweedfs.kubeflow:9000" if backend.seaweedfs_endpoint
                  else "minio-service.kubeflow:9000"}
        if backend.session_max_retries:
            params["maxRetries"] = "5"
    return json.dumps({"Provider": provider, "Params": dict(sorted(params.items()))},
                      separators=(",", ":"))


class ObjectStore:
    """objectstore.OpenBucket's bucket: S3 for s3:// and minio://, via boto3; one client for
    concurrent tasks (boto3's is thread-safe)."""

    def __init__(self, environ: dict[str, str], backend: Backend):
        self.environ, self.backend = environ, backend
        self._client = None
        self._opening = threading.Lock()

    def client(self, uri: str):
        scheme = split_uri(uri)[0]
        if scheme == "gs://":
            raise SpecError(f"{uri}: gs:// cannot be reached from here; use s3:// or a local "
                            "root for a conformance run")
        with self._opening:
            return self._open(uri)

    def _open(self, uri: str):
        if self._client is None:
            missing = [k for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
                       if not self.environ.get(k)]
            if missing or not self.environ.get("S3_ENDPOINT"):
                raise SpecError(
                    f"the launcher cannot open the bucket of {uri}: set S3_ENDPOINT and "
                    f"AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY for this runner (on a cluster "
                    "the launcher takes them from the kfp-launcher config and the "
                    "mlpipeline-minio-artifact Secret: objectstore/object_store.go OpenBucket)")
            import boto3

            self._client = boto3.client(
                "s3", endpoint_url=self.environ["S3_ENDPOINT"],
                aws_access_key_id=self.environ["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=self.environ["AWS_SECRET_ACCESS_KEY"],
                region_name=self.environ.get("AWS_REGION") or "us-east-1")
        return self._client

    def download(self, uri: str, local_dir: Path, pod: Optional[Path] = None) -> int:
        """objectstore/object_store.go DownloadBlob: every object listed with the key as prefix
        (to 2.16: also a sibling `<key>-x`, which lands beside local_dir by filepath.Rel; from
        2.17.0 only the key and what is under `<key>/`, and no `..`), to local_dir/<relative
        key>. An object whose key ends in "/" is written as a file.
        `pod`: the emulated pod's folder (default: local_dir). To 2.16 a key with `../` is
        written wherever filepath.Join puts it, inside the real pod's file system; here that
        would be this machine's, so a target outside `pod` fails the task instead (issue 25)."""
        _, bucket, key = split_uri(uri)
        client, count = self.client(uri), 0
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

    def upload(self, local: Path, uri: str) -> int:
        """objectstore/object_store.go UploadBlob: a file to the key, a folder's files to
        <key>/<relative path>."""
        _, bucket, key = split_uri(uri)
        client, count = self.client(uri), 0
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
