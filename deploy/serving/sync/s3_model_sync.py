"""Mirror the model versions the Pusher wrote to S3/MinIO into TF Serving's local model base path.

TF Serving 2.7+ cannot read s3:// (tensorflow/serving#1963), so a pod serving from a bucket runs
this script twice: as an init container (`--once`, so TF Serving starts with a model) and as a
sidecar (a loop every `--interval` seconds) writing into the volume TF Serving reads.

The contract, both ends read from source:
- Writer: TFX 1.16's Pusher (tfx/components/pusher/executor.py, `Do`) copies a blessed model to
  `<base>/<unix timestamp>/` and writes `saved_model.pb` last, as the marker that the version is
  complete. A version folder without it is an upload in progress (or an aborted one).
- Reader: TF Serving (tensorflow_serving/sources/storage_path/file_system_storage_path_source.cc)
  polls the base path, parses each child's name with `safe_strto64` (`ParseVersionNumber`), skips
  names that are not numbers, loads the newest numeric ones under the `latest` policy and unloads
  a version whose folder disappears.

So each version is downloaded into a hidden, non-numeric folder (`.incoming-<v>-<pid>`) and renamed
to `<v>` in one `rename(2)`: TF Serving never sees a half-copied version. The mirror holds the
newest `--keep` complete versions of the bucket that it could copy: versions removed from the
bucket (a rollback by deletion) and versions that fall out of the newest `--keep` are removed
locally, and never when no complete version is available at all (a wrong prefix or an emptied
bucket must not empty the server). A bucket-wide S3 error (listing refused, endpoint down) leaves
the local versions untouched. A version that fails on its own (an object it may not read, a key
it refuses, a marker it cannot check) is skipped and reported, each cycle, with the reason; the
other versions still sync and old ones are still removed, so one bad push cannot stop the mirror.
A version larger than `--max-version-bytes` (its listed objects, summed before anything is copied,
and the bytes written, counted while copying) is refused: reported once with its size and the cap,
remembered, and not tried again by this process (a restart checks it again), while the versions
already here keep serving. The volume holds `--keep` versions and one being copied: a cap of at
most a third of it (keep 2) means an oversized push cannot fill it and get the pod evicted.

Configuration: arguments for what to sync; the S3 connection from the environment, read here
only: S3_ENDPOINT (e.g. https://minio-service.kubeflow:9000; unset for AWS S3), AWS_REGION
(default us-east-1), AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (from a Kubernetes Secret: a
user that may only read the model's prefix, deploy/serving/sync/read-only-policy.json),
AWS_CA_BUNDLE (a PEM file of the CA that signed an https endpoint's certificate; the name boto3
reads it under, passed here as `verify=`) and S3_ALLOW_PLAIN_HTTP (`true` to accept an http://
endpoint that is not loopback: the keys and the models then cross the network in the clear).
Exit status of --once: 0 when at least one complete version is in --dest afterwards (errors and
skipped versions are logged), 1 when none is (message on stderr), 2 bad arguments or settings.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import re
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import boto3
import boto3.exceptions
import botocore.config
import botocore.exceptions

LOG = logging.getLogger("model-sync")

# Written last by TFX's Pusher (tfx/components/pusher/executor.py): the version-complete marker.
MARKER = "saved_model.pb"
STAGING_PREFIX = ".incoming-"
TRASH_PREFIX = ".deleting-"
# The Pusher's UNIX_TIMESTAMP versioning writes plain decimal names.
VERSION_NAME = re.compile(r"[0-9]+")
CREDENTIAL_ERRORS = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "InvalidToken",
    "ExpiredToken",
}


class SyncError(Exception):
    """A sync cycle that could not complete; the local versions are unchanged."""


class VersionError(SyncError):
    """One version that cannot be copied (an object refused or unreadable, a key refused): the
    cycle skips it, reports it and goes on with the others."""


class VersionTooLarge(VersionError):
    """A version over the per-version cap: refused for good (it will not shrink), not retried."""


# Errors that say the endpoint or the credentials as a whole fail, not one version: they end the
# cycle (nothing removed) instead of being charged to each version in turn. botocore's
# ConnectionError covers EndpointConnectionError, ConnectTimeoutError, SSLError and the proxy
# errors (botocore/exceptions.py).
CYCLE_ERRORS = (botocore.exceptions.ConnectionError, botocore.exceptions.NoCredentialsError)
# At most this many failing versions are tried per cycle: each costs requests (and maybe a
# partial download) every cycle, and a run of bad pushes must not make a cycle walk the whole
# bucket history. Versions already copied still count as available beyond it.
MAX_FAILED_PER_CYCLE = 3


@dataclass(frozen=True)
class Source:
    bucket: str
    prefix: str  # "" or ending with "/"

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    @classmethod
    def parse(cls, url: str) -> Source:
        match = re.fullmatch(r"s3://([^/]+)/?(.*)", url)
        if not match:
            raise ValueError(
                f"--source {url!r} is not an s3://BUCKET/PREFIX URL (the Pusher's serving dir "
                "followed by the model name, e.g. s3://mlpipeline/serving/penguins)"
            )
        prefix = match.group(2).strip("/")
        return cls(match.group(1), prefix + "/" if prefix else "")


TRUE_WORDS = {"1", "true", "yes"}


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def connection_settings(env) -> tuple[str | None, bool | str]:
    """(endpoint, verify) for make_client from the environment; ValueError for a setting that
    would send the keys in the clear or verify against a CA file that is not there.

    Plain http:// is refused unless the endpoint is loopback (a port-forward, a test server) or
    S3_ALLOW_PLAIN_HTTP says so: the request signature (SigV4) hides the secret key but not the
    access key id, and the responses (the models) and anyone's ability to alter them travel
    unprotected. `verify` is botocore's own option (botocore.client.Config docs: False, True for
    its bundled CAs, or the path of a CA bundle); AWS_CA_BUNDLE is the variable boto3 documents
    for that bundle, read here so that a missing file is one clear line instead of a TLS error
    on every request, and ignored for an http:// endpoint, which never uses it.
    """
    endpoint = (env.get("S3_ENDPOINT") or "").strip() or None
    bundle = (env.get("AWS_CA_BUNDLE") or "").strip() or None
    if endpoint is None:
        scheme, host = "https", "AWS S3"
    else:
        parts = urlsplit(endpoint)
        scheme, host = parts.scheme.lower(), parts.hostname or ""
        if scheme not in ("http", "https") or not host:
            raise ValueError(f"S3_ENDPOINT {endpoint!r} is not an http(s)://HOST[:PORT] URL")
    if scheme == "http":
        allowed = (env.get("S3_ALLOW_PLAIN_HTTP") or "").strip().lower() in TRUE_WORDS
        if not (_is_loopback(host) or allowed):
            raise ValueError(
                f"refusing plain http to {endpoint}: the S3 keys and the models would cross the "
                "network unencrypted. Use an https:// endpoint (AWS_CA_BUNDLE for a private CA) "
                "or set S3_ALLOW_PLAIN_HTTP=true to accept that risk"
            )
        return endpoint, True
    if bundle is not None and not Path(bundle).is_file():
        raise ValueError(
            f"AWS_CA_BUNDLE {bundle} is not a file: mount the CA certificate there (in k8s/s3 "
            "the ConfigMap of the volume s3-ca, key ca.crt) or unset it for a public CA"
        )
    return endpoint, bundle or True


def make_client(endpoint: str | None, region: str, verify: bool | str = True):
    config = botocore.config.Config(
        # MinIO serves buckets under the path, not as virtual hosts of the endpoint.
        s3={"addressing_style": "path" if endpoint else "auto"},
        retries={"mode": "standard", "total_max_attempts": 3},
        connect_timeout=5,
        read_timeout=60,
    )
    return boto3.client(
        "s3", endpoint_url=endpoint or None, region_name=region, config=config, verify=verify
    )


def _describe(error: Exception, client, source: Source) -> str:
    endpoint = client.meta.endpoint_url
    if isinstance(error, botocore.exceptions.NoCredentialsError):
        return (
            f"no S3 credentials for {source.url}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(on Kubernetes from the Secret, keys accesskey/secretkey)"
        )
    if isinstance(error, botocore.exceptions.SSLError):
        return (
            f"TLS to the S3 endpoint {endpoint} failed ({error}): its certificate must be signed "
            "by the CA in AWS_CA_BUNDLE (or a public CA) and name the endpoint's host"
        )
    if isinstance(
        error, botocore.exceptions.EndpointConnectionError | botocore.exceptions.ConnectTimeoutError
    ):
        return (
            f"cannot reach the S3 endpoint {endpoint} ({error}); check S3_ENDPOINT and the network"
        )
    if isinstance(error, botocore.exceptions.ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        if code in CREDENTIAL_ERRORS or code == "403":
            return (
                f"S3 at {endpoint} refused the credentials for {source.url} ({code}): check "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (the Secret's accesskey/secretkey) and "
                "that this user may list and read the bucket"
            )
        if code == "NoSuchBucket":
            return f"bucket {source.bucket!r} does not exist at {endpoint}; check --source"
        return f"S3 at {endpoint} answered {code or error} for {source.url}"
    if isinstance(error, OSError):
        return f"cannot write the local copy of {source.url}: {error}"
    return f"{type(error).__name__} while syncing {source.url} from {endpoint}: {error}"


class Mirror:
    """One model's base path in a bucket, mirrored into `dest` (TF Serving's base path)."""

    def __init__(self, client, source: Source, dest: Path, keep: int, max_version_bytes: int):
        self.client, self.source, self.dest, self.keep = client, source, dest, keep
        self.max_version_bytes = max_version_bytes
        self.failed: dict[str, str] = {}  # version -> reason, of the last cycle
        # version -> reason, for the life of the process: versions over the cap, never retried
        # (each try would list it again, and the answer cannot change under the same number).
        self.refused: dict[str, str] = {}

    # ---- local side

    def local_versions(self) -> set[str]:
        if not self.dest.is_dir():
            return set()
        return {
            p.name for p in self.dest.iterdir() if VERSION_NAME.fullmatch(p.name) and p.is_dir()
        }

    def remove_leftovers(self) -> None:
        """Staging and trash folders of an interrupted run (never visible to TF Serving)."""
        if self.dest.is_dir():
            for path in self.dest.iterdir():
                if path.name.startswith((STAGING_PREFIX, TRASH_PREFIX)):
                    shutil.rmtree(path, ignore_errors=True)

    def staging_path(self, version: str) -> Path:
        return self.dest / f"{STAGING_PREFIX}{version}-{os.getpid()}"

    # ---- bucket side

    def bucket_versions(self) -> list[str]:
        """Numeric child folders of the base path, newest first (complete or not)."""
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.source.bucket, Prefix=self.source.prefix, Delimiter="/"
        )
        names = {
            common["Prefix"][len(self.source.prefix) :].rstrip("/")
            for page in pages
            for common in page.get("CommonPrefixes", [])
        }
        return sorted((n for n in names if VERSION_NAME.fullmatch(n)), key=int, reverse=True)

    def _object_error(self, key: str, error: Exception) -> VersionError:
        endpoint = self.client.meta.endpoint_url
        if isinstance(error, botocore.exceptions.ClientError):
            code = error.response.get("Error", {}).get("Code", "") or str(error)
            denied = code in ("403", "AccessDenied")
            why = " (these credentials may not read it)" if denied else ""
            return VersionError(
                f"S3 at {endpoint} answered {code} for s3://{self.source.bucket}/{key}{why}"
            )
        return VersionError(f"cannot read s3://{self.source.bucket}/{key}: {error}")

    def is_complete(self, version: str) -> bool:
        key = f"{self.source.prefix}{version}/{MARKER}"
        try:
            self.client.head_object(Bucket=self.source.bucket, Key=key)
        except botocore.exceptions.ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            # A marker the sync may not even look at (HEAD needs s3:GetObject): this version.
            raise self._object_error(key, error) from error
        return True

    def version_objects(self, version: str) -> list[tuple[str, PurePosixPath, int]]:
        """(key, path inside the version, size) of every object; listed after the marker was
        seen, so every file the Pusher wrote before the marker is in the listing."""
        prefix = f"{self.source.prefix}{version}/"
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.source.bucket, Prefix=prefix
        )
        objects = []
        for page in pages:
            for item in page.get("Contents", []):
                relative = PurePosixPath(item["Key"][len(prefix) :])
                if item["Key"].endswith("/"):
                    continue  # a folder marker some S3 tools write; folders are made as needed
                if relative.is_absolute() or ".." in relative.parts or not relative.parts:
                    raise VersionError(
                        f"refusing s3://{self.source.bucket}/{item['Key']}: the key leaves the "
                        "version folder"
                    )
                objects.append((item["Key"], relative, int(item.get("Size", 0))))
        return objects

    def _too_large(self, version: str, size: int, when: str) -> VersionTooLarge:
        return VersionTooLarge(
            f"{self.source.url}{version}/ is {size} bytes ({size / 2**20:.1f} MiB) {when}, over "
            f"the cap of {self.max_version_bytes} bytes ({self.max_version_bytes / 2**20:.1f} "
            "MiB) per version (--max-version-bytes): not copied, and not tried again by this "
            "process; the versions already here keep serving"
        )

    # ---- one cycle

    def download(self, version: str) -> None:
        objects = self.version_objects(version)
        # Checked before a byte is written: an oversized version must not fill the volume (the
        # kubelet evicts a pod whose emptyDir passes its sizeLimit, and the next pod would do the
        # same again).
        listed = sum(size for _, _, size in objects)
        if listed > self.max_version_bytes:
            raise self._too_large(version, listed, "as listed")
        staging = self.staging_path(version)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            written = 0
            for key, relative, _ in objects:
                target = staging.joinpath(*relative.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    self.client.download_file(self.source.bucket, key, str(target))
                except CYCLE_ERRORS:
                    raise
                except (botocore.exceptions.ClientError, boto3.exceptions.Boto3Error) as error:
                    # Boto3Error: s3transfer's RetriesExceededError, a GET that kept failing.
                    raise self._object_error(key, error) from error
                # An object rewritten larger since the listing: the cap holds for what is written.
                written += target.stat().st_size
                if written > self.max_version_bytes:
                    raise self._too_large(version, written, "as copied so far")
            if not (staging / MARKER).is_file():
                raise VersionError(
                    f"{self.source.url}{version}/ lost its {MARKER} while downloading"
                )
            # The one step TF Serving can observe: the complete folder appears under its number.
            os.rename(staging, self.dest / version)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def remove(self, version: str) -> None:
        trash = self.dest / f"{TRASH_PREFIX}{version}-{os.getpid()}"
        os.rename(self.dest / version, trash)  # disappears for TF Serving in one step
        shutil.rmtree(trash)

    def complete_local_versions(self) -> list[str]:
        """Local versions TF Serving can load (each came in by rename with its marker)."""
        return sorted(
            (v for v in self.local_versions() if (self.dest / v / MARKER).is_file()), key=int
        )

    def sync_once(self) -> tuple[list[str], list[str]]:
        """Brings dest to the newest `keep` complete bucket versions that can be copied; returns
        (added, removed). The versions skipped this cycle, with the reasons, are in `failed`."""
        self.failed = {}
        try:
            self.dest.mkdir(parents=True, exist_ok=True)
            local = self.local_versions()
            wanted, added = [], []
            versions = self.bucket_versions()
            # A refused version deleted from the bucket is forgotten (pushed again, it is checked).
            self.refused = {v: r for v, r in self.refused.items() if v in versions}
            for version in versions:
                if len(wanted) == self.keep:
                    break
                if version in local:
                    wanted.append(version)
                    continue
                if version in self.refused:
                    continue  # over the cap: reported when refused, in each summary since
                if len(self.failed) >= MAX_FAILED_PER_CYCLE:
                    continue  # only versions already here, from now on
                try:
                    if not self.is_complete(version):
                        LOG.info(
                            "skipping %s%s/: no %s yet (upload in progress?)",
                            self.source.url,
                            version,
                            MARKER,
                        )
                        continue
                    LOG.info("downloading %s%s/", self.source.url, version)
                    self.download(version)
                except CYCLE_ERRORS:
                    raise
                except VersionTooLarge as error:
                    self.refused[version] = str(error)
                    LOG.error("refusing version %s of %s: %s", version, self.source.url, error)
                    continue
                except (VersionError, botocore.exceptions.ClientError, OSError) as error:
                    # ClientError: a listing of the version refused; OSError: the local volume
                    # (full, say), which the removals below may relieve for the next cycle.
                    reason = (
                        error
                        if isinstance(error, VersionError)
                        else _describe(error, self.client, self.source)
                    )
                    self.failed[version] = str(reason)
                    LOG.error("skipping version %s of %s: %s", version, self.source.url, reason)
                    continue
                wanted.append(version)
                added.append(version)
            if not wanted:
                skipped = "".join(
                    f"; version {v} failed: {r}"
                    for v, r in [*self.failed.items(), *self.refused.items()]
                )
                kept = f"; keeping the local versions {sorted(local)}" if local else ""
                raise SyncError(
                    f"no complete model version (a numeric folder with {MARKER}) under "
                    f"{self.source.url}{skipped}{kept}"
                )
            # Removed: versions deleted from the bucket and versions older than the newest `keep`
            # that are here now. A failed version never counts, so a bad push cannot push a good
            # version out, and a cycle with failures still removes what it should.
            removed = sorted(local - set(wanted), key=int)
            for version in removed:
                LOG.info(
                    "removing local version %s (not among the newest %d in the bucket)",
                    version,
                    self.keep,
                )
                self.remove(version)
        except (
            botocore.exceptions.BotoCoreError,
            botocore.exceptions.ClientError,
            boto3.exceptions.Boto3Error,
            OSError,  # the local volume: full, not writable
        ) as error:
            raise SyncError(_describe(error, self.client, self.source)) from error
        return added, removed


# --------------------------------------------------------------------------------------------
# entry point


def heartbeat_is_fresh(path: Path, max_age_s: float) -> bool:
    try:
        return time.time() - path.stat().st_mtime <= max_age_s
    except FileNotFoundError:
        return False


def _touch(path: Path | None) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()


def _run(mirror: Mirror, once: bool, interval: float, heartbeat: Path | None) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    mirror.remove_leftovers()
    while True:
        try:
            added, removed = mirror.sync_once()
            LOG.info(
                "in sync with %s: serving %s (added %s, removed %s, failed %d%s, refused as over "
                "the cap %s)",
                mirror.source.url,
                sorted(mirror.local_versions(), key=int),
                added or "none",
                removed or "none",
                len(mirror.failed),
                f": {sorted(mirror.failed, key=int)}" if mirror.failed else "",
                sorted(mirror.refused, key=int) or "none",
            )
        except SyncError as error:
            LOG.error("sync failed: %s", error)
        # The heartbeat says the loop runs, not that S3 answers: restarting this container
        # cannot fix an S3 outage, and the loaded versions keep serving meanwhile.
        _touch(heartbeat)
        if once:
            # TF Serving can start on any complete version; an init container that failed with
            # one in place would only keep the pod in Init (the kubelet retries it forever).
            available = mirror.complete_local_versions()
            if not available:
                LOG.error("no complete model version in %s: TF Serving cannot start", mirror.dest)
            return 0 if available else 1
        if stop.wait(interval):
            return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--source", help="s3://BUCKET/PREFIX: the Pusher's <serving_dir>/<model name>"
    )
    parser.add_argument(
        "--dest", type=Path, help="TF Serving's base path for the model, e.g. /models/penguins"
    )
    parser.add_argument(
        "--keep", type=int, default=2, help="newest complete versions to mirror (2)"
    )
    parser.add_argument(
        "--max-version-bytes",
        help="the largest version copied, in bytes (required: at most the model volume's size "
        "over --keep plus one)",
    )
    parser.add_argument("--interval", type=float, default=60, help="seconds between syncs (60)")
    parser.add_argument("--once", action="store_true", help="sync once and exit (init container)")
    parser.add_argument("--heartbeat", type=Path, help="file touched after every sync attempt")
    parser.add_argument(
        "--check-heartbeat",
        type=Path,
        metavar="FILE",
        help="probe mode: exit 0 when FILE was touched within --max-age seconds",
    )
    parser.add_argument("--max-age", type=float, default=300)
    args = parser.parse_args(argv)

    if args.check_heartbeat:
        fresh = heartbeat_is_fresh(args.check_heartbeat, args.max_age)
        if not fresh:
            print(
                f"no sync attempt recorded in {args.check_heartbeat} within {args.max_age:g} s",
                file=sys.stderr,
            )
        return 0 if fresh else 1
    if not args.source or not args.dest:
        parser.error("--source and --dest are required")
    if args.keep < 1 or args.interval <= 0:
        parser.error("--keep must be at least 1 and --interval positive")
    try:
        source = Source.parse(args.source)
    except ValueError as error:
        parser.error(str(error))
    try:
        max_version_bytes = int(args.max_version_bytes or "")
    except ValueError:
        max_version_bytes = 0
    if max_version_bytes < 1:
        parser.error(
            f"--max-version-bytes {args.max_version_bytes!r} is not a positive number of bytes: "
            "set it (k8s/s3: MAX_VERSION_BYTES in the ConfigMap tf-serving-<model>-source) to at "
            "most the model volume's size divided by --keep plus one"
        )

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr
    )
    try:
        endpoint, verify = connection_settings(os.environ)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    client = make_client(endpoint, os.environ.get("AWS_REGION") or "us-east-1", verify)
    return _run(
        Mirror(client, source, args.dest, args.keep, max_version_bytes),
        args.once,
        args.interval,
        args.heartbeat,
    )


if __name__ == "__main__":
    sys.exit(main())
