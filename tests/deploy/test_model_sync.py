"""deploy/serving/sync/s3_model_sync.py against a real S3-protocol server (tests/s3_server.py).

The sync is what a serving pod runs to mirror the Pusher's versions from S3/MinIO into TF Serving's
model volume (k8s/s3/deployment.yaml). These tests upload versions the way TFX 1.16's Pusher writes
them (tfx/components/pusher/executor.py: every file, then saved_model.pb last) and check what TF
Serving would see in the local base path after and *during* each sync: TF Serving loads every child
whose name parses as a number (ParseVersionNumber, safe_strto64, in
tensorflow_serving/sources/storage_path/file_system_storage_path_source.cc).

The CLI tests run the exact init-container command of k8s/s3/deployment.yaml, with the environment
its ConfigMap and Secret give it, pointed at the loopback server.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests import s3_server
from tests.helpers import example_config, load_yaml
from tests.s3_server import ACCESS_KEY, REGION, SECRET_KEY, start, stop

pytestmark = pytest.mark.slow  # TensorFlow, TFT, TFMA or server work: not in make test-fast

REPO = Path(__file__).resolve().parents[2]
SYNC_DIR = REPO / "deploy" / "serving" / "sync"
SYNC_SCRIPT = SYNC_DIR / "s3_model_sync.py"
S3_DEPLOYMENT = REPO / "deploy" / "serving" / "k8s" / "s3" / "deployment.yaml"
# The deploy files carry the config's model name (make deploy-names).
MODEL_NAME = example_config().serving.model_name
MODEL_SOURCE = REPO / "deploy" / "serving" / "k8s" / "s3" / "model-source.yaml"


def _load_sync_module():
    spec = importlib.util.spec_from_file_location("s3_model_sync", SYNC_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


sync = _load_sync_module()
s3 = s3_server.s3  # the session's S3 server fixture, under the name the tests ask for
_prefixes = itertools.count()


# --------------------------------------------------------------------------------------------
# helpers


def version_files(version: str) -> dict[str, bytes]:
    """A pushed version's files (content made unique per version so copies can be compared)."""
    return {
        "saved_model.pb": f"graph {version}".encode(),
        "fingerprint.pb": f"fingerprint {version}".encode(),
        "variables/variables.index": f"index {version}".encode(),
        "variables/variables.data-00000-of-00001": os.urandom(64 * 1024),
        "assets/vocab_site": b"north\nsouth\n",
        "assets.extra/tf_serving_warmup_requests": f"warmup {version}".encode(),
    }


def push(
    client,
    bucket: str,
    base: str,
    version: str,
    files: dict[str, bytes] | None = None,
    marker: bool = True,
) -> dict[str, bytes]:
    """Uploads a version in the Pusher's order: saved_model.pb last (or never: an upload cut
    short)."""
    files = files if files is not None else version_files(version)
    for name in sorted(files, key=lambda n: n == sync.MARKER):
        if name == sync.MARKER and not marker:
            continue
        client.put_object(Bucket=bucket, Key=f"{base}/{version}/{name}", Body=files[name])
    return files


def delete_version(client, bucket: str, base: str, version: str) -> None:
    pages = client.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=f"{base}/{version}/"
    )
    for page in pages:
        for item in page.get("Contents", []):
            client.delete_object(Bucket=bucket, Key=item["Key"])


# Children TF Serving would load as versions: names safe_strto64 accepts (optional sign and
# surrounding whitespace, decimal digits), as ParseVersionNumber does.
TF_SERVING_VERSION_NAME = re.compile(r"\s*[+-]?\d+\s*")


def tf_serving_versions(base_path: Path) -> list[str]:
    return sorted(
        (p.name for p in base_path.iterdir() if TF_SERVING_VERSION_NAME.fullmatch(p.name)), key=int
    )


def local_files(version_dir: Path) -> dict[str, bytes]:
    return {
        p.relative_to(version_dir).as_posix(): p.read_bytes()
        for p in version_dir.rglob("*")
        if p.is_file()
    }


@pytest.fixture
def base(s3, monkeypatch) -> str:
    """A fresh model base path in the session's bucket, as the Pusher's <serving_dir>/<model>;
    the server's credentials in the environment, where boto3 reads them in the container."""
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    return f"serving-{next(_prefixes)}/model"


def mirror(s3, base: str, dest: Path, keep: int = 2, max_version_bytes: int = 10**9):
    client = sync.make_client(s3.endpoint, REGION)
    return sync.Mirror(
        client, sync.Source.parse(f"s3://{s3.bucket}/{base}"), dest, keep, max_version_bytes
    )


def count_calls(client, operation: str) -> list[int]:
    calls = []
    client.meta.events.register(f"before-call.s3.{operation}", lambda **_: calls.append(1))
    return calls


# --------------------------------------------------------------------------------------------
# what TF Serving sees


def test_new_version_appears_complete_or_not_at_all(s3, base, tmp_path, monkeypatch):
    pushed = push(s3.client, s3.bucket, base, "1717171717")
    dest = tmp_path / "model"
    m = mirror(s3, base, dest)
    seen, folders = [], set()
    download_file = m.client.download_file

    def download_and_look(bucket, key, target, *args, **kwargs):
        download_file(bucket, key, target, *args, **kwargs)
        # After every single file: each version TF Serving could load is the whole version.
        for version in tf_serving_versions(dest):
            assert local_files(dest / version) == pushed, (
                f"version {version} visible while incomplete"
            )
        seen.append(tf_serving_versions(dest))
        top = dest / Path(target).relative_to(dest).parts[0]
        folders.add((top.name, top.stat().st_ino))

    monkeypatch.setattr(m.client, "download_file", download_and_look)
    assert m.sync_once() == (["1717171717"], [])
    assert seen == [[]] * len(pushed), "the version was visible before its last file arrived"
    assert tf_serving_versions(dest) == ["1717171717"]
    # The files went into one hidden folder, which became the version by a rename (same inode):
    # no later step copied them into place file by file.
    ((staging_name, staging_inode),) = folders
    assert not TF_SERVING_VERSION_NAME.fullmatch(staging_name), (
        "files downloaded where TF Serving looks"
    )
    assert (dest / "1717171717").stat().st_ino == staging_inode
    assert local_files(dest / "1717171717") == pushed
    assert [p.name for p in dest.iterdir()] == ["1717171717"], "staging folder left behind"


def test_the_watch_catches_a_copy_straight_into_the_version_folder(s3, base, tmp_path, monkeypatch):
    """Negative control: the same watch fails a sync that writes where TF Serving looks."""
    push(s3.client, s3.bucket, base, "1717171717")
    dest = tmp_path / "model"
    m = mirror(s3, base, dest)
    monkeypatch.setattr(sync.Mirror, "staging_path", lambda self, version: self.dest / version)
    download_file = m.client.download_file

    def download_and_look(bucket, key, target, *args, **kwargs):
        download_file(bucket, key, target, *args, **kwargs)
        for version in tf_serving_versions(dest):
            assert (dest / version / sync.MARKER).is_file(), (
                f"version {version} visible while incomplete"
            )

    monkeypatch.setattr(m.client, "download_file", download_and_look)
    with pytest.raises(AssertionError, match="visible while incomplete"):
        m.sync_once()


def test_unchanged_bucket_copies_nothing(s3, base, tmp_path):
    push(s3.client, s3.bucket, base, "1717171717")
    push(s3.client, s3.bucket, base, "1717258117")
    dest = tmp_path / "model"
    m = mirror(s3, base, dest)
    assert m.sync_once() == (["1717258117", "1717171717"], [])
    before = {p: p.stat().st_mtime_ns for p in dest.rglob("*")}

    gets, heads = count_calls(m.client, "GetObject"), count_calls(m.client, "HeadObject")
    assert m.sync_once() == ([], [])
    assert (gets, heads) == ([], []), "an unchanged bucket was read again"
    assert {p: p.stat().st_mtime_ns for p in dest.rglob("*")} == before


def test_upload_in_progress_is_not_synced_until_its_saved_model_pb_lands(s3, base, tmp_path):
    push(s3.client, s3.bucket, base, "1717171717")
    files = push(s3.client, s3.bucket, base, "1717258117", marker=False)
    dest = tmp_path / "model"
    m = mirror(s3, base, dest)
    assert m.sync_once() == (["1717171717"], [])
    assert tf_serving_versions(dest) == ["1717171717"]

    s3.client.put_object(
        Bucket=s3.bucket, Key=f"{base}/1717258117/saved_model.pb", Body=files["saved_model.pb"]
    )
    assert m.sync_once() == (["1717258117"], [])
    assert tf_serving_versions(dest) == ["1717171717", "1717258117"]
    assert local_files(dest / "1717258117") == files


def test_mirror_keeps_the_newest_versions_and_follows_deletions(s3, base, tmp_path):
    for version in ("100", "200", "300"):
        push(s3.client, s3.bucket, base, version)
    dest = tmp_path / "model"
    m = mirror(s3, base, dest, keep=2)
    m.sync_once()
    assert tf_serving_versions(dest) == ["200", "300"]

    push(s3.client, s3.bucket, base, "400")  # the next night
    assert m.sync_once() == (["400"], ["200"])
    assert tf_serving_versions(dest) == ["300", "400"]

    delete_version(s3.client, s3.bucket, base, "400")  # rollback: the bad version is deleted
    assert m.sync_once() == (["200"], ["400"])
    assert tf_serving_versions(dest) == ["200", "300"]


def test_an_empty_base_path_never_empties_the_server(s3, base, tmp_path):
    push(s3.client, s3.bucket, base, "100")
    dest = tmp_path / "model"
    m = mirror(s3, base, dest)
    m.sync_once()
    delete_version(s3.client, s3.bucket, base, "100")
    push(s3.client, s3.bucket, base, "200", marker=False)
    with pytest.raises(
        sync.SyncError, match=r"no complete model version .* keeping the local versions \['100'\]"
    ):
        m.sync_once()
    assert tf_serving_versions(dest) == ["100"]


def test_a_version_deleted_while_downloading_fails_without_a_trace(s3, base, tmp_path, monkeypatch):
    push(s3.client, s3.bucket, base, "100")
    dest = tmp_path / "model"
    m = mirror(s3, base, dest)
    download_file = m.client.download_file

    def delete_then_download(bucket, key, target, *args, **kwargs):
        delete_version(s3.client, s3.bucket, base, "100")  # after the listing, before the copy
        download_file(bucket, key, target, *args, **kwargs)

    monkeypatch.setattr(m.client, "download_file", delete_then_download)
    with pytest.raises(sync.SyncError, match=r"S3 at http://127\.0\.0\.1:\d+ answered 404"):
        m.sync_once()
    assert list(dest.iterdir()) == [], "a staging folder or a partial version was left behind"


def test_an_unwritable_model_volume_is_a_clear_error(s3, base, tmp_path):
    push(s3.client, s3.bucket, base, "100")
    blocked = tmp_path / "models"
    blocked.write_text("a file where the volume should be")
    with pytest.raises(sync.SyncError, match="cannot write the local copy of s3://"):
        mirror(s3, base, blocked / "model").sync_once()


def test_a_key_that_leaves_the_version_folder_is_refused(s3, base, tmp_path):
    files = {**version_files("100"), "../../evil": b"x"}
    push(s3.client, s3.bucket, base, "100", files)
    dest = tmp_path / "model"
    with pytest.raises(sync.SyncError, match="leaves the version folder"):
        mirror(s3, base, dest).sync_once()
    assert list(dest.iterdir()) == []
    assert not (tmp_path / "evil").exists()


# --------------------------------------------------------------------------------------------
# the container's command


def k8s_expand(arg: str, env: dict[str, str]) -> str:
    """$(VAR) references in container args, expanded as the kubelet does
    (kubernetes third_party/forked/golang/expansion/expand.go: defined names are replaced,
    $$ escapes, unknown references stay as written)."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        arg,
    )


def init_container_run(
    server_env: dict[str, str],
    dest_root: Path,
    ca_dir: Path | None = None,
    configmap: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Runs k8s/s3/deployment.yaml's init container command here: its args, the ConfigMap's
    variables (with the test server's endpoint), the Secret's keys as the env it names, and
    `ca_dir` where the pod mounts the CA ConfigMap (volume s3-ca)."""
    pod = load_yaml(S3_DEPLOYMENT.read_text())["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    env = dict(load_yaml(MODEL_SOURCE.read_text())["data"])
    env.update(S3_ENDPOINT=server_env["S3_ENDPOINT"], AWS_REGION=server_env["AWS_REGION"])
    env.update(configmap or {})
    if ca_dir is not None:
        ca_mount = next(m["mountPath"] for m in init["volumeMounts"] if m["name"] == "s3-ca")
        env["AWS_CA_BUNDLE"] = env["AWS_CA_BUNDLE"].replace(ca_mount, str(ca_dir), 1)
    secret = {
        "accesskey": server_env["AWS_ACCESS_KEY_ID"],
        "secretkey": server_env["AWS_SECRET_ACCESS_KEY"],
    }
    for var in init["env"]:
        env[var["name"]] = secret[var["valueFrom"]["secretKeyRef"]["key"]]
    mount = next(m["mountPath"] for m in init["volumeMounts"] if m["name"] == "models")
    args = [k8s_expand(a, env).replace(f"={mount}/", f"={dest_root}/") for a in init["args"]]
    return subprocess.run(
        [sys.executable, str(SYNC_SCRIPT), *args],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def manifest_source() -> str:
    return load_yaml(MODEL_SOURCE.read_text())["data"]["MODEL_SOURCE"]


@pytest.fixture
def manifest_base(s3) -> str:
    """The manifest's MODEL_SOURCE in the session's bucket (emptied first)."""
    bucket, _, prefix = manifest_source().removeprefix("s3://").partition("/")
    if bucket not in [b["Name"] for b in s3.client.list_buckets()["Buckets"]]:
        s3.client.create_bucket(Bucket=bucket)
    for key in s3.keys(prefix, bucket=bucket):
        s3.client.delete_object(Bucket=bucket, Key=key)
    return prefix


def test_init_container_command_syncs_the_manifests_source(s3, manifest_base, tmp_path):
    bucket = manifest_source().removeprefix("s3://").partition("/")[0]
    files = push(s3.client, bucket, manifest_base, "1717171717")
    proc = init_container_run(s3.env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert tf_serving_versions(tmp_path / MODEL_NAME) == ["1717171717"]
    assert local_files(tmp_path / MODEL_NAME / "1717171717") == files
    assert f"in sync with {manifest_source()}/: serving ['1717171717']" in proc.stderr


def test_init_container_fails_clearly_before_the_first_push(s3, manifest_base, tmp_path):
    proc = init_container_run(s3.env, tmp_path)
    assert proc.returncode == 1
    assert (
        "no complete model version (a numeric folder with saved_model.pb) under "
        f"{manifest_source()}/" in proc.stderr
    )


@pytest.fixture(scope="module")
def s3_with_auth(tmp_path_factory):
    """A second moto server that checks access keys (INITIAL_NO_AUTH_ACTION_COUNT=0), as MinIO
    does: an unknown key gets InvalidAccessKeyId."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "0")
        server = start(tmp_path_factory.mktemp("s3_auth") / "moto.log")
    try:
        yield server
    finally:
        stop(server)


def seed_local_version(root: Path) -> Path:
    version = root / MODEL_NAME / "1717171717"
    version.mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"serving")
    return version


def test_bad_credentials_fail_clearly_and_keep_the_local_versions(s3_with_auth, tmp_path):
    """Exit 1 only while no complete version is here; with one, the error is logged and the init
    container exits 0 so that TF Serving starts on it."""
    message = (
        f"S3 at {s3_with_auth.endpoint} refused the credentials for "
        f"{manifest_source()}/ (InvalidAccessKeyId): check "
        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (the Secret's accesskey/secretkey)"
    )
    env = {**s3_with_auth.env, "AWS_ACCESS_KEY_ID": "wrong"}
    proc = init_container_run(env, tmp_path)
    assert proc.returncode == 1 and message in proc.stderr, proc.stderr
    version = seed_local_version(tmp_path)
    proc = init_container_run(env, tmp_path)
    assert proc.returncode == 0 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert local_files(version) == {"saved_model.pb": b"serving"}


def test_unreachable_endpoint_fails_clearly_and_keeps_the_local_versions(tmp_path):
    with __import__("socket").socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    env = {
        "S3_ENDPOINT": closed,
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    }
    proc = init_container_run(env, tmp_path)
    assert proc.returncode == 1
    assert f"cannot reach the S3 endpoint {closed}" in proc.stderr
    version = seed_local_version(tmp_path)
    proc = init_container_run(env, tmp_path)
    assert proc.returncode == 0, proc.stderr  # TF Serving can start on the local version
    assert f"cannot reach the S3 endpoint {closed}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert local_files(version) == {"saved_model.pb": b"serving"}


def test_sidecar_probe_reads_the_heartbeat(tmp_path):
    pod = load_yaml(S3_DEPLOYMENT.read_text())["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["containers"] if c["name"] == "model-sync")
    probe = sidecar["livenessProbe"]["exec"]["command"]
    assert probe[:2] == ["python", "/app/s3_model_sync.py"]
    heartbeat = tmp_path / "heartbeat"
    args = [a.replace("/run/model-sync/heartbeat", str(heartbeat)) for a in probe[2:]]

    def probe_rc() -> int:
        return subprocess.run(
            [sys.executable, str(SYNC_SCRIPT), *args], capture_output=True, timeout=30, check=False
        ).returncode

    assert probe_rc() == 1  # no sync attempt yet
    heartbeat.touch()
    assert probe_rc() == 0
    max_age = float(next(a for a in args if a.startswith("--max-age=")).partition("=")[2])
    old = time.time() - max_age - 60
    os.utime(heartbeat, (old, old))
    assert probe_rc() == 1


def _locked(text: str) -> dict[str, tuple[str, set[str]]]:
    """name -> (version, its sha256 hashes) of a `uv pip compile --generate-hashes` lock."""
    entries = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        found = re.match(r"([A-Za-z0-9_.-]+)==(\S+)", block)
        if found:
            entries[found.group(1).lower()] = (
                found.group(2),
                set(re.findall(r"--hash=sha256:([0-9a-f]{64})", block)),
            )
    return entries


def test_image_installs_the_hashed_lock_of_boto3s_closure():
    """The image installs requirements.lock with --require-hashes (issue 42, item 10): every
    package at the project lock's version and with hashes the project lock also has (the files
    the tests run were installed from), exactly boto3's dependency closure (the image installs
    with --no-deps), compiled from requirements.in as `make lock` does."""
    dockerfile = (SYNC_DIR / "Dockerfile").read_text()
    (install,) = [line for line in dockerfile.splitlines() if "pip install" in line]
    assert "--require-hashes" in install and "-r /tmp/requirements.lock" in install, install
    assert "--no-deps" in install
    assert "COPY requirements.lock /tmp/requirements.lock" in dockerfile
    assert not (SYNC_DIR / "requirements.txt").exists(), "an unhashed list beside the lock"
    text = (SYNC_DIR / "requirements.lock").read_text()
    command = ("uv pip compile deploy/serving/sync/requirements.in --python-version 3.10 "
               "-c requirements.lock --generate-hashes -o deploy/serving/sync/requirements.lock")
    assert command in text and command in (REPO / "Makefile").read_text()
    pinned = _locked(text)
    project = _locked((REPO / "requirements.lock").read_text())
    for name, (version, hashes) in pinned.items():
        assert hashes, f"{name} has no hash"
        assert project[name][0] == version, (name, version, project[name][0])
        assert hashes <= project[name][1], f"{name}: a hash the project lock does not have"

    closure, todo = set(), ["boto3"]
    while todo:
        name = todo.pop()
        if name in closure:
            continue
        closure.add(name)
        for spec in importlib.metadata.requires(name) or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name.lower())
    assert closure == set(pinned)


def sidecar_command(dest_root: Path, heartbeat: Path, interval: str) -> list[str]:
    """k8s/s3/deployment.yaml's sidecar args with local paths and a short interval."""
    pod = load_yaml(S3_DEPLOYMENT.read_text())["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["containers"] if c["name"] == "model-sync")
    env = load_yaml(MODEL_SOURCE.read_text())["data"]
    args = []
    for arg in sidecar["args"]:
        arg = k8s_expand(arg, env).replace("=/models/", f"={dest_root}/")
        if arg.startswith("--interval="):
            arg = f"--interval={interval}"
        if arg.startswith("--heartbeat="):
            arg = f"--heartbeat={heartbeat}"
        args.append(arg)
    return [sys.executable, str(SYNC_SCRIPT), *args]


def wait_for(condition, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting after {timeout_s} s for {what}")
        time.sleep(0.1)


def test_sidecar_loop_picks_up_pushes_survives_errors_and_stops_on_sigterm(
    s3, manifest_base, tmp_path
):
    bucket = manifest_source().removeprefix("s3://").partition("/")[0]
    push(s3.client, bucket, manifest_base, "100")
    dest, heartbeat = tmp_path / MODEL_NAME, tmp_path / "heartbeat"
    log = tmp_path / "sidecar.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            sidecar_command(tmp_path, heartbeat, "0.2"),
            stderr=out,
            env={"PATH": os.environ["PATH"], **s3.env},
        )
    try:
        wait_for(lambda: dest.is_dir() and tf_serving_versions(dest) == ["100"], "version 100")
        # The base path empties (a wrong prefix, an accident): errors are logged, the loop goes on
        # and the server keeps its model.
        delete_version(s3.client, bucket, manifest_base, "100")
        wait_for(
            lambda: "ERROR sync failed: no complete model version" in log.read_text(), "the error"
        )
        stamp = heartbeat.stat().st_mtime_ns
        wait_for(lambda: heartbeat.stat().st_mtime_ns > stamp, "a heartbeat after the error")
        assert proc.poll() is None, log.read_text()
        assert tf_serving_versions(dest) == ["100"]
        # The next push arrives; the version deleted from the bucket goes.
        push(s3.client, bucket, manifest_base, "200")
        wait_for(lambda: tf_serving_versions(dest) == ["200"], "version 200 alone")
    finally:
        proc.terminate()
        rc = proc.wait(timeout=10)
    assert rc == 0, log.read_text()


# --------------------------------------------------------------------------------------------
# one bad version does not stop the mirror (issue 25, item 12)


def test_a_failing_version_is_skipped_and_reported_and_the_mirror_goes_on(
    s3, base, tmp_path, caplog
):
    """A version the sync refuses (a key that leaves its folder) is skipped and reported every
    cycle; the good versions sync around it and versions deleted upstream are still removed."""
    caplog.set_level("INFO", logger="model-sync")
    push(s3.client, s3.bucket, base, "100")
    push(s3.client, s3.bucket, base, "200")
    push(s3.client, s3.bucket, base, "300", {**version_files("300"), "../../evil": b"x"})
    dest = tmp_path / "model"
    m = mirror(s3, base, dest, keep=2)

    def cycle() -> tuple[list[str], list[str]]:
        caplog.clear()
        result = m.sync_once()
        assert set(m.failed) == {"300"}, "the bad version was not reported"
        assert "leaves the version folder" in m.failed["300"]
        (report,) = [
            r.getMessage() for r in caplog.records if "skipping version 300" in r.getMessage()
        ]
        assert "leaves the version folder" in report
        return result

    assert cycle() == (["200", "100"], [])
    assert tf_serving_versions(dest) == ["100", "200"]
    push(s3.client, s3.bucket, base, "400")  # the next night
    assert cycle() == (["400"], ["100"])
    assert tf_serving_versions(dest) == ["200", "400"]
    delete_version(s3.client, s3.bucket, base, "400")  # rollback by deletion
    assert cycle() == (["100"], ["400"])  # 100 is among the newest two again
    assert tf_serving_versions(dest) == ["100", "200"]
    assert sorted(p.name for p in dest.iterdir()) == ["100", "200"], "leftovers of version 300"
    assert not (tmp_path / "evil").exists()


# --------------------------------------------------------------------------------------------
# the read-only key (issue 25, item 3)

POLICY = SYNC_DIR / "read-only-policy.json"
DENIED_VERSION = "1717258117"  # a version one test user may not fully read


def iam_string_like(pattern: str, value: str) -> bool:
    """IAM's StringLike: `*` any run of characters, `?` one, case-sensitive (AWS IAM User Guide,
    "IAM JSON policy elements: Condition operators", String condition operators)."""
    regex = "".join({"*": ".*", "?": "."}.get(c, re.escape(c)) for c in pattern)
    return re.fullmatch(regex, value) is not None


@pytest.fixture(scope="module")
def iam_s3(tmp_path_factory):
    """A moto server that authenticates and authorizes every request against IAM policies
    (moto docs, docs/docs/iam.rst: INITIAL_NO_AUTH_ACTION_COUNT requests go unchecked, then every
    request is checked; moto's own set_initial_no_auth_action_count sets that count on a running
    server by POST /moto-api/reset-auth, which is how the setup below runs unchecked first).
    Users: `pusher` (everything, as KFP's root key) and `reader` with the shipped policy attached
    as a managed policy (what `mc admin policy create` + `attach` do on MinIO); `reader-denied`
    also has a Deny on part of DENIED_VERSION (an object the sync cannot read)."""
    import boto3

    server = start(tmp_path_factory.mktemp("s3_iam") / "moto.log")
    try:
        iam = boto3.client(
            "iam",
            endpoint_url=server.endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )
        arn = iam.create_policy(
            PolicyName="model-sync-read-only", PolicyDocument=POLICY.read_text()
        )["Policy"]["Arn"]
        bucket, _, prefix = manifest_source().removeprefix("s3://").partition("/")
        envs = {}
        for user in ("pusher", "reader", "reader-denied"):
            iam.create_user(UserName=user)
            if user == "pusher":
                everything = {"Effect": "Allow", "Action": "*", "Resource": "*"}
                document = {"Version": "2012-10-17", "Statement": [everything]}
                iam.put_user_policy(
                    UserName=user, PolicyName="all", PolicyDocument=json.dumps(document)
                )
            else:
                iam.attach_user_policy(UserName=user, PolicyArn=arn)
            if user == "reader-denied":
                deny = {
                    "Effect": "Deny",
                    "Action": "s3:GetObject",
                    "Resource": f"arn:aws:s3:::{bucket}/{prefix}/{DENIED_VERSION}/variables/*",
                }
                document = {"Version": "2012-10-17", "Statement": [deny]}
                iam.put_user_policy(
                    UserName=user, PolicyName="deny", PolicyDocument=json.dumps(document)
                )
            key = iam.create_access_key(UserName=user)["AccessKey"]
            envs[user] = {
                **server.env,
                "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
                "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            }
        server.client.create_bucket(Bucket=bucket)
        request = urllib.request.Request(
            f"{server.endpoint}/moto-api/reset-auth",
            data=b"0",
            method="POST",
            # Not a form (urllib's default type), or the server sees no body in request.data.
            headers={"Content-Type": "text/plain"},
        )
        urllib.request.urlopen(request, timeout=10).close()
        server.users = envs
        yield server
    finally:
        stop(server)


def client_of(env: dict[str, str]):
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=env["S3_ENDPOINT"],
        region_name=REGION,
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )


@pytest.fixture
def iam_base(iam_s3) -> tuple:
    """(pusher's client, bucket, prefix) of the manifest's source, emptied first."""
    pusher = client_of(iam_s3.users["pusher"])
    bucket, _, prefix = manifest_source().removeprefix("s3://").partition("/")
    pages = pusher.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    for key in [o["Key"] for page in pages for o in page.get("Contents", [])]:
        pusher.delete_object(Bucket=bucket, Key=key)
    return pusher, bucket, prefix


def denied(call) -> bool:
    import botocore.exceptions

    try:
        call()
    except botocore.exceptions.ClientError as error:
        return error.response["Error"]["Code"] in ("AccessDenied", "403")
    return False


def test_read_only_policy_is_scoped_to_the_manifests_model():
    bucket, _, prefix = manifest_source().removeprefix("s3://").partition("/")
    statements = json.loads(POLICY.read_text())["Statement"]
    assert [(s["Effect"], s["Action"], s["Resource"], s.get("Condition")) for s in statements] == [
        ("Allow", ["s3:GetObject"], [f"arn:aws:s3:::{bucket}/{prefix}/*"], None),
        (
            "Allow",
            ["s3:ListBucket"],
            [f"arn:aws:s3:::{bucket}"],
            {"StringLike": {"s3:prefix": [f"{prefix}/*"]}},
        ),
    ]
    assert prefix == f"serving/{MODEL_NAME}"


def test_the_read_only_key_syncs_and_may_not_write_or_read_elsewhere(iam_s3, iam_base, tmp_path):
    pusher, bucket, prefix = iam_base
    files = push(pusher, bucket, prefix, "1717171717")
    pusher.put_object(Bucket=bucket, Key="serving/other-model/1/saved_model.pb", Body=b"other")
    pusher.put_object(Bucket=bucket, Key="pipelines/run/metrics.json", Body=b"{}")
    reader = iam_s3.users["reader"]

    proc = init_container_run(reader, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert local_files(tmp_path / MODEL_NAME / "1717171717") == files

    client = client_of(reader)
    version_key = f"{prefix}/1717171717/saved_model.pb"
    assert denied(lambda: client.put_object(Bucket=bucket, Key=version_key, Body=b"planted"))
    assert denied(
        lambda: client.put_object(Bucket=bucket, Key=f"{prefix}/1900000000/saved_model.pb")
    )
    assert denied(lambda: client.delete_object(Bucket=bucket, Key=version_key))
    assert denied(
        lambda: client.get_object(Bucket=bucket, Key="serving/other-model/1/saved_model.pb")
    )
    assert denied(lambda: client.get_object(Bucket=bucket, Key="pipelines/run/metrics.json"))
    assert denied(lambda: client.create_bucket(Bucket="another"))
    assert pusher.get_object(Bucket=bucket, Key=version_key)["Body"].read() == files[sync.MARKER]

    # moto does not evaluate the s3:prefix condition (moto/iam/policy_conditions.py knows
    # StringEquals only and passes other operators), so MinIO's check is replayed here: every
    # listing the sync makes must satisfy the policy's condition, or MinIO would refuse it.
    (condition,) = [
        s["Condition"]["StringLike"]["s3:prefix"]
        for s in json.loads(POLICY.read_text())["Statement"]
        if "Condition" in s
    ]
    m = sync.Mirror(
        client,
        sync.Source.parse(manifest_source()),
        tmp_path / "again" / MODEL_NAME,
        keep=2,
        max_version_bytes=10**9,
    )
    listed = []
    client.meta.events.register(
        "before-parameter-build.s3.ListObjectsV2",
        lambda params, **_: listed.append(params["Prefix"]),
    )
    assert m.sync_once() == (["1717171717"], [])
    assert listed and all(any(iam_string_like(c, p) for c in condition) for p in listed), listed
    assert not iam_string_like(condition[0], "serving/")  # the check itself refuses a wider list


def test_a_version_it_may_not_read_is_skipped_and_the_init_container_waits_for_a_good_one(
    iam_s3, iam_base, tmp_path
):
    pusher, bucket, prefix = iam_base
    push(pusher, bucket, prefix, DENIED_VERSION)
    reader = iam_s3.users["reader-denied"]
    proc = init_container_run(reader, tmp_path)
    assert proc.returncode == 1, proc.stderr  # no complete version: TF Serving cannot start
    assert f"skipping version {DENIED_VERSION} of {manifest_source()}/" in proc.stderr
    assert "(these credentials may not read it)" in proc.stderr
    assert not (tmp_path / MODEL_NAME).is_dir() or tf_serving_versions(tmp_path / MODEL_NAME) == []

    files = push(pusher, bucket, prefix, "1717171717")  # older, readable
    proc = init_container_run(reader, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert tf_serving_versions(tmp_path / MODEL_NAME) == ["1717171717"]
    assert local_files(tmp_path / MODEL_NAME / "1717171717") == files
    assert f"skipping version {DENIED_VERSION} of {manifest_source()}/" in proc.stderr
    assert f"failed 1: ['{DENIED_VERSION}']" in proc.stderr
    assert sorted(p.name for p in (tmp_path / MODEL_NAME).iterdir()) == ["1717171717"]


# --------------------------------------------------------------------------------------------
# TLS to the endpoint (issue 25, item 3)


def write_ca_and_certificate(folder: Path, name: str) -> tuple[Path, Path, Path]:
    """A self-signed CA and a server certificate it signs for 127.0.0.1 (cryptography's X.509
    tutorial: "Creating a CA hierarchy"); returns (certificate, key, ca.crt)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(__import__("ipaddress").ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "server.crt", folder / "server.key", folder / "ca.crt"
    paths[0].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    paths[2].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return paths


@pytest.fixture(scope="module")
def tls_s3(tmp_path_factory):
    """moto's server on https with a certificate of a private CA (moto_server --ssl-cert/-key)."""
    root = tmp_path_factory.mktemp("s3_tls")
    server = start(root / "moto.log", tls=write_ca_and_certificate(root / "pki", "serving"))
    try:
        bucket = manifest_source().removeprefix("s3://").partition("/")[0]
        server.client.create_bucket(Bucket=bucket)
        yield server
    finally:
        stop(server)


def test_init_container_syncs_over_https_with_the_mounted_ca(tls_s3, tmp_path):
    bucket, _, prefix = manifest_source().removeprefix("s3://").partition("/")
    files = push(tls_s3.client, bucket, prefix, "1717171717")
    assert tls_s3.endpoint.startswith("https://")
    proc = init_container_run(tls_s3.env, tmp_path, ca_dir=tls_s3.ca_bundle.parent)
    assert proc.returncode == 0, proc.stderr
    assert local_files(tmp_path / MODEL_NAME / "1717171717") == files


def test_https_with_a_certificate_of_another_ca_fails_clearly(tls_s3, tmp_path):
    _, _, other_ca = write_ca_and_certificate(tmp_path / "other", "other")
    proc = init_container_run(tls_s3.env, tmp_path / "models", ca_dir=other_ca.parent)
    assert proc.returncode == 1, proc.stderr
    assert f"TLS to the S3 endpoint {tls_s3.endpoint} failed" in proc.stderr
    assert "CERTIFICATE_VERIFY_FAILED" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_plain_http_to_a_remote_endpoint_is_refused_unless_allowed(tmp_path):
    remote = "http://minio-service.kubeflow:9000"
    env = {
        "S3_ENDPOINT": remote,
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    }
    proc = init_container_run(env, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert f"refusing plain http to {remote}" in proc.stderr
    assert "S3_ALLOW_PLAIN_HTTP=true" in proc.stderr
    assert not (tmp_path / MODEL_NAME).exists(), "it went on after refusing"

    settings = sync.connection_settings
    assert settings({"S3_ENDPOINT": remote, "S3_ALLOW_PLAIN_HTTP": "true"}) == (remote, True)
    for loopback in ("http://127.0.0.1:9000", "http://localhost:9000", "http://[::1]:9000"):
        assert settings({"S3_ENDPOINT": loopback}) == (loopback, True)
    with pytest.raises(ValueError, match="refusing plain http"):
        settings({"S3_ENDPOINT": "http://10.0.0.5:9000", "S3_ALLOW_PLAIN_HTTP": "false"})
    with pytest.raises(ValueError, match="AWS_CA_BUNDLE /nowhere/ca.crt is not a file"):
        settings({"S3_ENDPOINT": "https://minio:9000", "AWS_CA_BUNDLE": "/nowhere/ca.crt"})
    assert settings({"AWS_CA_BUNDLE": ""}) == (None, True)  # AWS S3, public CAs


# --------------------------------------------------------------------------------------------
# the per-version cap (issue 42, item 10)

CAP = 200_000  # bytes: version_files() is about 66 kB


def calls_for(client, operation: str, version: str) -> list[str]:
    """The keys or prefixes of `operation` calls that name `version`'s folder."""
    calls = []

    def record(params, **_):
        where = params.get("Key") or params.get("Prefix") or ""
        if f"/{version}/" in where:
            calls.append(where)

    client.meta.events.register(f"before-call.s3.{operation}", record)
    return calls


def test_an_oversized_version_is_refused_before_copying_and_not_tried_again(
    s3, base, tmp_path, caplog
):
    caplog.set_level("INFO", logger="model-sync")
    push(s3.client, s3.bucket, base, "100")
    push(s3.client, s3.bucket, base, "200")
    dest = tmp_path / "model"
    m = mirror(s3, base, dest, keep=2, max_version_bytes=CAP)
    assert m.sync_once() == (["200", "100"], [])
    big = {**version_files("300"), "variables/variables.data-00000-of-00001": os.urandom(CAP)}
    push(s3.client, s3.bucket, base, "300", big)
    size = sum(len(b) for b in big.values())
    downloads = calls_for(m.client, "GetObject", "300")
    lookups = calls_for(m.client, "HeadObject", "300") + calls_for(
        m.client, "ListObjectsV2", "300"
    )

    caplog.clear()
    assert m.sync_once() == ([], [])  # 100 and 200 keep serving
    assert tf_serving_versions(dest) == ["100", "200"]
    assert downloads == [], "bytes of the oversized version were fetched"
    assert sorted(p.name for p in dest.iterdir()) == ["100", "200"], "a staging folder is left"
    assert set(m.refused) == {"300"} and m.failed == {}
    (report,) = [r.getMessage() for r in caplog.records if "refusing version 300" in r.getMessage()]
    assert f"is {size} bytes" in report and f"cap of {CAP} bytes" in report, report
    assert "--max-version-bytes" in report
    tried = len(lookups)

    # The next cycles do not ask for it again; a good push still arrives around it.
    caplog.clear()
    assert m.sync_once() == ([], [])
    push(s3.client, s3.bucket, base, "400")
    assert m.sync_once() == (["400"], ["100"])
    assert tf_serving_versions(dest) == ["200", "400"]
    assert len(lookups) == tried and downloads == []
    assert not [r for r in caplog.records if "refusing version 300" in r.getMessage()]
    # Deleted from the bucket, it is forgotten.
    delete_version(s3.client, s3.bucket, base, "300")
    m.sync_once()
    assert m.refused == {}


def test_an_object_rewritten_larger_after_the_listing_is_caught_while_copying(
    s3, base, tmp_path, monkeypatch
):
    push(s3.client, s3.bucket, base, "100")
    push(s3.client, s3.bucket, base, "200")
    dest = tmp_path / "model"
    m = mirror(s3, base, dest, keep=2, max_version_bytes=CAP)
    listing = m.version_objects

    def list_then_grow(version):
        objects = listing(version)
        if version == "200":  # after the listing, a rewrite over the cap
            s3.client.put_object(
                Bucket=s3.bucket,
                Key=f"{base}/200/variables/variables.data-00000-of-00001",
                Body=os.urandom(CAP + 1),
            )
        return objects

    monkeypatch.setattr(m, "version_objects", list_then_grow)
    assert m.sync_once() == (["100"], [])
    assert "as copied so far" in m.refused["200"]
    assert sorted(p.name for p in dest.iterdir()) == ["100"], "the partial copy is left"


def test_the_init_container_refuses_an_oversized_only_version_naming_size_and_cap(
    s3, manifest_base, tmp_path
):
    bucket = manifest_source().removeprefix("s3://").partition("/")[0]
    files = push(s3.client, bucket, manifest_base, "1717171717")
    size = sum(len(b) for b in files.values())
    proc = init_container_run(s3.env, tmp_path, configmap={"MAX_VERSION_BYTES": str(size - 1)})
    assert proc.returncode == 1, proc.stderr
    assert f"is {size} bytes" in proc.stderr and f"cap of {size - 1} bytes" in proc.stderr
    assert not (tmp_path / MODEL_NAME / "1717171717").exists()
    proc = init_container_run(s3.env, tmp_path, configmap={"MAX_VERSION_BYTES": str(size)})
    assert proc.returncode == 0, proc.stderr
    assert tf_serving_versions(tmp_path / MODEL_NAME) == ["1717171717"]


@pytest.mark.parametrize("value", ["", "0", "-5", "2Gi"])
def test_a_missing_or_bad_cap_is_refused_at_start(tmp_path, value):
    proc = subprocess.run(
        [sys.executable, str(SYNC_SCRIPT), "--once", "--source=s3://b/m", f"--dest={tmp_path}",
         f"--max-version-bytes={value}"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 2
    assert "--max-version-bytes" in proc.stderr and "MAX_VERSION_BYTES" in proc.stderr


def _quantity(value: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6,
             "G": 10**9}
    found = re.fullmatch(r"([0-9]+)([A-Za-z]*)", value)
    return int(found.group(1)) * units.get(found.group(2), 1)


def test_keep_plus_one_capped_versions_fit_the_model_volume():
    """The cap is what keeps an oversized push from filling the emptyDir (and the kubelet from
    evicting the pod): --keep versions and one being copied, each at most the cap, fit its
    sizeLimit; both sync containers and the compose file pass the cap."""
    pod = load_yaml(S3_DEPLOYMENT.read_text())["spec"]["template"]["spec"]
    env = load_yaml(MODEL_SOURCE.read_text())["data"]
    cap = int(env["MAX_VERSION_BYTES"])
    (volume,) = [v for v in pod["volumes"] if v["name"] == "models"]
    limit = _quantity(volume["emptyDir"]["sizeLimit"])
    for container in [*pod["initContainers"],
                      next(c for c in pod["containers"] if c["name"] == "model-sync")]:
        args = [k8s_expand(a, env) for a in container["args"]]
        keep = int(next(a for a in args if a.startswith("--keep=")).partition("=")[2])
        assert f"--max-version-bytes={cap}" in args, container["name"]
        assert (keep + 1) * cap <= limit, (container["name"], keep, cap, limit)
    compose = (REPO / "deploy" / "serving" / "compose" / "docker-compose.s3.yml").read_text()
    assert f"--max-version-bytes=${{MAX_VERSION_BYTES:-{cap}}}" in compose
