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
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from tests import s3_server
from tests.helpers import example_config
from tests.s3_server import ACCESS_KEY, REGION, SECRET_KEY, start, stop

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


def mirror(s3, base: str, dest: Path, keep: int = 2):
    client = sync.make_client(s3.endpoint, REGION)
    return sync.Mirror(client, sync.Source.parse(f"s3://{s3.bucket}/{base}"), dest, keep)


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


def init_container_run(server_env: dict[str, str], dest_root: Path) -> subprocess.CompletedProcess:
    """Runs k8s/s3/deployment.yaml's init container command here: its args, the ConfigMap's
    variables (with the test server's endpoint), the Secret's keys as the env it names."""
    pod = yaml.safe_load(S3_DEPLOYMENT.read_text())["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    env = dict(yaml.safe_load(MODEL_SOURCE.read_text())["data"])
    env.update(S3_ENDPOINT=server_env["S3_ENDPOINT"], AWS_REGION=server_env["AWS_REGION"])
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
    return yaml.safe_load(MODEL_SOURCE.read_text())["data"]["MODEL_SOURCE"]


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
    version = seed_local_version(tmp_path)
    proc = init_container_run({**s3_with_auth.env, "AWS_ACCESS_KEY_ID": "wrong"}, tmp_path)
    assert proc.returncode == 1
    assert (
        f"S3 at {s3_with_auth.endpoint} refused the credentials for "
        f"{manifest_source()}/ (InvalidAccessKeyId): check "
        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (the Secret's accesskey/secretkey)"
    ) in proc.stderr
    assert "Traceback" not in proc.stderr
    assert local_files(version) == {"saved_model.pb": b"serving"}


def test_unreachable_endpoint_fails_clearly_and_keeps_the_local_versions(tmp_path):
    version = seed_local_version(tmp_path)
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
    assert "Traceback" not in proc.stderr
    assert local_files(version) == {"saved_model.pb": b"serving"}


def test_sidecar_probe_reads_the_heartbeat(tmp_path):
    pod = yaml.safe_load(S3_DEPLOYMENT.read_text())["spec"]["template"]["spec"]
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


def test_image_requirements_are_the_locked_closure_of_boto3():
    """The image installs exactly what the tests run: the lock's versions, boto3 and everything it
    needs on this Python, nothing missing (the image installs with --no-deps)."""
    pinned = {}
    for line in (SYNC_DIR / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pinned[name.lower()] = version
    lock = dict(
        re.findall(
            r"^([A-Za-z0-9_.-]+)==(\S+)", (REPO / "requirements.lock").read_text(), re.MULTILINE
        )
    )
    lock = {k.lower(): v for k, v in lock.items()}
    assert {name: lock.get(name) for name in pinned} == pinned

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
    pod = yaml.safe_load(S3_DEPLOYMENT.read_text())["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["containers"] if c["name"] == "model-sync")
    env = yaml.safe_load(MODEL_SOURCE.read_text())["data"]
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
