"""The Pusher's push, killed part-way (components/pusher/executor.py): TF Serving never sees a
numbered folder without saved_model.pb, and the next push removes what the killed one left.

TF Serving takes every all-digit child of the base as a version
(sources/storage_path/file_system_storage_path_source.cc); TFX's Pusher copies straight into
<base>/<version>/ (tfx/components/pusher/executor.py, tfx/utils/io_utils.py copy_dir), which the
negative control shows. The kills are real (SIGKILL, in a forked child: tests/components/
push_kill.py), at every point between two file copies of a real SavedModel.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.s3_server import s3  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow  # TensorFlow, TFT, TFMA or server work: not in make test-fast

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A small real SavedModel (variables and all) at <model>/Format-Serving, as the Trainer's
    Model artifact holds it."""
    folder = tmp_path_factory.mktemp("model")
    script = textwrap.dedent(f"""
        import tensorflow as tf
        class Scale(tf.Module):
            def __init__(self):
                self.w = tf.Variable([2.0, 3.0])
            @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32)])
            def __call__(self, x):
                return x * self.w
        module = Scale()
        tf.saved_model.save(module, {str(folder / "Format-Serving")!r},
                            signatures={{"serving_default": module.__call__}})
    """)
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT, timeout=300)
    return folder


def kill_points(kind: str, model: Path, work: Path) -> dict:
    work.mkdir()
    result = subprocess.run([sys.executable, "-m", "tests.components.push_kill", kind,
                             str(model), str(work)], cwd=ROOT, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-5000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def atomic(model, tmp_path_factory) -> dict:
    return kill_points("atomic", model, tmp_path_factory.mktemp("kills") / "atomic")


@pytest.fixture(scope="module")
def plain(model, tmp_path_factory) -> dict:
    return kill_points("tfx", model, tmp_path_factory.mktemp("kills") / "tfx")


def test_a_killed_atomic_push_leaves_the_old_versions_or_the_new_complete_one(atomic):
    files = atomic["files"]
    assert files >= 4  # saved_model.pb, fingerprint.pb, variables' index and data
    points = atomic["points"]
    # Killed before each copy: the serving copy's files, then TFX's archive copy's.
    assert [p["status"] for p in points] == [-9] * (2 * files) + [0]
    for point in points:
        numbered = {n: done for n, done in point["after_kill"].items() if n.isdigit()}
        hidden = [n for n in point["after_kill"] if not n.isdigit()]
        assert all(numbered.values()), point  # every version TF Serving sees is complete
        if point["status"] == -9:  # killed: what served before, and one hidden leftover
            assert list(numbered) == ["1"] and len(hidden) == 1, point
            assert hidden[0].startswith(".push-"), point
        else:  # the whole push: the new version beside the old, nothing hidden
            assert len(numbered) == 2 and hidden == [], point
        # The next push removed the hidden leftover (and logged it), and pushed.
        assert point["next_status"] == 0, point
        assert [n for n in point["after_next"] if not n.isdigit()] == [], point
        assert all(point["after_next"].values()) and len(point["after_next"]) >= 2, point
        assert len(point["removed"]) == len(hidden), point


def test_tfx_plain_push_killed_the_same_way_leaves_a_numbered_incomplete_version(plain):
    """The negative control: the same kills on TFX's own executor."""
    incomplete = [p["kill_at"] for p in plain["points"]
                  if any(n.isdigit() and not done for n, done in p["after_kill"].items())]
    # Killed before any of the serving copy's files but saved_model.pb (TFX's last; copy_dir
    # makes the folder before the first): a numbered folder without saved_model.pb, which TF
    # Serving would count as a version. A next push in the same second even keeps it (TFX skips
    # a version folder that exists).
    assert incomplete == list(range(plain["files"])), plain["points"]


def test_the_outputs_are_tfx_s(atomic, plain):
    """Unkilled, the atomic push records what TFX's does: pushed, pushed_destination
    (<base>/<version>) and pushed_version, and the same archived copy."""
    for results in (atomic, plain):
        whole = results["points"][-1]
        assert whole["status"] == 0
    mine, theirs = (json.loads(Path(r["points"][-1]["record"]).read_text())
                    for r in (atomic, plain))
    assert set(mine) == set(theirs) == {"copies", "pushed", "pushed_destination",
                                        "pushed_version", "archive"}
    assert mine["pushed"] == theirs["pushed"] == 1
    for record in (mine, theirs):
        destination = Path(record["pushed_destination"])
        assert destination.name == record["pushed_version"]
        assert destination.parent.name == "serving"
    assert mine["copies"] == theirs["copies"]  # the same files copied, once each way
    assert mine["archive"] == theirs["archive"]


_S3_PUSH = textwrap.dedent("""
    import json, sys
    import pipeline  # noqa: F401
    from core import storage
    model, base, archive = sys.argv[1:4]
    from pipeline.kubeflow.step import file_systems

    file_systems.enable([base])
    from tfx.proto import pusher_pb2
    from tfx.types import standard_artifacts
    from tfx.utils import proto_utils
    from components.pusher import executor
    trained, pushed = standard_artifacts.Model(), standard_artifacts.PushedModel()
    trained.uri, pushed.uri = model, archive
    destination = pusher_pb2.PushDestination(
        filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=base))
    executor.Executor().Do({"model": [trained]}, {"pushed_model": [pushed]},
                           {"push_destination": proto_utils.proto_to_json(destination)})
    print(json.dumps({k: v.string_value or v.int_value
                      for k, v in pushed.mlmd_artifact.custom_properties.items()}))
    storage.exit_now(0)
""")


@pytest.mark.e2e  # a TensorFlow process on a real S3 server
def test_a_push_to_s3_removes_what_an_unfinished_one_left_and_writes_no_marker(
        model, s3, tmp_path):  # noqa: F811
    """On s3:// (no rename) the push is TFX's own, saved_model.pb last; first it removes a
    numbered prefix without saved_model.pb and a hidden `.push-*` one, as a killed push leaves
    them."""
    import os

    serving = "atomic/serving"
    s3.upload_tree(model / "Format-Serving", f"{serving}/1")
    for key in (f"{serving}/5/variables/variables.index", f"{serving}/.push-dead/7/fingerprint.pb"):
        s3.client.put_object(Bucket=s3.bucket, Key=key, Body=b"x")
    base = f"s3://{s3.bucket}/{serving}"
    result = subprocess.run([sys.executable, "-c", _S3_PUSH, str(model), base,
                             str(tmp_path / "archive")], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, env={**os.environ, **s3.env})
    assert result.returncode == 0, result.stderr[-5000:]
    pushed = json.loads(result.stdout.strip().splitlines()[-1])
    version = pushed["pushed_version"]
    assert pushed["pushed"] == 1 and pushed["pushed_destination"] == f"{base}/{version}"
    keys = s3.keys(f"{serving}/")
    assert {k.split("/")[2] for k in keys} == {"1", version}
    assert f"{serving}/{version}/saved_model.pb" in keys
    assert [k for k in keys if k.endswith("/")] == []
    removed = [line for line in result.stderr.splitlines() if "did not finish" in line]
    assert len(removed) == 2 and any(f"{base}/5," in line for line in removed), removed
