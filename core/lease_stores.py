"""Where a run lease (core/run_lease.py) is kept, with the conditional writes each store has.

tf.io.gfile has no conditional write, so the lease talks to each store through its own client:
boto3 for s3:// (the client Beam's S3 file system uses, configured from the same environment as
tensorflow-io: core/storage.py), google-cloud-storage for gs:// (the pod's default credentials),
the OS for a local path.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
from pathlib import Path
from typing import Iterator, Mapping, Optional, Tuple

from core import storage

# The answers S3 gives a write whose condition failed: 412 (the ETag or absence did not hold),
# 409 ConditionalRequestConflict (another conditional write to the key was in flight).
S3_LOST = ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")
# What a store answers that has no conditional writes.
S3_UNSUPPORTED = ("NotImplemented", "501")


class LocalStore:
    """A file; each read-decide-write runs under an fcntl lock of `<file>.lock`, so it is atomic
    among the processes of one machine (not across machines sharing a network file system)."""

    def __init__(self, path: str):
        self.path = Path(path[len("file://"):] if path.startswith("file://") else path)
        self.where = str(self.path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read(self) -> Optional[Tuple[bytes, str]]:
        try:
            body = self.path.read_bytes()
        except FileNotFoundError:
            return None
        return body, hashlib.sha256(body).hexdigest()  # every write differs (nonce, release)

    def read(self) -> Optional[Tuple[bytes, str]]:
        if not self.path.parent.is_dir():  # nothing to read, and a read creates no folder
            return None
        with self._locked():
            return self._read()

    def _write(self, body: bytes) -> None:
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}")
        temporary.write_bytes(body)
        os.replace(temporary, self.path)

    def create(self, body: bytes) -> bool:
        with self._locked():
            if self._read() is not None:
                return False
            self._write(body)
            return True

    def replace(self, body: bytes, token: str) -> bool:
        with self._locked():
            found = self._read()
            if found is None or found[1] != token:
                return False
            self._write(body)
            return True


class S3Store:
    """An object, written with If-None-Match / If-Match (core/run_lease.py: what is atomic)."""

    def __init__(self, uri: str, environ: Mapping[str, str] = os.environ, client=None):
        self.bucket, _, self.key = uri[len("s3://"):].partition("/")
        self.where = uri
        self._client = client or _s3_client(environ)

    def read(self) -> Optional[Tuple[bytes, str]]:
        from botocore.exceptions import ClientError

        try:
            answer = self._client.get_object(Bucket=self.bucket, Key=self.key)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise
        return answer["Body"].read(), answer["ETag"]

    def _put(self, body: bytes, **condition) -> bool:
        from botocore.exceptions import ClientError

        try:
            self._client.put_object(Bucket=self.bucket, Key=self.key, Body=body,
                                    ContentType="application/json", **condition)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code")
            if code in S3_LOST:
                return False
            if code not in S3_UNSUPPORTED:
                raise
            # A store without conditional writes: write anyway. The take reads the lease back
            # and the Pusher checks it again, so the run whose write lost still pushes nothing.
            logging.warning("%s: the S3 store does not support conditional writes (%s); the "
                            "run lease is read back instead", self.where, code)
            self._client.put_object(Bucket=self.bucket, Key=self.key, Body=body,
                                    ContentType="application/json")
        return True

    def create(self, body: bytes) -> bool:
        return self._put(body, IfNoneMatch="*")

    def replace(self, body: bytes, token: str) -> bool:
        return self._put(body, IfMatch=token)


def _s3_client(environ: Mapping[str, str]):
    """boto3's client for the endpoint and region tensorflow-io reads (S3_ENDPOINT, AWS_REGION);
    boto3 reads the credentials and AWS_CA_BUNDLE from the environment itself."""
    import boto3

    endpoint = storage.s3_endpoint_url(environ)
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    return boto3.client("s3", endpoint_url=endpoint, region_name=region)


class GcsStore:
    """An object, written with generation preconditions (0: only if absent)."""

    def __init__(self, uri: str):
        from google.cloud import storage as gcs

        bucket, _, key = uri[len("gs://"):].partition("/")
        self.where = uri
        self._blob = gcs.Client().bucket(bucket).blob(key)

    def read(self) -> Optional[Tuple[bytes, str]]:
        from google.api_core.exceptions import NotFound

        try:
            self._blob.reload()
            body = self._blob.download_as_bytes(if_generation_match=self._blob.generation)
        except NotFound:
            return None
        return body, str(self._blob.generation)

    def _upload(self, body: bytes, generation: int) -> bool:
        from google.api_core.exceptions import PreconditionFailed

        try:
            self._blob.upload_from_string(body, content_type="application/json",
                                          if_generation_match=generation)
        except PreconditionFailed:
            return False
        return True

    def create(self, body: bytes) -> bool:
        return self._upload(body, 0)

    def replace(self, body: bytes, token: str) -> bool:
        return self._upload(body, int(token))


def open_store(uri: str, environ: Mapping[str, str] = os.environ):
    """The store of the lease at uri: s3://, gs:// or a local path."""
    kind = storage.scheme(uri)
    if kind == "s3":
        return S3Store(uri, environ)
    if kind == "gs":
        return GcsStore(uri)
    if kind in ("", "file"):
        return LocalStore(uri)
    raise storage.StorageError(f"{uri}: a run lease can be kept on s3://, gs:// or a local "
                               "path only")


__all__ = ["GcsStore", "LocalStore", "S3Store", "open_store"]
