"""The recommend endpoint when what it stands on fails: Redis stopped or frozen, TF Serving down,
erring or slow (the fallback; the circuit breaker: test_endpoint_brownout.py), a refused
connection retried once, a new model version (and a bad one), a catalog with a misspelt
sensitive field; and the endpoint as a process of its own."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from devtools import redis_node
from devtools.loopback import free_port
from devtools.tf_serving.rest_stub import RestStub, StubError
from service.endpoint.app import create_app
from service.endpoint.catalog import CatalogError, load_catalog
from service.endpoint.metrics import Metrics
from service.endpoint.tf_serving import TFServing, TFServingError
from tests.helpers import REPO
from tests.redis_server import redis_server  # noqa: F401
from tests.service.endpoint_env import (SENSITIVE, V1_ITEMS, V2_ITEMS, SensitiveGuard,
                                        canned_retrieve, make_env, metric, sensitive_values,
                                        served, service_config, wait_for, write_catalog,
                                        write_version)


def test_redis_stopped_mid_run_is_the_fallback_counted_as_error(tmp_path, redis_server):  # noqa: F811
    with make_env(tmp_path, redis_server.url) as env:
        env.clicks("u1", ["sku1003", "sku1004"])
        assert env.recommend(user_id="u1", k=3).json()["history"] == "redis"
        redis_node.stop(redis_server)
        for _ in range(3):  # a broken pooled connection, then refused ones
            answer = env.recommend(user_id="u1", k=3)
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert body["history"] == "fallback"
            assert [i["item_id"] for i in body["items"]] == V1_ITEMS[:3]
        assert metric(env.admin, "recommend_history_reads_total", result="error") == 3
        assert metric(env.admin, "recommend_fallbacks_total", reason="redis_error") == 3
        assert len(env.stub.received) == 1
        # The session's recent clicks are still a history for the model.
        body = env.recommend(user_id="u1", k=3, recent_item_ids=["sku1010"]).json()
        assert body["history"] == "redis"
        assert env.stub.received[-1]["instances"][0]["user_click_history"][:2] == ["sku1010", ""]
        assert metric(env.admin, "recommend_requests_total", status="200") == 5


def test_redis_frozen_is_the_fallback_within_its_timeout(tmp_path, redis_server):  # noqa: F811
    with make_env(tmp_path, redis_server.url, redis_timeout_ms=100) as env:
        env.clicks("u1", ["sku1003"])
        os.kill(redis_server.process.pid, signal.SIGSTOP)
        try:
            start = time.monotonic()
            body = env.recommend(user_id="u1", k=3).json()
            took = time.monotonic() - start
        finally:
            os.kill(redis_server.process.pid, signal.SIGCONT)
        assert body["history"] == "fallback" and took < 1.5
        assert metric(env.admin, "recommend_fallbacks_total", reason="redis_error") == 1
        wait_for(lambda: env.recommend(user_id="u1", k=3).json()["history"] == "redis",
                 what="Redis answering again")


def fallback_for(answer, reason: str, items=V1_ITEMS[:3]) -> None:
    """A 200 of the popularity fallback, flagged with its reason (issue 42, item 4)."""
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["history"] == "fallback" and body["fallback_reason"] == reason, body
    assert [i["item_id"] for i in body["items"]] == items


def test_tf_serving_stopped_is_the_fallback_and_back_when_it_is(tmp_path, redis_server):  # noqa: F811,E501
    with make_env(tmp_path, redis_server.url) as env:
        env.clicks("u1", ["sku1003"])
        port = int(env.stub.url.rsplit(":", 1)[1])
        env.stub.__exit__(None, None, None)
        fallback_for(env.recommend(user_id="u1", k=3), "tf_serving_refused")
        # exclude_seen drops the history's items from the fallback too.
        fallback_for(env.recommend(user_id="u1", k=3, exclude_seen=True), "tf_serving_refused",
                     [i for i in V1_ITEMS if i != "sku1003"][:3])
        assert metric(env.admin, "recommend_tf_serving_errors_total", kind="refused") == 2
        assert metric(env.admin, "recommend_fallbacks_total", reason="tf_serving_refused") == 2
        # A user without a history still gets the fallback: it needs no TF Serving.
        assert env.recommend(user_id="nobody", k=3).json()["history"] == "fallback"
        assert env.admin.get("/readyz").status_code == 200  # the version's items are kept
        with RestStub("recommender", env.predict, versions=[1], port=port) as again:
            answer = env.recommend(user_id="u1", k=3)
            assert answer.status_code == 200, answer.text
            assert len(again.received) == 1
        assert metric(env.admin, "recommend_requests_total", status="503") == 0
        assert metric(env.admin, "recommend_requests_total", status="200") == 4


def test_tf_serving_errors_and_timeout(tmp_path, redis_server):  # noqa: F811
    with make_env(tmp_path, redis_server.url, tf_timeout_ms=300) as env:
        env.clicks("u1", ["sku1003"])

        def fails(status, message):
            def predict(signature, instances):
                raise StubError(status, message)
            return predict

        env.stub.predict = fails(500, "INTERNAL: boom")
        fallback_for(env.recommend(user_id="u1", k=3), "tf_serving_error")
        env.stub.predict = fails(400, "INVALID_ARGUMENT: no such input")
        answer = env.recommend(user_id="u1", k=3)
        assert answer.status_code == 502
        # The reason code only: TF Serving's URL and its error are in the log (issue 42,
        # item 7: tests/service/test_endpoint_errors.py).
        assert answer.json()["error"] == "tf_serving_refused_request"

        def slow(signature, instances):
            time.sleep(1)
            return env.predict(signature, instances)

        env.stub.predict = slow
        fallback_for(env.recommend(user_id="u1", k=3), "tf_serving_timeout")
        assert metric(env.admin, "recommend_tf_serving_errors_total", kind="status") == 2
        assert metric(env.admin, "recommend_tf_serving_errors_total", kind="timeout") == 1


class RefusedFirst(TFServing):
    """The first `refusals` POSTs go to a port nobody listens on (a real refusal by the
    kernel), then to TF Serving."""

    def __init__(self, refusals: int, *args):
        super().__init__(*args)
        self.refusals, self.calls = refusals, 0

    async def post(self, url, content, timeout_s):
        self.calls += 1
        if self.calls <= self.refusals:
            url = f"http://127.0.0.1:{free_port()}/v1/models/recommender:predict"
        return await super().post(url, content, timeout_s)


def test_a_refused_connection_is_retried_exactly_once():
    predict = canned_retrieve(V1_ITEMS)
    instance = {"user_click_history": ["sku1001"] + [""] * 9, "hour": 3.0, "device": ""}

    async def call(refusals: int):
        client = RefusedFirst(refusals, stub.url, "recommender", 2000, Metrics())
        try:
            return await client.retrieve(instance), client.calls
        except TFServingError as e:
            return e, client.calls
        finally:
            await client.close()

    with RestStub("recommender", predict) as stub:
        pairs, calls = asyncio.run(call(1))
        assert calls == 2 and len(stub.received) == 1
        assert [i for i, _ in pairs] == predict.answer(["sku1001"])
        error, calls = asyncio.run(call(2))
        assert calls == 2 and len(stub.received) == 1  # no third try
        assert isinstance(error, TFServingError) and error.status == 503
        assert error.kind == "refused" and error.fallback == "tf_serving_refused"


def test_a_new_version_is_picked_up_and_a_bad_one_keeps_the_previous(tmp_path, redis_server):  # noqa: F811,E501
    with make_env(tmp_path, redis_server.url) as env:
        assert env.recommend(user_id="nobody", k=3).json()["model_version"] == "1"
        assert env.recommend(user_id="nobody", k=3,
                             exclude_item_ids=["sku1030"]).status_code == 200
        env.stub.versions.add(2)
        wait_for(lambda: env.admin.get("/readyz").json()["model_version"] == "2",
                 what="version 2")
        body = env.recommend(user_id="nobody", k=3).json()
        assert body["model_version"] == "2"
        assert [i["item_id"] for i in body["items"]] == V2_ITEMS[:3]
        # Version 2's vocabulary: sku1030 is no item of it any more.
        answer = env.recommend(user_id="nobody", k=3, exclude_item_ids=["sku1030"])
        assert answer.status_code == 400 and answer.json()["field"] == "exclude_item_ids.0"
        # Version 3's file is broken: version 2's items stay.
        broken = write_version(tmp_path / "models", 3, V1_ITEMS) / "assets.extra"
        (broken / "retrieval_items.json").write_text('{"schema": 1, "items": [')
        env.stub.versions.add(3)
        problem = wait_for(lambda: env.app.state.endpoint.versions.problem, what="a problem")
        assert "version 3's items not loaded" in problem and "keeping version 2's" in problem
        assert env.recommend(user_id="nobody", k=3).json()["model_version"] == "2"
        assert env.admin.get("/readyz").json()["model_version"] == "2"


def test_no_version_at_all_is_a_503_explained_on_the_admin_port(tmp_path, redis_server):  # noqa: F811,E501
    with RestStub("recommender", canned_retrieve(V1_ITEMS), versions=[7]) as stub:
        app = create_app(service_config(tmp_path, redis_server.url, stub.url))
        guard = SensitiveGuard(SENSITIVE, sensitive_values(tmp_path / "items.csv"))
        with served(app) as url, served(app.state.admin, lifespan="off") as admin_url, \
                httpx.Client(base_url=url, event_hooks={"response": [guard]}) as client:
            ready = httpx.get(f"{admin_url}/readyz")
            assert ready.status_code == 503 and "version 7's items not loaded" in \
                ready.json()["error"]
            answer = client.post("/v1/recommend", json={"user_id": "u1", "k": 3})
            assert answer.status_code == 503
            # The client gets the reason code; the path is for the operator (readyz, log).
            assert answer.json()["error"] == "no_model_version"
            assert "retrieval_items.json" not in answer.text
            assert stub.received == []


def test_the_catalog_drops_sensitive_fields_at_load(tmp_path):
    path = write_catalog(tmp_path / "items.csv")
    catalog = load_catalog(path, public_fields=["title", "category"],
                           sensitive_fields=["price", "unit_cost"])
    assert catalog.columns == ("title", "category")
    assert catalog.rows["sku1000"] == {"title": "thing 0", "category": "cat0"}
    held = json.dumps(catalog.rows)
    assert "9000.99" not in held and "8000.11" not in held
    assert catalog.item("sku9999", 0.5) == {"item_id": "sku9999", "score": 0.5}
    with pytest.raises(CatalogError, match=r"\['unit_costs'\] are not columns"):
        load_catalog(path, public_fields=["title"], sensitive_fields=["price", "unit_costs"])


def _config(tmp_path, sensitive) -> str:
    path = tmp_path / "service.yaml"
    path.write_text(json.dumps({
        "pipeline_config": str(REPO / "configs" / "recommender.yaml"),
        "catalog": {"path": str(REPO / "data" / "catalog" / "items.csv"),
                    "public_fields": ["title", "category"], "sensitive_fields": sensitive},
        "tf_serving": {"refresh_s": 0.2, "protocol": "rest"}, "auth": {"mode": "none"},
        "endpoint": {"context_domains": {"hour": {"min": 0, "max": 23, "whole": True},
                                         "device": {"values": ["mobile", "desktop"]}}}}))
    return str(path)


@pytest.mark.slow
def test_the_endpoint_as_a_process(tmp_path, redis_server):  # noqa: F811
    """python -m service.endpoint, fresh: the ready line, an answer joined with the bundled
    catalog (no price, no unit_cost), and a misspelt sensitive field failing the start."""
    write_version(tmp_path / "models", 1, V1_ITEMS)
    predict = canned_retrieve(V1_ITEMS)
    redis_server.client().zadd("history:u1", {"sku1003": 1, "sku1007": 2})
    command = [sys.executable, "-m", "service.endpoint", "--port", "0", "--admin-port", "0",
               "--redis-url", redis_server.url, "--model-base-path", str(tmp_path / "models")]
    bad = subprocess.run([*command, "--config", _config(tmp_path, ["price", "unit_costs"]),
                          "--tf-serving-url", "http://127.0.0.1:9"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "['unit_costs'] are not columns" in bad.stderr
    guard = SensitiveGuard(SENSITIVE, sensitive_values(REPO / "data" / "catalog" / "items.csv"))
    with RestStub("recommender", predict) as stub:
        process = subprocess.Popen(
            [*command, "--config", _config(tmp_path, ["price", "unit_cost"]),
             "--tf-serving-url", stub.url], cwd=REPO, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        try:
            line = process.stdout.readline()
            assert line.startswith("recommend endpoint on http://127.0.0.1:"), \
                line + process.stderr.read() if process.poll() is not None else line
            assert line.rstrip().endswith(": model recommender version 1, 40 items")
            url = line.split(" on ", 1)[1].split(": model", 1)[0]
            with httpx.Client(base_url=url, event_hooks={"response": [guard]}) as client:
                body = client.post("/v1/recommend", json={"user_id": "u1", "k": 3}).json()
        finally:
            process.terminate()
            process.wait(10)
    assert body["history"] == "redis" and body["model_version"] == "1"
    assert [i["item_id"] for i in body["items"]] == predict.answer(["sku1003", "sku1007"])[:3]
    assert set(body["items"][0]) == {"item_id", "score", "title", "category"}
    assert stub.received[0]["instances"][0]["user_click_history"][:3] == \
        ["sku1003", "sku1007", ""]
    assert process.returncode in (0, -signal.SIGTERM)
