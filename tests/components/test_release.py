"""The release step (components/release): the version the Pusher pushed becomes the Rollout's
canary, against tests/pipeline/test_release.py's fake Kubernetes API (token, the release Role on
every request, the Rollout CRD schema with unknown fields refused); its status reaches the run
report."""
from __future__ import annotations

import pytest

from tests.pipeline.test_release import (NAMESPACE, ROLLOUT_NAME, TOKEN, bundled_rollout,
                                         crd_errors, served_version)

ROLLOUT = f"{NAMESPACE}/{ROLLOUT_NAME}"
STABLE, PUSHED, NEWER = "1717171717", "1717258117", "1717344517"
PROMOTED = {"phase": "Healthy", "stableRS": "aaa", "currentPodHash": "aaa"}


def _cluster(server):
    from core.rollout import Cluster

    return Cluster(server.url, TOKEN)


def _run(pushed, version, server, cluster=None):
    from components.release import executor

    return executor.release_pushed(pushed, version, ROLLOUT, cluster or _cluster(server))


def test_the_pushed_version_is_released_with_the_stable_one_recorded(fake):
    from core.rollout import STABLE_ANNOTATION

    server = fake(bundled_rollout(STABLE, PROMOTED))
    status = _run(True, PUSHED, server)
    assert (status.action, status.version, status.previous) == ("released", PUSHED, STABLE)
    rollout = server.objects[(NAMESPACE, "rollouts", ROLLOUT_NAME)]
    assert served_version(server) == PUSHED and crd_errors(rollout) == []
    assert rollout["metadata"]["annotations"][STABLE_ANNOTATION] == STABLE
    assert [verb for verb, _, _ in server.requests] == ["get", "patch"]


def test_nothing_pushed_nothing_released_no_request(fake):
    server = fake(bundled_rollout(STABLE, PROMOTED))
    status = _run(False, None, server)
    assert status.action == "not-pushed" and status.version is None
    assert server.requests == [] and served_version(server) == STABLE


def test_an_unchanged_rerun_and_an_aborted_version_release_nothing(fake):
    server = fake(bundled_rollout(PUSHED, {"phase": "Healthy", "stableRS": "b",
                                           "currentPodHash": "b"}))
    assert _run(True, PUSHED, server).action == "unchanged"
    aborted = fake(bundled_rollout(PUSHED, {"phase": "Degraded", "abort": True,
                                            "stableRS": "a", "currentPodHash": "b",
                                            "message": "RolloutAborted: p99"}))
    status = _run(True, PUSHED, aborted)
    assert status.action == "aborted" and "retry" in status.message
    assert [verb for verb, _, _ in aborted.requests] == ["get"]


def test_a_refused_request_fails_the_step_naming_the_version_and_the_way_by_hand(fake):
    from components.release import executor
    from core.rollout import Cluster

    server = fake(bundled_rollout(STABLE, PROMOTED))
    with pytest.raises(executor.ReleaseFailed, match=f"{PUSHED} was pushed but not released.*"
                       "401.*pipeline.release --version"):
        _run(True, PUSHED, server, Cluster(server.url, "wrong-token"))
    assert served_version(server) == STABLE


def test_the_step_releases_what_the_pusher_pushed_not_the_newest_folder(fake, tmp_path,
                                                                     monkeypatch):
    """The TFX component's own executor, with a PushedModel as the Pusher records it: the
    status artifact carries the outcome; a newer folder in the serving dir is not released."""
    from tfx.types import standard_artifacts

    from components.release.component import Release, ReleaseStatus
    from core import rollout as rollouts

    (tmp_path / "serving" / NEWER).mkdir(parents=True)
    server = fake(bundled_rollout(STABLE, PROMOTED))
    pushed = standard_artifacts.PushedModel()
    pushed.uri = str(tmp_path / "pushed")
    pushed.set_int_custom_property("pushed", 1)
    pushed.set_string_custom_property("pushed_version", PUSHED)
    status = ReleaseStatus()
    status.uri = str(tmp_path / "status")
    monkeypatch.setattr(rollouts.Cluster, "connect", classmethod(lambda cls: _cluster(server)))
    Release.EXECUTOR_SPEC.executor_class().Do(
        {"pushed_model": [pushed]}, {"status": [status]},
        {"rollout": ROLLOUT, "code_fingerprint": "x"})
    assert served_version(server) == PUSHED
    assert status.get_string_custom_property("action") == "released"
    assert status.get_string_custom_property("version") == PUSHED


def test_the_status_reaches_the_report_the_console_and_the_ui_metrics():
    from ml_metadata.proto import metadata_store_pb2

    from components.run_report import console, render
    from components.run_report.component import headline_metrics
    from components.run_report.reader import from_outputs
    from core import nodes
    from tests.helpers import example_config

    artifact = metadata_store_pb2.Artifact()
    for key, value in {"action": "aborted", "version": PUSHED, "rollout": ROLLOUT,
                       "message": "the canary was aborted (error-ratio)"}.items():
        artifact.custom_properties[key].string_value = value
    facts = from_outputs({nodes.RELEASE_STATUS: artifact}, example_config(), "run-1")
    assert facts.release["action"] == "aborted" and facts.release["previous"] is None
    line = "NOT released: the canary was aborted (error-ratio)"
    assert f"  release:    {line}" in console.summary(facts).splitlines()
    assert line in render.markdown(facts) and 'id="release"' in render.html(facts)
    assert headline_metrics(facts)["released"] == 0.0
    # Negative control: no release step (serving.release: direct): no line, no metric.
    plain = from_outputs({}, example_config(), "run-2")
    assert plain.release is None and "release:" not in console.summary(plain)
    assert "Release:" not in render.markdown(plain) and "released" not in headline_metrics(plain)


def test_the_readme_names_every_status_the_step_records():
    """deploy/serving/README.md's table of the Release step's statuses is the step's own list:
    each action release() or the step can record, and no other."""
    import re

    from components.release import executor
    from tests.helpers import REPO

    text = (REPO / "deploy" / "serving" / "README.md").read_text()
    section = text[text.index("#### How the pipeline starts the release"):
                   text.index("#### The Evaluator's baseline under canary")]
    documented = set(re.findall(r"^\| `([a-z-]+)` \|", section, re.M))
    core = (REPO / "core" / "rollout.py").read_text()
    recorded = set(re.findall(r'return Outcome\("([a-z-]+)"', core)) | {executor.NOT_PUSHED}
    assert recorded == {"released", "unchanged", "aborted", "in-progress", "not-pushed"}
    assert documented == recorded
