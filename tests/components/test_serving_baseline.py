"""ServingBaseline's choice of version: the one TF Serving's default policy (latest) serves."""
from __future__ import annotations


def baseline():
    """Imported when a test runs, not at collection (tests/README.md)."""
    import components.serving_baseline.component

    return components.serving_baseline.component


def _version(base, name, complete=True):
    folder = base / name
    folder.mkdir(parents=True)
    if complete:
        (folder / "saved_model.pb").write_bytes(b"")
    return folder


def test_the_highest_number_wins_not_the_newest_name_or_string_order(tmp_path):
    for name in ("9", "10", "2"):
        _version(tmp_path, name)
    assert baseline().latest_version(str(tmp_path)) == "10"  # "9" > "10" as strings


def test_folders_that_are_not_numbers_are_not_versions(tmp_path):
    _version(tmp_path, "3")
    _version(tmp_path, "99-tmp")
    _version(tmp_path, "backup")
    _version(tmp_path, "1e9")
    assert baseline().latest_version(str(tmp_path)) == "3"


def test_only_ascii_digits_make_a_version_and_it_keeps_its_folders_spelling(tmp_path):
    """'²' passes str.isdigit (and then crashed int()); TF Serving reads ASCII digits only. A
    folder `0012` is served from `0012`: the baseline path must name it so, not `12`."""
    _version(tmp_path, "3")
    _version(tmp_path, "\u00b2")
    _version(tmp_path, "\u0663")  # ARABIC-INDIC DIGIT THREE: int() takes it, TF Serving does not
    assert baseline().latest_version(str(tmp_path)) == "3"
    _version(tmp_path, "0012")
    assert baseline().latest_version(str(tmp_path)) == "0012"


def test_a_version_without_saved_model_pb_is_not_served_yet(tmp_path):
    # The Pusher copies saved_model.pb last: a version without it is still being written.
    _version(tmp_path, "5")
    _version(tmp_path, "7", complete=False)
    assert baseline().latest_version(str(tmp_path)) == "5"


def test_nothing_serves_without_a_complete_version_or_a_folder(tmp_path):
    assert baseline().latest_version(str(tmp_path / "absent")) is None
    _version(tmp_path, "7", complete=False)
    _version(tmp_path, "notes")
    assert baseline().latest_version(str(tmp_path)) is None


# --- serving.release: canary: the Rollout's stable version, from a fake Kubernetes API ---------
# (tests/pipeline/test_release.py's, the fixture `fake` via tests/components/conftest.py: bearer
# token, the release Role enforced on every request).

from tests.helpers import dump_yaml  # noqa: E402
from tests.pipeline.test_release import (  # noqa: E402
    NAMESPACE, ROLLOUT_NAME, TOKEN, bundled_rollout)

ROLLOUT = f"{NAMESPACE}/{ROLLOUT_NAME}"
STABLE, CANARY = "1717171717", "1717258117"


def _cluster(server):
    from core.rollout import Cluster

    return Cluster(server.url, TOKEN)


def _rollout(version, status, stable=None):
    from core.rollout import STABLE_ANNOTATION

    rollout = bundled_rollout(version, status)
    if stable:
        rollout["metadata"].setdefault("annotations", {})[STABLE_ANNOTATION] = stable
    return rollout


def _pushed(tmp_path):
    for name in (STABLE, CANARY):
        _version(tmp_path, name)
    return str(tmp_path)


ABORTED = {"phase": "Degraded", "abort": True, "stableRS": "aaa", "currentPodHash": "bbb",
           "message": "RolloutAborted: metric error-ratio assessed Failed"}


def test_an_aborted_canary_is_never_the_baseline_the_stable_version_is(fake, tmp_path):
    base = _pushed(tmp_path)
    server = fake(_rollout(CANARY, ABORTED, stable=STABLE))
    assert baseline().baseline_version(base, ROLLOUT, _cluster(server)) == STABLE
    assert [verb for verb, _, _ in server.requests] == ["get"]  # reads, never patches
    # Negative control: direct release, the same folders: the newest one, the aborted canary.
    assert baseline().baseline_version(base, "") == CANARY


def test_a_canary_under_analysis_is_not_the_baseline_yet(fake, tmp_path):
    running = {"phase": "Paused", "stableRS": "aaa", "currentPodHash": "bbb"}
    server = fake(_rollout(CANARY, running, stable=STABLE))
    assert baseline().baseline_version(_pushed(tmp_path), ROLLOUT, _cluster(server)) == STABLE


def test_a_promoted_canary_is_the_baseline(fake, tmp_path):
    promoted = {"phase": "Healthy", "stableRS": "bbb", "currentPodHash": "bbb"}
    server = fake(_rollout(CANARY, promoted, stable=STABLE))
    assert baseline().baseline_version(_pushed(tmp_path), ROLLOUT, _cluster(server)) == CANARY


def test_nothing_promoted_yet_means_no_baseline_whatever_the_folders(fake, tmp_path):
    # The bundled manifests before any release (version unset), then a first canary under way.
    base = _pushed(tmp_path)
    server = fake(_rollout("unset", {"stableRS": "x", "currentPodHash": "x"}))
    assert baseline().baseline_version(base, ROLLOUT, _cluster(server)) is None
    first = fake(_rollout(CANARY, {"phase": "Paused", "stableRS": "x", "currentPodHash": "y"}))
    assert baseline().baseline_version(base, ROLLOUT, _cluster(first)) is None


def test_a_stable_version_without_its_folder_fails_rather_than_guess(fake, tmp_path):
    import pytest

    _version(tmp_path, CANARY)
    _version(tmp_path, STABLE, complete=False)
    server = fake(_rollout(CANARY, ABORTED, stable=STABLE))
    with pytest.raises(baseline().BaselineError, match=f"stable version {STABLE} is not under"):
        baseline().baseline_version(str(tmp_path), ROLLOUT, _cluster(server))


def test_an_annotation_naming_the_aborted_version_is_refused(fake, tmp_path):
    import pytest

    server = fake(_rollout(CANARY, ABORTED, stable=CANARY))
    with pytest.raises(baseline().BaselineError, match="aborted version"):
        baseline().baseline_version(_pushed(tmp_path), ROLLOUT, _cluster(server))


def test_a_refused_request_fails_the_step(fake, tmp_path):
    import pytest

    server = fake(_rollout(CANARY, ABORTED, stable=STABLE))
    with pytest.raises(baseline().BaselineError, match="403"):
        baseline().baseline_version(_pushed(tmp_path), "default/" + ROLLOUT_NAME,
                                    _cluster(server))


def _kubeconfig(path, server_url, user):

    path.write_text(dump_yaml({
        "apiVersion": "v1", "kind": "Config", "current-context": "ops",
        "contexts": [{"name": "ops", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": server_url}}],
        "users": [{"name": "u", "user": user}]}))
    return path


def test_the_local_runner_reaches_the_api_through_the_kube_config(fake, tmp_path, monkeypatch):
    server = fake(_rollout(CANARY, ABORTED, stable=STABLE))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "config", server.url,
                                                     {"token": TOKEN})))
    assert baseline().baseline_version(_pushed(tmp_path / "serving"), ROLLOUT) == STABLE
    # The fake checks the token: a wrong one is refused (401), so the kube config's was sent.
    _kubeconfig(tmp_path / "config", server.url, {"token": "not-it"})
    import pytest

    with pytest.raises(baseline().BaselineError, match="401"):
        baseline().baseline_version(str(tmp_path / "serving"), ROLLOUT)


def test_without_a_cluster_a_canary_run_fails_and_says_how_to_run_without_one(
        tmp_path, monkeypatch):
    import pytest

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(baseline().BaselineError, match="serving.release: direct"):
        baseline().baseline_version(_pushed(tmp_path), ROLLOUT)
    # An exec plugin (EKS, GKE) is not run: said so, with the way around it.
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(
        tmp_path / "config", "https://127.0.0.1:1", {"exec": {"command": "aws"}})))
    with pytest.raises(baseline().BaselineError, match="exec plugin.*create token"):
        baseline().baseline_version(_pushed(tmp_path / "s"), ROLLOUT)


def test_the_summary_says_what_serves_by_the_same_rule(fake, tmp_path, monkeypatch):
    from core.config import load_config
    from pipeline.report import serving_now
    from tests.helpers import write_config

    canary = load_config(write_config(tmp_path / "c", {"serving.release": "canary",
                                                        "serving.namespace": NAMESPACE}))
    _pushed(canary.model_base_path)
    server = fake(_rollout(CANARY, ABORTED, stable=STABLE))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "config", server.url,
                                                     {"token": TOKEN})))
    assert serving_now(canary) == STABLE
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    assert serving_now(canary) is None  # no cluster: unknown, not the newest folder
    direct = load_config(write_config(tmp_path / "d"))
    _pushed(direct.model_base_path)
    assert serving_now(direct) == CANARY
