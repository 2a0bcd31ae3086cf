"""Limits a slow client cannot outlast, and context values held to their domain (issue 42,
item 8): the endpoint as a process of its own (python -m service.endpoint) answers a client
trickling its body with a 408 while it goes on answering others, answers 503 past
endpoint.limit_concurrency and closes idle kept-alive connections; `"hour": 99` is a 400."""
from __future__ import annotations

import contextlib
import csv
import json
import select
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
import yaml

from service.config import load_service_config
from devtools.tf_serving.rest_stub import RestStub
from service.endpoint import request as req
from tests.helpers import REPO
from tests.redis_server import redis_server  # noqa: F401
from tests.service.endpoint_env import (V1_ITEMS, canned_retrieve, make_env, wait_for,
                                        with_test_budgets, write_version)

CONFIG = REPO / "configs" / "recommender_service.yaml"


@contextlib.contextmanager
def endpoint_process(tmp_path: Path, redis_url: str, **endpoint):
    """python -m service.endpoint on a free port with the repo's config but for `endpoint`;
    yields (host, port)."""
    write_version(tmp_path / "models", 1, V1_ITEMS)
    raw = yaml.safe_load(CONFIG.read_text())
    raw["pipeline_config"] = str(REPO / "configs" / "recommender.yaml")
    raw["catalog"]["path"] = str(REPO / "data" / "catalog" / "items.csv")
    raw["tf_serving"]["protocol"] = "rest"  # the REST stand-in below
    with_test_budgets(raw)["endpoint"].update(endpoint)
    config = tmp_path / "service.yaml"
    config.write_text(yaml.safe_dump(raw))
    with RestStub("recommender", canned_retrieve(V1_ITEMS)) as stub:
        process = subprocess.Popen(
            [sys.executable, "-m", "service.endpoint", "--config", str(config), "--port", "0",
             "--admin-port", "0",
             "--redis-url", redis_url, "--tf-serving-url", stub.url,
             "--model-base-path", str(tmp_path / "models")],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = process.stdout.readline()
            assert line.startswith("recommend endpoint on http://127.0.0.1:"), \
                line + (process.stderr.read() if process.poll() is not None else "")
            port = int(line.split("http://127.0.0.1:", 1)[1].split(":", 1)[0])
            yield "127.0.0.1", port
        finally:
            process.terminate()
            process.wait(10)
            process.stdout.close()
            process.stderr.close()


def read_answer(sock: socket.socket, first: bytes = b"") -> bytes:
    """One HTTP answer: its head and Content-Length bytes of body."""
    answer = first
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(65536)
    head, _, body = answer.partition(b"\r\n\r\n")
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def trickle(address, started: threading.Event, out: dict, every_s: float = 0.1) -> None:
    """POSTs a 400-byte body one byte every `every_s` on a raw socket, until an answer comes
    (or the body is all sent); out["answer"]: what the server sent, out["closed"]: whether it
    then closed the connection."""
    body = json.dumps({"user_id": "u1", "k": 3}).encode().ljust(400)
    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(b"POST /v1/recommend HTTP/1.1\r\nHost: endpoint\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
        answer = b""
        for n, byte in enumerate(body):
            sock.sendall(bytes([byte]))
            if n == 2:
                started.set()
            readable, _, _ = select.select([sock], [], [], every_s)
            if readable:
                answer = read_answer(sock, sock.recv(65536))
                break
        out["answer"] = answer
        try:
            out["closed"] = sock.recv(65536) == b""
        except ConnectionResetError:
            out["closed"] = True


@pytest.mark.slow  # python -m service.endpoint as a process (and its servers)
def test_a_client_trickling_its_body_gets_a_408_and_others_are_answered_meanwhile(
        tmp_path, redis_server):  # noqa: F811
    redis_server.client().zadd("history:u1", {"sku1003": 1})
    with endpoint_process(tmp_path, redis_server.url, body_timeout_s=1) as address:
        started, out = threading.Event(), {}
        slow = threading.Thread(target=trickle, args=(address, started, out))
        slow.start()
        assert started.wait(30)
        answered = []
        with httpx.Client(base_url=f"http://{address[0]}:{address[1]}", timeout=30) as client:
            while slow.is_alive() or not answered:
                answered.append(client.post("/v1/recommend",
                                            json={"user_id": "u1", "k": 3}).status_code)
        slow.join()
    assert set(answered) == {200}
    head, _, body = out["answer"].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), out["answer"]
    assert b"connection: close" in head.lower()
    answer = json.loads(body)
    assert answer.pop("request_id")  # issue 42, item 7: test_endpoint_errors.py
    assert answer == {"error": "the body did not arrive whole within 1 s "
                      "(endpoint.body_timeout_s): send it at once", "field": "body"}
    assert out["closed"]


@pytest.mark.slow  # python -m service.endpoint as a process (and its servers)
def test_past_limit_concurrency_uvicorn_answers_503_and_idle_connections_close(
        tmp_path, redis_server):  # noqa: F811
    with endpoint_process(tmp_path, redis_server.url, limit_concurrency=4,
                          keep_alive_timeout_s=1, head_timeout_s=30) as address:
        url = f"http://{address[0]}:{address[1]}/v1/recommend"
        idle = [socket.create_connection(address, timeout=30) for _ in range(4)]
        try:
            with httpx.Client(timeout=30) as client:
                answer = client.post(url, json={"user_id": "u1", "k": 3})
            assert answer.status_code == 503 and answer.text == "Service Unavailable"
        finally:
            for sock in idle:
                sock.close()
        # Once they are gone, answered again.
        def answered():
            with httpx.Client(timeout=30) as client:
                return client.post(url, json={"user_id": "u1", "k": 3}).status_code == 200
        wait_for(answered, timeout_s=30, what="an answer under the limit")
        # A kept-alive connection left idle is closed by the server (keep_alive_timeout_s).
        with socket.create_connection(address, timeout=30) as sock:
            body = json.dumps({"user_id": "u1", "k": 3}).encode()
            sock.sendall(b"POST /v1/recommend HTTP/1.1\r\nHost: endpoint\r\nContent-Type: "
                         b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            assert read_answer(sock).startswith(b"HTTP/1.1 200 ")
            assert sock.recv(65536) == b""


@pytest.mark.slow  # python -m service.endpoint as a process (and its servers)
def test_headers_trickled_or_never_sent_are_a_408_and_the_connection_closed(
        tmp_path, redis_server):  # noqa: F811
    """uvicorn times nothing before the headers: without the deadline both connections stay
    open, and enough of them hold every concurrency slot."""
    with endpoint_process(tmp_path, redis_server.url, head_timeout_s=1) as address:
        with socket.create_connection(address, timeout=30) as silent, \
                socket.create_connection(address, timeout=30) as slow:
            head = b"POST /v1/recommend HTTP/1.1\r\nHost: endpoint\r\n" + b"X-Pad: a\r\n" * 40
            answer = b""
            for byte in head:
                slow.sendall(bytes([byte]))
                if select.select([slow], [], [], 0.1)[0]:
                    answer = read_answer(slow, slow.recv(65536))
                    break
            for sock, got in ((slow, answer), (silent, read_answer(silent))):
                assert got.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), got
                assert got.endswith(b"the request's headers did not arrive within 1 s "
                                    b"(endpoint.head_timeout_s)")
                assert sock.recv(65536) == b""
        # A request sent at once is answered as ever.
        with httpx.Client(timeout=30) as client:
            assert client.post(f"http://{address[0]}:{address[1]}/v1/recommend",
                               json={"user_id": "u1", "k": 3}).status_code == 200


def test_uvicorn_gets_the_limits_from_the_config():
    from service.endpoint.__main__ import uvicorn_config

    service = load_service_config(CONFIG)
    raw = service.model_dump()
    raw["endpoint"].update(limit_concurrency=7, keep_alive_timeout_s=3, head_timeout_s=4)
    config = uvicorn_config(object(), service.model_validate(raw))
    assert (config.limit_concurrency, config.timeout_keep_alive) == (7, 3)
    assert config.http.__name__ == "HeadDeadlineProtocol"


@pytest.mark.parametrize("context, field, error", [
    ({"hour": 99}, "context.hour", "context.hour 99 is outside its domain: 0..23, whole "
     "numbers (absent: unknown)"),
    ({"hour": -1}, "context.hour", "context.hour -1 is outside its domain"),
    ({"hour": 7.5}, "context.hour", "context.hour 7.5 is outside its domain: 0..23, whole"),
    ({"device": "smart-tv"}, "context.device", "context.device 'smart-tv' is outside its "
     'domain: one of mobile, desktop, tablet ("" or absent: unknown)'),
])
def test_a_context_value_outside_its_domain_is_a_400_naming_field_and_domain(
        tmp_path, redis_server, context, field, error):  # noqa: F811
    with make_env(tmp_path, redis_server.url) as env:
        answer = env.recommend(user_id="nobody", k=3, context=context)
        assert answer.status_code == 400 and answer.json()["field"] == field
        assert answer.json()["error"].startswith(error), answer.json()
        for good in ({"hour": 0, "device": "tablet"}, {"hour": 23.0, "device": ""}, {}):
            assert env.recommend(user_id="nobody", k=3, context=good).status_code == 200
        # The domains are in the OpenAPI schema's descriptions.
        schema = env.admin.get("/openapi.json").json()["components"]["schemas"]["Context"]
        assert schema["properties"]["hour"]["description"].startswith("0..23, whole numbers")


def test_every_context_feature_needs_a_domain_of_its_kind():
    domains = load_service_config(CONFIG).endpoint.context_domains
    req.request_model(["hour"], ["device"], domains)
    with pytest.raises(ValueError, match=r"no domain for the context feature 'device': add "
                       r"device: \{values: \[a, b\]\}"):
        req.request_model(["hour"], ["device"], {"hour": domains["hour"]})
    with pytest.raises(ValueError, match=r"names \['hours'\], which are not context features"):
        req.request_model(["hour"], ["device"], {**domains, "hours": domains["hour"]})
    with pytest.raises(ValueError, match=r"context_domains.device: the feature is categorical"):
        req.request_model(["hour"], ["device"], {**domains, "device": domains["hour"]})


def test_the_configs_domains_are_the_bundled_datas_values():
    """The domains the endpoint holds requests to are those the model trains on: every value
    of the bundled clicks, and nothing they never hold."""
    domains = load_service_config(CONFIG).endpoint.context_domains
    seen = {"hour": set(), "device": set()}
    for path in sorted((REPO / "data" / "clicks").glob("span-*/clicks.csv")):
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                seen["hour"].add(float(row["hour"]))
                seen["device"].add(row["device"])
    hour = domains["hour"]
    assert seen["hour"] == {float(h) for h in range(int(hour.min), int(hour.max) + 1)}
    assert hour.whole and all(h.is_integer() for h in seen["hour"])
    assert seen["device"] == set(domains["device"].values)
