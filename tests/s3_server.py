"""An S3 server on loopback for tests: moto's server mode, from the project's own install.

Why moto, not MinIO: MinIO's server is a Go binary that is on neither PyPI nor Debian, so the
project cannot pin and install it the way it installs everything else; moto (`moto[server]`, in the
dev extras and the lock) is a pip package that serves the real S3 REST protocol over HTTP, so
tensorflow-io's S3 file system, Beam's boto3 client and the conformance runner talk to it exactly
as they talk to MinIO: same requests, path-style buckets, SigV4 signatures (not checked by moto).

Use the `s3` fixture (session-scoped; conftest.py or a test module imports it):

    def test_x(s3):
        s3.client.put_object(Bucket=s3.bucket, Key="a", Body=b"1")
        env = s3.env  # S3_ENDPOINT, AWS_* (dummy credentials) for a subprocess
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Dict, Iterator, Optional

import pytest

from devtools.loopback import free_port, stop_process, wait_until_answering

from tests.helpers import dump_yaml

BUCKET = "pipeline-test"
REGION = "us-east-1"
# Dummy test values: moto accepts any key; nothing real is ever reached.
ACCESS_KEY, SECRET_KEY = "test-access-key", "test-secret-key"
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 10


@dataclasses.dataclass
class S3Server:
    endpoint: str
    process: subprocess.Popen
    bucket: str = BUCKET
    # The CA of the server's certificate when it serves https (start(..., tls=...)).
    ca_bundle: Optional[Path] = None

    @property
    def env(self) -> Dict[str, str]:
        """What a step's pod gets from its Secret and config: tensorflow-io's and boto3's names."""
        env = {"S3_ENDPOINT": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
               "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION}
        if self.ca_bundle is not None:
            env["AWS_CA_BUNDLE"] = str(self.ca_bundle)  # the variable boto3 reads the CA from
        return env

    def launcher_config(self, secret: str = "mlpipeline-minio-artifact") -> dict:
        """The kfp-launcher ConfigMap a cluster needs for this store (deploy/kubeflow/README.md):
        providers.s3 (and .minio) at the endpoint, the credentials from Secret `secret`
        (secret_object)."""

        address = self.endpoint.split("://", 1)[1]
        store = {"default": {
            "endpoint": address, "disableSSL": self.endpoint.startswith("http://"),
            "region": REGION, "credentials": {"fromEnv": False, "secretRef": {
                "secretName": secret, "accessKeyKey": "accesskey",
                "secretKeyKey": "secretkey"}}}}
        providers = {"s3": store, "minio": store}
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kfp-launcher"},
                "data": {"providers": dump_yaml(providers)}}

    @staticmethod
    def secret_object(name: str = "mlpipeline-minio-artifact") -> dict:
        """The Secret launcher_config names, with the test credentials."""
        return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
                "stringData": {"accesskey": ACCESS_KEY, "secretkey": SECRET_KEY}}

    def object_store(self, backend):
        """The emulated launcher's bucket for this store (devtools/kfp_backend/objectstore)."""
        from devtools.kfp_backend.objectstore import ObjectStore

        return ObjectStore(backend, self.launcher_config(),
                           {"mlpipeline-minio-artifact": self.secret_object()["stringData"]})

    @property
    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
                            verify=str(self.ca_bundle) if self.ca_bundle else None)

    def keys(self, prefix: str = "", bucket: str = BUCKET) -> list:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                     Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]

    def upload_tree(self, folder: Path, prefix: str, bucket: str = BUCKET) -> None:
        client = self.client
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file():
                key = f"{prefix.rstrip('/')}/{path.relative_to(folder).as_posix()}"
                client.upload_file(str(path), bucket, key)


def _moto_server() -> str:
    # The console script beside this interpreter: the project's venv, not whatever is on PATH.
    script = Path(sys.executable).parent / "moto_server"
    if script.is_file():
        return str(script)
    found = shutil.which("moto_server")
    if not found:
        raise RuntimeError("moto_server is not installed: install the dev extras "
                           "(pip install -e '.[dev]', or make venv)")
    return found


def start(log: Path, tls: Optional[tuple] = None) -> S3Server:
    """Starts moto_server on a free loopback port; returns once it answers HTTP.

    tls: (certificate, key, CA) PEM files to serve https with that certificate, by
    moto_server's own --ssl-cert/--ssl-key options (moto/server.py: werkzeug's ssl_context)."""
    port = free_port()
    scheme = "https" if tls else "http"
    endpoint = f"{scheme}://127.0.0.1:{port}"
    ca = Path(tls[2]) if tls else None
    cmd = [_moto_server(), "-H", "127.0.0.1", "-p", str(port)]
    if tls:
        cmd += ["--ssl-cert", str(tls[0]), "--ssl-key", str(tls[1])]
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, **S3Server(endpoint, None).env})
    context = ssl.create_default_context(cafile=str(ca)) if ca else None
    wait_until_answering(
        process,
        lambda: urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2,
                                       context=context).close(),
        f"moto_server on {endpoint}", lambda: log.read_text(errors="replace"), START_TIMEOUT_S,
        STOP_TIMEOUT_S, poll_s=0.2)
    return S3Server(endpoint, process, ca_bundle=ca)


def stop(server: S3Server) -> None:
    """Terminates the server (then kills it); no process is left behind."""
    stop_process(server.process, STOP_TIMEOUT_S)


@pytest.fixture(scope="session")
def s3(tmp_path_factory) -> Iterator[S3Server]:
    """A running S3 server with an empty bucket BUCKET; stopped at the end of the session."""
    server = start(tmp_path_factory.mktemp("s3_server") / "moto.log")
    try:
        server.client.create_bucket(Bucket=BUCKET)
        yield server
    finally:
        stop(server)
