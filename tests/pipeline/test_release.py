"""pipeline/release.py against a fake Kubernetes API on loopback that is at least as strict as the
real one where the release step touches it: bearer token, the RBAC Role of
deploy/serving/k8s/rollout/common/release-rbac.yaml enforced on every request (403 otherwise),
JSON merge patches only, and the patched Rollout validated against the Argo Rollouts v1.9.1 CRD
schema with unknown fields refused (422), label values as the API server checks them."""

from __future__ import annotations

import copy
import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipeline import release
from tests.deploy.crd_schema import errors as crd_errors
from tests.deploy.test_rollout import (
    ROLLOUT,
    VARIANTS,
    VERSION_LABEL,
    docs,
    variant_object,
)
from tests.deploy.test_serving_artifacts import load_yaml_docs, rename_tool
from tests.helpers import example_config, write_config

NAMESPACE = "serving"
TOKEN = "release-token"
PATH = re.compile(r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/namespaces/(?P<namespace>[^/]+)/"
                  r"(?P<resource>[^/]+)/(?P<name>[^/]+)$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def rbac() -> tuple[dict, dict]:
    found = {d["kind"]: d for d in load_yaml_docs(ROLLOUT / "common" / "release-rbac.yaml")}
    return found["Role"], found["RoleBinding"]


def merge_patch(target, patch):
    """RFC 7386."""
    if not isinstance(patch, dict):
        return patch
    target = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = merge_patch(target.get(key), value)
    return target


class FakeKubernetes(ThreadingHTTPServer):
    def __init__(self, rollout: dict, role: dict):
        super().__init__(("127.0.0.1", 0), Handler)
        self.objects = {(NAMESPACE, "rollouts", rollout["metadata"]["name"]): rollout}
        self.role = role
        self.requests: list[tuple[str, str, dict]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def allowed(self, verb: str, group: str, resource: str, namespace: str, name: str) -> bool:
        """RBAC's rule match for a Role bound in NAMESPACE."""
        if namespace != NAMESPACE:
            return False
        for rule in self.role["rules"]:
            if (group in rule.get("apiGroups", []) and resource in rule.get("resources", [])
                    and verb in rule.get("verbs", [])
                    and (not rule.get("resourceNames") or name in rule["resourceNames"])):
                return True
        return False


class Handler(BaseHTTPRequestHandler):
    server: FakeKubernetes

    def log_message(self, *args):
        pass

    def reply(self, code: int, body: dict):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def status(self, code: int, message: str):
        self.reply(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                          "message": message, "code": code})

    def handle_request(self, verb: str):
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        self.server.requests.append((verb, url.path, query))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self.status(401, "Unauthorized")
        found = PATH.match(url.path)
        if not found:
            return self.status(404, "the server could not find the requested resource")
        group, resource, namespace, name = found["group"], found["resource"], found[
            "namespace"], found["name"]
        if not self.server.allowed(verb, group, resource, namespace, name):
            return self.status(403, f'{resource}.{group} "{name}" is forbidden: cannot {verb} '
                                    f'resource "{resource}" in namespace "{namespace}"')
        key = (namespace, resource, name)
        if key not in self.server.objects:
            return self.status(404, f'{resource}.{group} "{name}" not found')
        obj = self.server.objects[key]
        if verb == "get":
            return self.reply(200, obj)
        if self.headers.get("Content-Type") != "application/merge-patch+json":
            return self.status(415, f"unsupported patch type {self.headers.get('Content-Type')}")
        patch = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        patched = merge_patch(obj, patch)
        errors = crd_errors(patched)
        labels = patched["spec"]["template"]["metadata"].get("labels", {})
        errors += [f"spec.template.metadata.labels: Invalid value: {v!r}"
                   for v in labels.values() if not (LABEL_VALUE.match(v) and len(v) <= 63)]
        if errors:
            return self.status(422, f'Rollout.argoproj.io "{name}" is invalid: '
                                    + "; ".join(errors))
        self.server.objects[key] = patched
        return self.reply(200, patched)

    def do_GET(self):
        self.handle_request("get")

    def do_PATCH(self):
        self.handle_request("patch")

    def do_PUT(self):
        self.handle_request("update")

    def do_DELETE(self):
        self.handle_request("delete")


def bundled_rollout(version: str = "1717171717", status: dict | None = None) -> dict:
    rollout = variant_object("istio", "Rollout")
    rollout["metadata"]["namespace"] = NAMESPACE
    rollout["spec"]["template"]["metadata"]["labels"][VERSION_LABEL] = version
    if status:
        rollout["status"] = status
    return rollout


@pytest.fixture
def fake():
    servers = []

    def start(rollout: dict | None = None, role: dict | None = None) -> FakeKubernetes:
        server = FakeKubernetes(rollout or bundled_rollout(), role or rbac()[0])
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def cluster(server: FakeKubernetes) -> release.Cluster:
    return release.Cluster(server.url, TOKEN)


ROLLOUT_NAME = release.rollout_name(example_config().serving.model_name)


def served_version(server: FakeKubernetes) -> str:
    rollout = server.objects[(NAMESPACE, "rollouts", ROLLOUT_NAME)]
    return rollout["spec"]["template"]["metadata"]["labels"][VERSION_LABEL]


# --------------------------------------------------------------------------------------------


def test_the_rollout_name_is_the_manifests():
    assert ROLLOUT_NAME == variant_object("istio", "Rollout")["metadata"]["name"]
    for name in ("House_Prices.v2", "a.b-c", "UPPER"):
        assert release.kubernetes_name(name) == rename_tool.kubernetes_name(name), name
    for variant in VARIANTS:
        labels = variant_object(variant, "Rollout")["spec"]["template"]["metadata"]["labels"]
        assert VERSION_LABEL in labels, variant
    assert VERSION_LABEL == release.VERSION_LABEL


def test_release_patches_the_version_label_and_nothing_else(fake):
    server = fake()
    before = copy.deepcopy(server.objects[(NAMESPACE, "rollouts", ROLLOUT_NAME)])
    outcome = release.release(cluster(server), NAMESPACE, ROLLOUT_NAME, "1717258117")
    assert (outcome.action, outcome.previous) == ("released", "1717171717")
    after = server.objects[(NAMESPACE, "rollouts", ROLLOUT_NAME)]
    assert served_version(server) == "1717258117"
    after["spec"]["template"]["metadata"]["labels"][VERSION_LABEL] = "1717171717"
    assert after == before
    assert [(verb, query) for verb, _, query in server.requests] == [
        ("get", {}), ("patch", {"fieldValidation": "Strict"})]


def test_every_request_is_one_the_role_allows(fake):
    """The requests the step makes, against the Role as written: one rule, this Rollout only."""
    role, binding = rbac()
    assert role["rules"] == [{"apiGroups": ["argoproj.io"], "resources": ["rollouts"],
                              "resourceNames": [ROLLOUT_NAME], "verbs": ["get", "patch"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    server = fake()
    release.release(cluster(server), NAMESPACE, ROLLOUT_NAME, "1717258117")
    for verb, path, _ in server.requests:
        found = PATH.match(path)
        assert server.allowed(verb, found["group"], found["resource"], found["namespace"],
                              found["name"]), (verb, path)


def test_the_fake_refuses_what_the_role_does_not_grant(fake):
    """Negative controls of the fake's RBAC: another Rollout, another namespace, no patch verb."""
    other = bundled_rollout()
    other["metadata"]["name"] = "tf-serving-other"
    server = fake(other)
    with pytest.raises(release.ReleaseError, match="403"):
        release.release(cluster(server), NAMESPACE, "tf-serving-other", "1717258117")
    server = fake()
    with pytest.raises(release.ReleaseError, match="403"):
        release.release(cluster(server), "default", ROLLOUT_NAME, "1717258117")
    read_only = copy.deepcopy(rbac()[0])
    read_only["rules"][0]["verbs"] = ["get"]
    server = fake(role=read_only)
    with pytest.raises(release.ReleaseError, match="403"):
        release.release(cluster(server), NAMESPACE, ROLLOUT_NAME, "1717258117")
    assert served_version(server) == "1717171717"


def test_the_fake_refuses_unknown_fields_and_bad_labels(fake):
    """Negative controls of the fake's schema: it is as strict as the API server with
    fieldValidation=Strict."""
    server = fake()
    path = release.ROLLOUTS.format(namespace=NAMESPACE, name=ROLLOUT_NAME)
    with pytest.raises(release.ReleaseError, match="422.*templat"):
        cluster(server).request("PATCH", path, {"spec": {"templat": {}}},
                                "application/merge-patch+json")
    with pytest.raises(release.ReleaseError, match="422.*Invalid value"):
        cluster(server).request(
            "PATCH", path, {"spec": {"template": {"metadata": {"labels": {
                VERSION_LABEL: "not a/version"}}}}}, "application/merge-patch+json")
    assert served_version(server) == "1717171717"


def test_an_unchanged_rerun_changes_nothing(fake):
    server = fake(bundled_rollout("1717258117", {"phase": "Healthy"}))
    outcome = release.release(cluster(server), NAMESPACE, ROLLOUT_NAME, "1717258117")
    assert (outcome.action, outcome.phase) == ("unchanged", "Healthy")
    assert [verb for verb, _, _ in server.requests] == ["get"]


def test_an_aborted_version_is_not_released_again(fake):
    status = {"phase": "Degraded", "abort": True,
              "message": "RolloutAborted: metric error-ratio assessed Failed"}
    server = fake(bundled_rollout("1717258117", status))
    outcome = release.release(cluster(server), NAMESPACE, ROLLOUT_NAME, "1717258117")
    assert outcome.action == "aborted"
    assert "error-ratio" in outcome.message and "retry" in outcome.message
    assert [verb for verb, _, _ in server.requests] == ["get"]
    # A newer version is released after an abort.
    outcome = release.release(cluster(server), NAMESPACE, ROLLOUT_NAME, "1717344517")
    assert outcome.action == "released" and served_version(server) == "1717344517"


@pytest.mark.parametrize("version", ["latest", "", "17172581a7", "1" * 19, "-1"])
def test_a_version_that_is_no_folder_name_is_refused_before_any_request(fake, version):
    server = fake()
    with pytest.raises(ValueError, match="not a version number"):
        release.release(cluster(server), NAMESPACE, ROLLOUT_NAME, version)
    assert server.requests == []


def canary_config(tmp_path, release_mode: str = "canary"):
    return write_config(tmp_path, {"serving.release": release_mode,
                                   "serving.namespace": NAMESPACE})


def test_the_command_releases_the_newest_pushed_version(fake, tmp_path, capsys):
    config = canary_config(tmp_path)
    base = tmp_path / "serving" / example_config().serving.model_name
    for name in ("1717171717", "1717258117", "999", "tmp-1717344517"):
        (base / name).mkdir(parents=True)
    (tmp_path / "token").write_text(TOKEN + "\n")
    server = fake()
    code = release.main(["--config", str(config), "--server", server.url,
                         "--token-file", str(tmp_path / "token")])
    assert code == 0, capsys.readouterr()
    assert served_version(server) == "1717258117"
    assert "released as the canary" in capsys.readouterr().out
    # Run again: nothing changes. Aborted: exit 3.
    assert release.main(["--config", str(config), "--server", server.url,
                         "--token-file", str(tmp_path / "token")]) == 0
    assert "already runs" in capsys.readouterr().out
    server.objects[(NAMESPACE, "rollouts", ROLLOUT_NAME)]["status"] = {"abort": True}
    assert release.main(["--config", str(config), "--server", server.url,
                         "--token-file", str(tmp_path / "token")]) == 3


def test_the_command_does_nothing_for_direct_release(fake, tmp_path, capsys):
    server = fake()
    code = release.main(["--config", str(canary_config(tmp_path, "direct")),
                         "--server", server.url, "--token-file", str(tmp_path / "none")])
    assert code == 0 and "nothing to release" in capsys.readouterr().out
    assert server.requests == []


def test_the_command_reports_a_refusal_in_one_line(fake, tmp_path, capsys):
    (tmp_path / "token").write_text("wrong")
    server = fake()
    code = release.main(["--config", str(canary_config(tmp_path)), "--version", "1717258117",
                         "--server", server.url, "--token-file", str(tmp_path / "token")])
    err = capsys.readouterr().err
    assert code == 4 and err.startswith("error: GET ") and "401" in err
    assert len(err.strip().splitlines()) == 1


def test_the_role_is_in_every_variant():
    for variant in VARIANTS:
        kinds = {d["kind"] for d in docs(VARIANTS[variant])}
        assert {"Role", "RoleBinding"} <= kinds, variant


def test_a_release_records_the_stable_version_and_reads_it_back(fake):
    """Promoted V1 serving; V2 released: the annotation keeps V1 as stable while V2's canary runs
    and after it is aborted; once V2 is promoted the pod template's version is the stable one."""
    promoted = {"phase": "Healthy", "stableRS": "aaa", "currentPodHash": "aaa"}
    server = fake(bundled_rollout("1717171717", promoted))
    assert release.stable_version(server.objects[(NAMESPACE, "rollouts", ROLLOUT_NAME)]) == (
        "1717171717")
    release.release(cluster(server), NAMESPACE, ROLLOUT_NAME, "1717258117")
    rollout = server.objects[(NAMESPACE, "rollouts", ROLLOUT_NAME)]
    assert rollout["metadata"]["annotations"][release.STABLE_ANNOTATION] == "1717171717"
    assert crd_errors(rollout) == []
    rollout["status"] = {"phase": "Paused", "stableRS": "aaa", "currentPodHash": "bbb"}
    assert release.stable_version(rollout) == "1717171717"
    # A third version while the second's canary runs: not released.
    outcome = release.release(cluster(server), NAMESPACE, ROLLOUT_NAME, "1717344517")
    assert outcome.action == "in-progress" and served_version(server) == "1717258117"
    rollout["status"] = {"phase": "Degraded", "abort": True, "stableRS": "aaa",
                         "currentPodHash": "bbb"}
    assert release.stable_version(rollout) == "1717171717"
    rollout["status"] = {"phase": "Healthy", "stableRS": "bbb", "currentPodHash": "bbb"}
    assert release.stable_version(rollout) == "1717258117"
    # The bundled manifests before any release: no stable version.
    assert release.stable_version(bundled_rollout("unset", {"stableRS": "x",
                                                            "currentPodHash": "x"})) is None


def test_the_doctor_checks_the_rollout_a_local_canary_run_will_read(fake, tmp_path, monkeypatch):
    from core.config import load_config
    from pipeline.doctor.asked import release_findings
    from pipeline.doctor.findings import FAIL, OK

    canary = load_config(canary_config(tmp_path))
    assert canary.serving.namespace == NAMESPACE
    server = fake(bundled_rollout("1717171717", {"phase": "Healthy", "stableRS": "a",
                                                 "currentPodHash": "a"}))
    [found] = release_findings(canary, cluster(server))
    assert found.level == OK and "stable 1717171717" in found.text
    assert [verb for verb, _, _ in server.requests] == ["get"]
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    [found] = release_findings(canary)
    assert found.level == FAIL and "no Kubernetes cluster" in found.text
    assert "serving.release: direct" in found.fix
    # Negative control: direct release asks nothing of a cluster.
    assert release_findings(load_config(canary_config(tmp_path / "d", "direct"))) == []
