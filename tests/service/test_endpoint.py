"""The recommend endpoint against a real Redis and the TF Serving stand-in (a canned retrieve):
answers, exclusions, the fallback, and every refused input (nothing forwarded)."""
from __future__ import annotations

import json
import math
from typing import Iterator

import httpx
import pytest

from devtools import redis_node
from tests.redis_server import redis_server  # noqa: F401
from tests.service.endpoint_env import (K, SENSITIVE, V1_ITEMS, Env, SensitiveGuard, make_env,
                                        metric)


@pytest.fixture
def env(tmp_path, redis_server) -> Iterator[Env]:  # noqa: F811
    with make_env(tmp_path, redis_server.url) as env:
        yield env


@pytest.fixture(scope="module")
def shared_env(tmp_path_factory) -> Iterator[Env]:
    """One endpoint for the refusal tests (each starts from an empty stub.received and Redis
    command statistics)."""
    tmp_path = tmp_path_factory.mktemp("shared")
    server = redis_node.start(tmp_path / "redis")
    try:
        with make_env(tmp_path, server.url) as env:
            env.clicks("u1", ["sku1003"])
            yield env
    finally:
        redis_node.stop(server)


@pytest.fixture
def refusals(shared_env) -> Env:
    shared_env.stub.received.clear()
    shared_env.redis.config_resetstat()
    return shared_env


def test_history_answer_is_retrieve_for_that_history(env):
    history = ["sku1003", "sku1007", "sku1001"]
    env.clicks("u1", history)
    answer = env.recommend(user_id="u1", k=4, context={"hour": 7, "device": "mobile"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    expected = env.predict.answer(history)[:4]
    assert [i["item_id"] for i in body["items"]] == expected
    assert [i["score"] for i in body["items"]] == [0.95, 0.9, 0.85, 0.8]
    assert body["model_version"] == "1" and body["history"] == "redis"
    assert "history_length" not in body  # a membership oracle (issue 42, item 5)
    # The catalog's public columns joined, the sensitive ones never.
    assert body["items"][0] == {"item_id": "sku1001", "score": 0.95, "title": "thing 1",
                                "category": "cat1"}
    (request,) = env.stub.received
    assert request == {"signature_name": "retrieve", "instances": [
        {"user_click_history": history + [""] * 7, "hour": 7.0, "device": "mobile"}]}


def test_absent_context_is_nan_and_empty(env):
    env.clicks("u1", ["sku1003"])
    assert env.recommend(user_id="u1", k=K).status_code == 200
    instance = env.stub.received[-1]["instances"][0]
    assert math.isnan(instance["hour"]) and instance["device"] == ""
    assert env.recommend(user_id="u1", k=K, context={"device": "desktop"}).status_code == 200
    instance = env.stub.received[-1]["instances"][0]
    assert math.isnan(instance["hour"]) and instance["device"] == "desktop"


def test_item_missing_from_catalog_keeps_id_and_score(env):
    env.clicks("u1", ["sku1035"])  # the catalog holds sku1000..sku1029
    body = env.recommend(user_id="u1", k=1).json()
    assert body["items"] == [{"item_id": "sku1035", "score": 0.95}]


def test_no_history_is_the_fallback_flagged_and_counted(env):
    body = env.recommend(user_id="nobody", k=3).json()
    assert body == {"items": [
        {"item_id": i, "score": None, "title": f"thing {n}", "category": f"cat{n % 3}"}
        for n, i in enumerate(V1_ITEMS[:3])], "model_version": "1", "history": "fallback",
        "fallback_reason": "no_history"}
    assert env.stub.received == []  # the fallback does not need TF Serving
    assert metric(env.admin, "recommend_fallbacks_total", reason="no_history") == 1
    assert metric(env.admin, "recommend_history_reads_total", result="miss") == 1
    # Excluded items are skipped and replaced by the next most frequent.
    body = env.recommend(user_id="nobody", k=3, exclude_item_ids=["sku1001"]).json()
    assert [i["item_id"] for i in body["items"]] == ["sku1000", "sku1002", "sku1003"]


def test_exclude_seen_and_exclude_item_ids(env):
    history = ["sku1003", "sku1007", "sku1001"]
    env.clicks("u1", history)
    full = env.predict.answer(history)
    body = env.recommend(user_id="u1", k=K, exclude_seen=True).json()
    # The model answers exactly its k; dropping the history's 3 leaves 7.
    assert [i["item_id"] for i in body["items"]] == [i for i in full if i not in history]
    assert len(body["items"]) == K - 3
    body = env.recommend(user_id="u1", k=2, exclude_item_ids=["sku1001", full[3]]).json()
    assert [i["item_id"] for i in body["items"]] == ["sku1007", "sku1003"]
    body = env.recommend(user_id="u1", k=5, exclude_seen=True,
                         exclude_item_ids=[full[3]]).json()
    assert [i["item_id"] for i in body["items"]] == [full[4], full[5], full[6], full[7],
                                                     full[8]]


def test_recent_item_ids_merge_by_the_history_rule(env):
    stored = [f"sku{1000 + i}" for i in range(9)]
    env.clicks("u1", stored)
    recent = ["sku1002", "sku1020", "sku1021"]
    body = env.recommend(user_id="u1", k=K, recent_item_ids=recent).json()
    # sku1002 once, at its newest position; the newest 10 kept (sku1000 drops out).
    merged = ["sku1001", "sku1003", "sku1004", "sku1005", "sku1006", "sku1007", "sku1008",
              "sku1002", "sku1020", "sku1021"]
    assert env.stub.received[-1]["instances"][0]["user_click_history"] == merged
    assert body["history"] == "redis"
    assert [i["item_id"] for i in body["items"]] == env.predict.answer(merged)
    # A user without a stored history: the recent clicks alone are the history.
    body = env.recommend(user_id="new", k=3, recent_item_ids=["sku1010"]).json()
    assert env.stub.received[-1]["instances"][0]["user_click_history"] == \
        ["sku1010"] + [""] * 9
    assert body["history"] == "redis"


HOSTILE = ["../etc", "*", "a\r\nb", "*3\r\n$3\r\nDEL\r\n", "x" * 10240, "usér", "", "a b"]
BAD = [
    *[({"user_id": v, "k": 3}, "user_id") for v in HOSTILE],
    *[({"user_id": "u1", "k": 3, "exclude_item_ids": ["sku1000", v]}, "exclude_item_ids.1")
      for v in HOSTILE],
    *[({"user_id": "u1", "k": 3, "recent_item_ids": [v]}, "recent_item_ids.0")
      for v in HOSTILE],
    ({"user_id": "u1", "k": 3, "exclude_item_ids": ["sku9999"]}, "exclude_item_ids.0"),
    ({"user_id": "u1", "k": 3, "recent_item_ids": ["sku1000", "sku9999"]},
     "recent_item_ids.1"),
    ({"user_id": "u1", "k": 3, "exclude_item_ids": ["sku1000"] * 101}, "exclude_item_ids"),
    ({"user_id": "u1", "k": 3, "exclude_item_ids": "sku1000"}, "exclude_item_ids"),
    *[({"user_id": "u1", "k": k}, "k") for k in (0, 11, -1, "3", True, 3.0, None, [3])],
    ({"user_id": "u1"}, "k"),
    ({"k": 3}, "user_id"),
    ({"user_id": 7, "k": 3}, "user_id"),
    ({"user_id": "u1", "k": 3, "exclude_seen": "yes"}, "exclude_seen"),
    ({"user_id": "u1", "k": 3, "extra": 1}, "extra"),
    ({"user_id": "u1", "k": 3, "../x": 1}, "'../x'"),
    ({"user_id": "u1", "k": 3, "context": {"hour": "7"}}, "context.hour"),
    ({"user_id": "u1", "k": 3, "context": {"hour": 1e400}}, "context.hour"),
    ({"user_id": "u1", "k": 3, "context": {"device": "a\r\nb"}}, "context.device"),
    ({"user_id": "u1", "k": 3, "context": {"colour": "red"}}, "context.colour"),
    ({"user_id": "u1", "k": 3, "context": "mobile"}, "context"),
]


def _raw(body) -> bytes:
    return json.dumps(body).replace("Infinity", "1e400").encode()


@pytest.mark.parametrize("body,field", [pytest.param(b, f, id=f"{f}-{i}")
                                        for i, (b, f) in enumerate(BAD)])
def test_bad_input_is_a_400_naming_the_field_and_nothing_is_forwarded(refusals, body, field):
    env = refusals
    refused = metric(env.admin, "recommend_requests_total", status="400")
    answer = env.client.post("/v1/recommend", content=_raw(body),
                             headers={"Content-Type": "application/json"})
    assert answer.status_code == 400, answer.text
    error = answer.json()
    assert error["field"] == field, error
    assert set(error) == {"error", "field", "request_id"}
    assert len(error["error"]) < 400  # a 10 KB value is quoted cut short
    assert "\r" not in answer.text and "DEL\r" not in error["error"]
    assert env.stub.received == []
    assert "cmdstat_zrange" not in env.redis.info("commandstats")
    assert metric(env.admin, "recommend_requests_total", status="400") == refused + 1


@pytest.mark.parametrize("raw,why", [
    (b'{"user_id": "\xff\xfe", "k": 3}', "not UTF-8"),
    (b'{"user_id": "u1", "k": 3', "not JSON"),
    (b'{"user_id": "u1", "k": 3, "context": {"hour": NaN}}', "not JSON"),
    (b'[1, 2]', "a JSON object"),
    (b'', "not JSON"),
    (b'[' * 3000 + b']' * 3000, "nested too deep"),
])
def test_bad_body_is_a_400(refusals, raw, why):
    env = refusals
    answer = env.client.post("/v1/recommend", content=raw)
    assert answer.status_code == 400, answer.text
    assert answer.json()["field"] == "body" and why in answer.json()["error"]
    assert env.stub.received == []


def test_body_over_the_limit_is_a_413_with_and_without_content_length(refusals):
    env = refusals
    refused = metric(env.admin, "recommend_requests_total", status="413")
    big = json.dumps({"user_id": "u1", "k": 3, "exclude_item_ids": ["sku1000"] * 3000})
    assert len(big) > 16384
    answer = env.client.post("/v1/recommend", content=big.encode())
    assert answer.status_code == 413 and answer.json()["field"] == "body"
    assert "16384" in answer.json()["error"]

    def chunks():
        for start in range(0, len(big), 1000):
            yield big[start:start + 1000].encode()

    answer = env.client.post("/v1/recommend", content=chunks())  # chunked: no Content-Length
    assert answer.request.headers.get("transfer-encoding") == "chunked"
    assert "content-length" not in answer.request.headers
    assert answer.status_code == 413 and answer.json()["field"] == "body"
    assert env.stub.received == []
    assert metric(env.admin, "recommend_requests_total", status="413") == refused + 2


def test_openapi_documents_request_answer_and_errors(shared_env):
    env = shared_env
    schema = env.admin.get("/openapi.json").json()
    components = schema["components"]["schemas"]
    assert {"RecommendRequest", "RecommendAnswer", "ErrorAnswer", "Context"} <= set(components)
    assert set(components["Context"]["properties"]) == {"hour", "device"}
    operation = schema["paths"]["/v1/recommend"]["post"]
    assert "422" not in operation["responses"]
    assert operation["responses"]["400"]["content"]["application/json"]["schema"] == \
        {"$ref": "#/components/schemas/ErrorAnswer"}
    assert env.admin.get("/docs").status_code == 200


def test_health_ready_and_metrics(env):
    assert env.admin.get("/healthz").json() == {"status": "alive"}
    ready = env.admin.get("/readyz").json()
    assert ready == {"ready": True, "model_version": "1", "items": 40, "catalog_items": 30}
    env.clicks("u1", ["sku1003"])
    env.recommend(user_id="u1", k=3)
    text = env.admin.get("/metrics").text
    for name in ("recommend_requests_total", "recommend_request_duration_seconds_bucket",
                 "recommend_history_reads_total", "recommend_tf_serving_duration_seconds_bucket"):
        assert name in text
    assert metric(env.admin, "recommend_history_reads_total", result="hit") == 1
    assert metric(env.admin, "recommend_requests_total", status="200") == 1
    assert metric(env.admin, "recommend_tf_serving_duration_seconds_count") == 1


def test_the_sensitive_guard_fires():
    """Negative control: the hook every test's client runs catches a leaked field or value."""
    guard = SensitiveGuard(SENSITIVE, {"9000.99"})
    leaks = [{"items": [{"item_id": "sku1000", "price": "12.00"}]},
             {"items": [{"item_id": "sku1000", "cost": "9000.99"}]},
             {"error": "unknown column unit_cost"}]
    for leak in leaks:
        with pytest.raises(AssertionError, match="sensitive"):
            guard(httpx.Response(200, json=leak))
    guard(httpx.Response(200, json={"items": [{"item_id": "sku1000", "title": "x"}]}))
