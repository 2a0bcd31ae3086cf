"""What errors tell a stranger (issue 42, item 7), against the endpoint as a process of its own
(python -m service.endpoint): a 5xx body holds a reason code and the request id, no URL, host,
port, path or upstream text; the same id is the answer's X-Request-ID and is in the log line
that keeps the detail; the admin endpoints answer on endpoint.admin_port and are a 404 on the
public port; a Redis outage writes a few WARNING lines, not one per request."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from core.config import ConfigError
from service.config import load_service_config
from devtools import redis_node
from devtools.loopback import free_port
from devtools.tf_serving.rest_stub import RestStub, StubError
from service.endpoint.history import OutageLog
from tests.helpers import REPO
from tests.redis_server import redis_server  # noqa: F401
from tests.service.endpoint_env import (V1_ITEMS, canned_retrieve, wait_for, with_test_budgets,
                                        write_version)

CONFIG = REPO / "configs" / "recommender_service.yaml"
ADMIN_PATHS = ("/healthz", "/readyz", "/metrics", "/docs", "/openapi.json", "/redoc")


@dataclasses.dataclass
class Process:
    public: str
    admin: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text()


@contextlib.contextmanager
def endpoint_process(tmp_path: Path, redis_url: str, tf_url: str):
    """python -m service.endpoint on free ports, its log (stderr) in a file."""
    models = tmp_path / "models"
    write_version(models, 1, V1_ITEMS)
    raw = yaml.safe_load(CONFIG.read_text())
    raw["pipeline_config"] = str(REPO / "configs" / "recommender.yaml")
    raw["catalog"]["path"] = str(REPO / "data" / "catalog" / "items.csv")
    raw["tf_serving"].update(refresh_s=0.2, protocol="rest")  # tf_url: a REST stand-in
    with_test_budgets(raw)
    config = tmp_path / "service.yaml"
    config.write_text(yaml.safe_dump(raw))
    log_path = tmp_path / "endpoint.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "service.endpoint", "--config", str(config), "--port", "0",
             "--admin-port", "0", "--redis-url", redis_url, "--tf-serving-url", tf_url,
             "--model-base-path", str(models)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        lines = [process.stdout.readline(), process.stdout.readline()]
        assert lines[0].startswith("recommend endpoint on http://127.0.0.1:"), \
            lines + [log_path.read_text()]
        assert lines[1].startswith("admin (/healthz /readyz /metrics /docs) on "), lines
        public = lines[0].split(" on ", 1)[1].split(": model", 1)[0]
        admin = lines[1].rsplit(" on ", 1)[1].strip()
        yield Process(public, admin, log_path)
    finally:
        process.terminate()
        process.wait(10)
        process.stdout.close()


def assert_tells_nothing(text: str, *secrets: str) -> None:
    """No URL, host, port, file path or exception text in an answer's body."""
    for secret in ("http", "127.0.0.1", "localhost", "/", "Error", "Exception", "connect",
                   "retrieval_items", "models", *secrets):
        assert secret not in text, f"{secret!r} in the answer: {text}"


def assert_error_answer(answer: httpx.Response, status: int, code: str, *secrets: str) -> str:
    """A 5xx of the reason code, its body's request_id the X-Request-ID header; the id."""
    assert answer.status_code == status, answer.text
    rid = answer.headers["x-request-id"]
    body = answer.json()
    assert body == {"error": code, "field": None, "request_id": rid}
    assert_tells_nothing(json.dumps({**body, "request_id": None}), *secrets)
    return rid


def logged(process: Process, rid: str, *details: str) -> str:
    """The log line naming the request id, holding the details (waited for: it is written by
    another process)."""
    def line():
        return next((x for x in process.log().splitlines() if rid in x
                     and all(d in x for d in details)), None)
    return wait_for(line, timeout_s=10, what=f"a log line of {rid} with {details}")


@pytest.mark.slow  # python -m service.endpoint as a process (and its servers)
def test_tf_serving_refusing_is_a_503_of_a_reason_and_a_request_id(tmp_path, redis_server):  # noqa: F811,E501
    port = free_port()  # nobody listens: every connection refused
    with endpoint_process(tmp_path, redis_server.url, f"http://127.0.0.1:{port}") as process:
        with httpx.Client(base_url=process.public, timeout=30) as client:
            answer = client.post("/v1/recommend", json={"user_id": "u1", "k": 3},
                                 headers={"X-Request-ID": "gw-7f3a.42:x_1"})
            rid = assert_error_answer(answer, 503, "no_model_version", str(port))
            assert rid == "gw-7f3a.42:x_1"  # a sane caller's id is kept
            # One that is not a sane token (spaces, quotes, too long) is replaced.
            for bad in ('a b"<x>', "x" * 129, "-leading"):
                answer = client.post("/v1/recommend", json={"user_id": "u1", "k": 3},
                                     headers={"X-Request-ID": bad})
                fresh = assert_error_answer(answer, 503, "no_model_version", str(port))
                assert re.fullmatch(r"[0-9a-f]{32}", fresh), fresh
        line = logged(process, rid, "503 no_model_version", f"127.0.0.1:{port}")
        assert "ERROR" in line
        # The operator's view, on the admin port: the same detail.
        ready = httpx.get(f"{process.admin}/readyz", timeout=30)
        assert ready.status_code == 503 and str(port) in ready.json()["error"]


class StatusErring(RestStub):
    """TF Serving answering 500 to the model status call, naming its model volume."""

    def status(self, path):
        return 500, {"error": "INTERNAL: /models/recommender/1/saved_model.pb: read failed"}


@pytest.mark.slow  # python -m service.endpoint as a process (and its servers)
def test_tf_serving_answering_500_or_refusing_the_request_tells_only_a_reason(
        tmp_path, redis_server):  # noqa: F811
    redis_server.client().zadd("history:u1", {"sku1003": 1})
    with StatusErring("recommender", canned_retrieve(V1_ITEMS)) as stub, \
            endpoint_process(tmp_path, redis_server.url, stub.url) as process, \
            httpx.Client(base_url=process.public, timeout=30) as client:
        answer = client.post("/v1/recommend", json={"user_id": "u1", "k": 3})
        rid = assert_error_answer(answer, 503, "no_model_version", "saved_model", "INTERNAL")
        logged(process, rid, "503 no_model_version", "500", stub.url)
    with RestStub("recommender", canned_retrieve(V1_ITEMS)) as stub, \
            endpoint_process(tmp_path / "again", redis_server.url, stub.url) as process, \
            httpx.Client(base_url=process.public, timeout=30) as client:
        port = stub.url.rsplit(":", 1)[1]

        def refuses(signature, instances):
            raise StubError(400, "INVALID_ARGUMENT: input user_click_history of "
                            "/models/recommender/1 expects 10 values")
        stub.predict = refuses
        answer = client.post("/v1/recommend", json={"user_id": "u1", "k": 3})
        rid = assert_error_answer(answer, 502, "tf_serving_refused_request", port,
                                  "INVALID_ARGUMENT", "user_click_history")
        logged(process, rid, "502 tf_serving_refused_request", stub.url, "INVALID_ARGUMENT")

        def erring(signature, instances):
            raise StubError(500, "INTERNAL: /models/recommender/1 out of memory")
        stub.predict = erring  # TF Serving erring: the fallback, a 200 telling nothing more
        answer = client.post("/v1/recommend", json={"user_id": "u1", "k": 3})
        assert answer.status_code == 200 and answer.json()["fallback_reason"] == \
            "tf_serving_error"
        assert re.fullmatch(r"[0-9a-f]{32}", answer.headers["x-request-id"])
        assert "INTERNAL" not in answer.text and "models" not in answer.text


@pytest.mark.slow  # python -m service.endpoint as a process (and its servers)
def test_admin_endpoints_answer_on_the_admin_port_only(tmp_path, redis_server):  # noqa: F811
    with RestStub("recommender", canned_retrieve(V1_ITEMS)) as stub, \
            endpoint_process(tmp_path, redis_server.url, stub.url) as process:
        with httpx.Client(base_url=process.public, timeout=30) as client:
            for path in ADMIN_PATHS:
                answer = client.get(path)
                assert answer.status_code == 404, (path, answer.status_code)
                assert answer.headers["x-request-id"]
            assert client.post("/v1/recommend",
                               json={"user_id": "u1", "k": 3}).status_code == 200
        with httpx.Client(base_url=process.admin, timeout=30) as admin:
            assert admin.get("/healthz").json() == {"status": "alive"}
            assert admin.get("/readyz").json()["ready"] is True
            assert "recommend_requests_total" in admin.get("/metrics").text
            assert admin.get("/docs").status_code == 200
            schema = admin.get("/openapi.json").json()
            assert list(schema["paths"]) == ["/v1/recommend"]
            assert "request_id" in schema["components"]["schemas"]["ErrorAnswer"]["properties"]
            assert admin.post("/v1/recommend", json={"user_id": "u1", "k": 3}).status_code \
                in (404, 405)


@pytest.mark.slow  # python -m service.endpoint as a process (and its servers)
def test_a_redis_outage_writes_a_few_warning_lines_not_one_per_request(
        tmp_path, redis_server):  # noqa: F811
    redis_server.client().zadd("history:u1", {"sku1003": 1})
    with RestStub("recommender", canned_retrieve(V1_ITEMS)) as stub, \
            endpoint_process(tmp_path, redis_server.url, stub.url) as process, \
            httpx.Client(base_url=process.public, timeout=30) as client:
        # The first read opens the endpoint's Redis connection, which on a loaded machine can
        # outlast the read's budget (a fallback, and its lines): read until Redis answers, and
        # count only the lines written after that.
        deadline = time.monotonic() + 30
        while client.post("/v1/recommend", json={"user_id": "u1", "k": 3}).json()[
                "history"] != "redis":
            assert time.monotonic() < deadline, "the endpoint never read the history in Redis"
            time.sleep(0.2)
        before = len(process.log().splitlines())
        redis_node.stop(redis_server)
        ids = []
        for n in range(200):
            answer = client.post("/v1/recommend", json={"user_id": f"user-{n}", "k": 3})
            assert answer.status_code == 200 and answer.json()["fallback_reason"] == \
                "redis_error"
            ids.append(answer.headers["x-request-id"])
        assert redis_server.url.rsplit(":", 1)[1].split("/")[0] not in answer.text
        assert "Connection" not in answer.text and "Redis" not in answer.text
        # The first failure's line names its request and Redis's error; it is written before
        # its answer, so it is in the file by now.
        time.sleep(0.2)
        warnings = [x for x in process.log().splitlines()[before:] if " WARNING " in x]
        redis_lines = [x for x in warnings if "Redis" in x]
        assert 1 <= len(redis_lines) <= 3, warnings
        assert ids[0] in redis_lines[0] and "ConnectionError" in redis_lines[0]
        assert not any(f"user-{n}" in x for x in warnings for n in range(200))
        assert len(warnings) <= 4, warnings


def test_the_outage_log_counts_between_lines_and_says_when_redis_is_back(caplog):
    now = [100.0]
    outage = OutageLog(interval_s=10, clock=lambda: now[0])
    with caplog.at_level("WARNING", logger="service.endpoint"):
        for _ in range(50):
            outage.failed("ConnectionError: refused")
            now[0] += 0.1  # 50 failures in 5 s: the first line only
        assert len(caplog.records) == 1
        now[0] += 6
        outage.failed("TimeoutError")  # 11 s after the first line: the count
        assert len(caplog.records) == 2
        assert "50 more history reads failed" in caplog.records[1].getMessage()
        outage.failed("TimeoutError")
        outage.answered()
        outage.answered()  # once, not per read
        messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3 and "answered again" in messages[2]
    assert "(1 failures since the last line)" in messages[2]


@pytest.mark.parametrize("value, kept", [("abc-123", True), ("A" * 128, True),
                                         ("A" * 129, False), ("a\tb", False), ("é", False),
                                         ("", False), ("_x", False)])
def test_only_a_sane_caller_request_id_is_kept(value, kept):
    from service.endpoint.errors import sane

    assert (sane(value.encode()) == value) is kept


def test_an_unexpected_failure_is_a_500_of_internal_error_logged_with_its_id(
        tmp_path, redis_server, caplog):  # noqa: F811
    """The endpoint's own bug: the exception's text (a path here) only in the log."""
    from service.endpoint.app import create_app
    from tests.service.endpoint_env import served, service_config

    write_version(tmp_path / "models", 1, V1_ITEMS)
    with RestStub("recommender", canned_retrieve(V1_ITEMS)) as stub:
        app = create_app(service_config(tmp_path, redis_server.url, stub.url))

        async def broken(request):
            raise RuntimeError("cannot read /models/recommender/1/secret.json")
        app.state.endpoint.recommend = broken
        with caplog.at_level("ERROR", logger="service.endpoint"), served(app) as url:
            answer = httpx.post(f"{url}/v1/recommend", json={"user_id": "u1", "k": 3},
                                headers={"X-Request-ID": "req-500"}, timeout=30)
    assert assert_error_answer(answer, 500, "internal_error", "secret", "cannot") == "req-500"
    (record,) = [r for r in caplog.records if "req-500" in r.getMessage()]
    assert "500 internal_error" in record.getMessage() and "secret.json" in record.exc_text


def test_the_admin_port_must_differ_from_the_public_one(tmp_path):
    raw = yaml.safe_load(CONFIG.read_text())
    raw["pipeline_config"] = str(REPO / "configs" / "recommender.yaml")
    raw["catalog"]["path"] = str(REPO / "data" / "catalog" / "items.csv")
    raw["endpoint"]["admin_port"] = raw["endpoint"]["port"]
    path = tmp_path / "service.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"endpoint: Value error, admin_port 8080 is the "
                       r"public port: the admin endpoints need a port of their own"):
        load_service_config(path)
