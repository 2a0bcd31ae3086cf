"""Storage: the file systems a run's paths need, set up in each process that touches them.

TensorFlow 2.16 opens local paths and gs:// by itself. s3:// (AWS S3, MinIO, any S3 API) comes
from tensorflow-io's S3 file system, which reads its settings from the environment:

    S3_ENDPOINT            the S3 API URL, e.g. http://seaweedfs.kubeflow:9000 (unset: AWS)
    AWS_ACCESS_KEY_ID      \\ the credentials; on Kubeflow from a Kubernetes Secret
    AWS_SECRET_ACCESS_KEY  /  (kubeflow.object_store), never written into the spec
    AWS_REGION             the bucket's region (MinIO: any, e.g. us-east-1)

Beam's own S3 file system (what the data steps' Beam pipelines read and write through) is a boto3
client configured by pipeline options: `beam_s3_args` derives them from the same variables.

Three things differ on s3://:
- `minio://` (KFP's default root) is no file system TensorFlow knows: refused with the fix.
- A process that touched s3:// through tensorflow-io 0.37.1 aborts at interpreter exit ("pure
  virtual method called", SIGABRT, status 134), so a step that succeeded would fail: `exit_now`
  ends the process before the interpreter's teardown.
- S3 has no folders: tensorflow-io's makedirs writes nothing, so a folder exists only through
  the objects under it, and an output a step leaves empty reads back as missing. Kubeflow steps
  rely on no empty folder (TFX's kubeflow_v2_run_executor never creates output folders; the
  baseline and blessing say what they hold in their properties; ServingBaseline treats a missing
  serving dir as "nothing serves"), and must not write `<folder>/` marker objects either: KFP's
  launcher downloads every input artifact by listing its prefix and writes a marker key as a
  file, so no file below it could then be written (backend/src/v2/objectstore/object_store.go,
  DownloadBlob / downloadFile, KFP 2.3.0). TFX's local runner does rely on folders (its cache
  reuses an output only if `fileio.exists(uri)`, orchestration/portable/cache_utils.py), which is
  one reason local runs keep local paths.
"""
from __future__ import annotations

import logging
import os
import re
import sys
from typing import Callable, Iterable, List, Mapping, Optional

# Scheme -> what opens it. TensorFlow 2.16 itself: local paths and gs://; tensorflow-io: s3://.
SUPPORTED = {"": "a local path", "file": "a local path", "gs": "TensorFlow",
             "s3": "tensorflow-io"}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


class StorageError(ValueError):
    """A path no step can open; the message says which and what to use instead."""


# A pushed version's folder name, as TF Serving reads one (sources/storage_path/
# file_system_storage_path_source.cc: a child folder whose name is ASCII digits only, C's
# isdigit byte by byte): not str.isdigit, which also takes '²' and other Unicode digits. The
# folder keeps its own spelling (`0012`), which is what paths under the base must use.
VERSION_NAME = re.compile(r"[0-9]+")


def is_version(name: str) -> bool:
    return VERSION_NAME.fullmatch(name) is not None


def newest_version(names: Iterable[str]) -> Optional[str]:
    """The highest-numbered version name, spelled as its folder is (`0012` stays `0012`)."""
    versions = [n for n in names if is_version(n)]
    return max(versions, key=int) if versions else None


# Object stores: no folders, only keys (a "folder" is the prefix of the keys under it).
OBJECT_STORES = ("s3", "gs")


def makedirs(path: str, make: Callable[[str], None]) -> None:
    """make(path) (tf.io.gfile.makedirs) where there are folders; nothing on an object store.

    On s3:// tensorflow-io's CreateDir (tensorflow_io/core/filesystems/s3/s3_filesystem.cc) can
    write a `<dir>/` marker object, which KFP's launcher then downloads as a file (module
    docstring); gs:// (TensorFlow's GCS file system, CreateDir) writes one. A file written there
    needs no folder, so the steps' own code calls this, never tf.io.gfile.makedirs
    (tests/test_storage.py greps for it): no marker by construction, whichever tensorflow-io.
    (tensorflow-io 0.37.1 against moto wrote none for makedirs or mkdir on a prefix that already
    held objects, nor on a new one below it.)
    The caller passes TensorFlow's makedirs: core/ imports no TensorFlow (tests/test_layout.py).
    """
    if scheme(path) not in OBJECT_STORES:
        make(path)


def scheme(uri: str) -> str:
    """'s3' for s3://bucket/key, '' for a local path."""
    match = _SCHEME.match(uri)
    return match.group(1).lower() if match else ""


def problem(uri: str) -> Optional[str]:
    """Why TensorFlow (with tensorflow-io) cannot open uri, or None when it can."""
    kind = scheme(uri)
    if kind == "minio":
        return (f"{uri}: TensorFlow cannot open minio:// (KFP's default root): use "
                f"s3://{uri.split('://', 1)[1]} with KFP's store as the S3 endpoint "
                "(kubeflow.object_store.endpoint; deploy/kubeflow/README.md, "
                "'SeaweedFS / MinIO / S3')")
    if kind not in SUPPORTED:
        return (f"{uri}: {kind}:// is not a file system the steps can open; use a local "
                "path, gs:// or s3://")
    return None


def check(uris: Iterable[Optional[str]]) -> List[str]:
    """The uris given, once each can be opened; StorageError naming every one that can't.
    (pipeline/kubeflow/step/file_systems.py registers what they need with TensorFlow.)"""
    uris = [u for u in uris if u]
    problems = [p for p in map(problem, uris) if p]
    if problems:
        raise StorageError("\n".join(problems))
    return uris


def exit_now(code: int) -> None:
    """Ends the process with code, skipping the interpreter's teardown (see module docstring)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or broken pipe: nothing left to save
            pass
    logging.shutdown()  # logging handlers (files included) are flushed and closed
    os._exit(code)


def s3_endpoint_url(environ: Mapping[str, str]) -> Optional[str]:
    """S3_ENDPOINT as a URL (None: AWS); tensorflow-io's form host:port means https unless
    S3_USE_HTTPS=0."""
    endpoint = environ.get("S3_ENDPOINT", "").strip()
    if endpoint and "://" not in endpoint:
        secure = environ.get("S3_USE_HTTPS", "1") != "0"
        endpoint = f"{'https' if secure else 'http'}://{endpoint}"
    return endpoint or None


def beam_s3_args(environ: Mapping[str, str]) -> List[str]:
    """Beam's S3 options (apache_beam/options/pipeline_options.py, S3Options) from the env.

    Only the endpoint and region: Beam's boto3 client (apache_beam/io/aws/clients/s3/
    boto3_client.py) passes None credentials to boto3, which then reads AWS_ACCESS_KEY_ID and
    AWS_SECRET_ACCESS_KEY from the environment itself, so the secret never sits in a command line
    or in the logged pipeline options. With an explicit endpoint botocore addresses buckets
    path-style (botocore/args.py), which MinIO needs.
    """
    args = []
    endpoint = s3_endpoint_url(environ)
    if endpoint:
        args.append(f"--s3_endpoint_url={endpoint}")
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    if region:
        args.append(f"--s3_region_name={region}")
    return args


__all__ = ["StorageError", "SUPPORTED", "OBJECT_STORES", "makedirs", "scheme", "problem",
           "check", "exit_now", "beam_s3_args", "s3_endpoint_url"]
