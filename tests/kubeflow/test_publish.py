"""Upload, run and schedule against a KFP API: a fake v2beta1 server on 127.0.0.1, a closed port.

The fake answers the requests kfp.Client 2.5 (kfp-server-api 2.0.5) makes, with in-memory
pipelines, versions, experiments, runs and recurring runs, and can be told to fail any call. It
follows the client's API models; it is not the real server's code.
"""
from __future__ import annotations

import email
import json
import re
import socket
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from pipeline.config import load_config
from pipeline.kubeflow import KubeflowError
from pipeline.kubeflow.publish import TOKEN_ENV, publish
from tests.helpers import run_cli, write_config

CLUSTER = {"kubeflow.image": "ghcr.io/acme/tfx-pipeline-template:1.2.3",
           "kubeflow.pipeline_root": "gs://acme-ml/tfx/penguins",
           "kubeflow.input_base": "gs://acme-ml/data/penguins",
           "kubeflow.serving_dir": "gs://acme-ml/serving", "kubeflow.experiment": "nightly-test"}
API = "/apis/v2beta1"


class FakeKfp(ThreadingHTTPServer):
    def __init__(self, token=None, multi_user=False):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.token, self.multi_user = token, multi_user
        self.pipelines, self.versions, self.experiments = {}, {}, {}
        self.runs, self.recurring = {}, {}
        self.requests, self.failures = [], {}  # (method, path regex) -> (status, payload)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def fail(self, method, path_regex, status, payload):
        self.failures[(method, path_regex)] = (status, payload)


class _Handler(BaseHTTPRequestHandler):
    server: FakeKfp

    def log_message(self, *args):  # quiet test output
        pass

    def do_GET(self):  # noqa: N802
        self._handle("GET")

    def do_POST(self):  # noqa: N802
        self._handle("POST")

    def do_DELETE(self):  # noqa: N802
        self._handle("DELETE")

    def _handle(self, method):
        server, url = self.server, urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        server.requests.append((method, url.path, headers))
        if server.token and self.headers.get("Authorization") != f"Bearer {server.token}":
            return self._send(401, {"error": "Unauthenticated", "code": 16})
        for (fail_method, pattern), (status, payload) in server.failures.items():
            if fail_method == method and re.fullmatch(pattern, url.path):
                if status == 0:  # the answer is lost: close the connection without one
                    self.close_connection = True
                    return None
                return self._send(status, payload)
        route = f"{method} {url.path.removeprefix(API)}"
        handlers = [
            (r"GET /healthz", lambda: {"multi_user": server.multi_user}),
            (r"GET /pipelines", lambda: {"pipelines": _named(server.pipelines, query)}),
            (r"POST /pipelines/upload", lambda: self._upload(body, query)),
            (r"POST /pipelines/upload_version", lambda: self._upload(body, query, version=True)),
            (r"GET /pipelines/([^/]+)/versions", lambda pid: {"pipeline_versions": [
                v for v in server.versions.values() if v["pipeline_id"] == pid]}),
            (r"GET /experiments", lambda: {"experiments": _named(server.experiments, query)}),
            (r"POST /experiments", lambda: _create(server.experiments, "experiment_id",
                                                   json.loads(body))),
            (r"POST /runs", lambda: _create(server.runs, "run_id", json.loads(body))),
            (r"GET /recurringruns", lambda: {"recurringRuns": [
                r for r in _named(server.recurring, query)
                if r["experiment_id"] == query.get("experiment_id")]}),
            (r"POST /recurringruns", lambda: _create(server.recurring, "recurring_run_id",
                                                     json.loads(body))),
            (r"DELETE /recurringruns/([^/]+)", lambda rid: server.recurring.pop(rid) and {}),
        ]
        for pattern, handler in handlers:
            match = re.fullmatch(pattern, route)
            if match:
                try:
                    return self._send(200, handler(*match.groups()))
                except (KeyError, ValueError) as error:
                    return self._send(400, {"error": f"bad request: {error}"})
        self._send(404, {"error": f"no route {route}"})

    def _upload(self, body, query, version=False):
        message = email.message_from_bytes(
            f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode() + body)
        spec = yaml.safe_load(next(part.get_payload(decode=True) for part in message.walk()
                                   if part.get_param("name", header="content-disposition")
                                   == "uploadfile"))
        if "pipelineInfo" not in spec:  # the server parses the spec before storing anything
            raise ValueError("not a pipeline spec")
        server = self.server
        pipeline_id = query["pipelineid"] if version else _create(
            server.pipelines, "pipeline_id", {"display_name": query["name"]})["pipeline_id"]
        created = _create(server.versions, "pipeline_version_id", {
            "pipeline_id": pipeline_id, "display_name": query["name"], "spec": spec})
        return created if version else server.pipelines[pipeline_id]

    def _send(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _named(table, query):
    wanted = [p["stringValue"] for p in json.loads(query.get("filter", '{"predicates": []}'))[
        "predicates"] if p["key"] == "display_name"]
    return [item for item in table.values() if not wanted or item["display_name"] in wanted]


def _create(table, id_key, item):
    item = {**item, id_key: uuid.uuid4().hex[:12]}
    table[item[id_key]] = item
    return item


@pytest.fixture
def kfp():
    server = FakeKfp()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def spec(tmp_path) -> Path:
    path = tmp_path / "penguins.yaml"
    path.write_text(yaml.safe_dump({"pipelineInfo": {"name": "penguins"}, "root": {},
                                    "schemaVersion": "2.1.0"}))
    return path


@pytest.fixture
def config(tmp_path):
    return load_config(write_config(tmp_path, CLUSTER))


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_first_publish_creates_the_pipeline_and_starts_a_run(kfp, spec, config):
    lines = publish(spec, config, kfp.url, schedule=False)
    assert len(kfp.pipelines) == 1 and len(kfp.versions) == 1
    (experiment,) = kfp.experiments.values()
    assert experiment["display_name"] == "nightly-test"
    (run,) = kfp.runs.values()
    assert run["experiment_id"] == experiment["experiment_id"]
    (version,) = kfp.versions.values()
    assert run["pipeline_version_reference"] == {"pipeline_id": version["pipeline_id"],
                                                 "pipeline_version_id": version[
                                                     "pipeline_version_id"]}
    assert any(f"{kfp.url}/#/runs/details/{run['run_id']}" in line for line in lines)


def test_next_publish_adds_a_version_and_reuses_the_experiment(kfp, spec, config):
    publish(spec, config, kfp.url, schedule=False)
    publish(spec, config, kfp.url, schedule=False)
    assert len(kfp.pipelines) == 1 and len(kfp.versions) == 2 and len(kfp.experiments) == 1
    newest = list(kfp.versions.values())[-1]
    assert list(kfp.runs.values())[-1]["pipeline_version_reference"][
        "pipeline_version_id"] == newest["pipeline_version_id"]
    assert newest["display_name"].startswith("penguins-")


def test_scheduling_twice_leaves_one_nightly_recurring_run(kfp, spec, config):
    publish(spec, config, kfp.url, schedule=True)
    lines = publish(spec, config, kfp.url, schedule=True)
    (recurring,) = kfp.recurring.values()
    assert recurring["display_name"] == "penguins-nightly"
    assert recurring["trigger"] == {"cron_schedule": {"cron": "0 0 2 * * *"}}
    assert recurring["max_concurrency"] in (1, "1") and recurring["no_catchup"] is True
    assert recurring["mode"] == "ENABLE"
    assert recurring["pipeline_version_reference"]["pipeline_version_id"] == list(
        kfp.versions.values())[-1]["pipeline_version_id"]
    assert not kfp.runs, "scheduling starts no run now"
    assert "replaced 1 earlier one(s)" in lines[-1]


def test_rejected_upload_says_why_and_that_nothing_was_created(kfp, spec, config):
    kfp.fail("POST", f"{API}/pipelines/upload", 400,
             {"error": "invalid pipeline spec", "message": "Failed to parse the spec: bad DAG"})
    with pytest.raises(KubeflowError) as raised:
        publish(spec, config, kfp.url, schedule=False)
    message = str(raised.value)
    assert "creating pipeline 'penguins' failed: HTTP 400: Failed to parse the spec: bad DAG" in (
        message)
    assert "nothing else was created on the server" in message
    assert not (kfp.pipelines or kfp.runs or kfp.experiments)


def test_failure_after_upload_lists_what_is_left_on_the_server(kfp, spec, config):
    publish(spec, config, kfp.url, schedule=False)
    kfp.fail("POST", f"{API}/runs", 500, {"error": "workflow controller down"})
    with pytest.raises(KubeflowError) as raised:
        publish(spec, config, kfp.url, schedule=False)
    newest = list(kfp.versions.values())[-1]
    assert "starting a run failed: HTTP 500: workflow controller down" in str(raised.value)
    assert (f"already created on the server (nothing was rolled back):\n  - pipeline version "
            f"{newest['display_name']} ({newest['pipeline_version_id']})") in str(raised.value)


def test_a_lost_answer_says_the_server_may_have_done_it(kfp, spec, config):
    kfp.fail("POST", f"{API}/runs", 0, None)
    with pytest.raises(KubeflowError) as raised:
        publish(spec, config, kfp.url, schedule=False)
    assert "starting a run failed: cannot reach KFP" in str(raised.value)
    assert "may have done it before the connection failed: check the KFP UI" in str(raised.value)
    assert "already created on the server" in str(raised.value)


def test_unreachable_server_is_one_clear_error(spec, config):
    url = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(KubeflowError, match=rf"cannot reach KFP at {url}: .*[Cc]onnection refused"):
        publish(spec, config, url, schedule=False)


def test_an_endpoint_that_is_not_kfp_is_named(kfp, spec, config):
    kfp.fail("GET", f"{API}/healthz", 404, {"error": "Not Found"})
    with pytest.raises(KubeflowError, match="HTTP 404.*is this the KFP API"):
        publish(spec, config, kfp.url, schedule=False)


def test_token_comes_from_the_environment(kfp, spec, config, monkeypatch):
    kfp.token = "s3cret"
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(KubeflowError, match=f"HTTP 401.*{TOKEN_ENV}"):
        publish(spec, config, kfp.url, schedule=False)
    monkeypatch.setenv(TOKEN_ENV, "s3cret")
    publish(spec, config, kfp.url, schedule=False)
    assert len(kfp.runs) == 1
    assert all(headers.get("authorization") == "Bearer s3cret"
               for _, path, headers in kfp.requests[-3:])


def test_multi_user_kfp_needs_a_namespace(kfp, spec, config):
    kfp.multi_user = True
    with pytest.raises(KubeflowError, match="multi-user: set kubeflow.namespace"):
        publish(spec, config, kfp.url, schedule=False)


def test_a_config_not_ready_for_a_cluster_is_refused_before_any_request(kfp, spec, tmp_path):
    local = load_config(write_config(tmp_path, {"kubeflow.input_base": None,
                                                "kubeflow.pipeline_root": "gs://YOUR_BUCKET/x"}))
    with pytest.raises(KubeflowError) as raised:
        publish(spec, local, kfp.url, schedule=False)
    assert "input_base" in str(raised.value) and "local path" in str(raised.value)
    assert "placeholder" in str(raised.value) and "example registry" in str(raised.value)
    assert kfp.requests == []


def test_cli_compiles_uploads_and_starts_a_run(kfp, tmp_path):
    config = write_config(tmp_path, {**CLUSTER, "kubeflow.output_dir": str(tmp_path / "spec")})
    result = run_cli("pipeline.run", "--runner", "kubeflow", "--config", str(config),
                     "--endpoint", kfp.url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Uploaded penguins.yaml as pipeline 'penguins'" in result.stdout
    assert "Started run" in result.stdout
    (version,) = kfp.versions.values()
    assert set(version["spec"]["root"]["dag"]["tasks"]) >= {"CsvExampleGenDriver", "Pusher"}


@pytest.mark.parametrize("args, words", [
    (["--schedule"], "--schedule needs an endpoint"),
    (["--endpoint", "ml-pipeline:8888"], "bad endpoint"),
])
def test_cli_refuses_before_compiling(tmp_path, args, words):
    config = write_config(tmp_path, {"kubeflow.output_dir": str(tmp_path / "spec")})
    result = run_cli("pipeline.run", "--runner", "kubeflow", "--config", str(config), *args)
    assert result.returncode == 1 and words in result.stderr
    assert not (tmp_path / "spec").exists()
