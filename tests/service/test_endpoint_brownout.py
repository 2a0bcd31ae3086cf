"""A TF Serving brownout degrades the answer instead of failing it (issue 42, item 4): frozen
(SIGSTOP), killed or answering 500, a user with a history gets the popularity fallback, flagged
with its reason and counted; after breaker_failures failures the circuit opens and no call is
made (reason circuit_open) until one probe call after the cooldown closes it again. The stand-in
runs as a process of its own (tests/service/tf_stand_in.py) or, to answer 500, in-process."""
from __future__ import annotations

import contextlib
import logging

import httpx
import pytest
import redis

from service.history_store import HistoryStore
from service.config import ServiceConfig
from devtools.tf_serving.rest_stub import RestStub, StubError
from service.endpoint.app import create_app
from service.endpoint.breaker import CLOSED, HALF_OPEN, OPEN, STATE_VALUES, CircuitBreaker
from tests.redis_server import redis_server  # noqa: F401
from tests.service.endpoint_env import (SENSITIVE, V1_ITEMS, Env, SensitiveGuard,
                                        canned_retrieve, metric, sensitive_values, served,
                                        service_config, wait_for, write_version)
from tests.service.tf_stand_in import StandIn


@contextlib.contextmanager
def endpoint(tmp_path, redis_url: str, stand_in, **tf_serving):
    """The endpoint in-process against `stand_in` (its url), with these tf_serving settings;
    a TF Serving budget of 1 s so that healthy calls never time out on a loaded machine."""
    write_version(tmp_path / "models", 1, V1_ITEMS)
    raw = service_config(tmp_path, redis_url, stand_in.url, tf_timeout_ms=1000).model_dump()
    raw["tf_serving"].update(tf_serving)
    service = ServiceConfig.model_validate(raw)
    app = create_app(service)
    guard = SensitiveGuard(SENSITIVE, sensitive_values(service.catalog.path))
    client = redis.Redis.from_url(redis_url, decode_responses=True, socket_timeout=5)
    store = HistoryStore.from_service_config(client, service)
    with served(app) as url, served(app.state.admin, lifespan="off") as admin_url, \
            httpx.Client(base_url=url, timeout=30, event_hooks={"response": [guard]}) as http, \
            httpx.Client(base_url=admin_url, timeout=30) as admin:
        yield Env(stand_in, client, store, http, guard, admin, app, None)


def answer(env: Env) -> dict:
    response = env.recommend(user_id="u1", k=3)
    assert response.status_code == 200, response.text
    return response.json()


def assert_fallback(body: dict, reason: str) -> None:
    assert body["history"] == "fallback" and body["fallback_reason"] == reason, body
    assert [i["item_id"] for i in body["items"]] == V1_ITEMS[:3]
    assert all(i["score"] is None for i in body["items"])


def circuit(env: Env) -> float:
    return metric(env.admin, "recommend_tf_serving_circuit_state")


def tf_calls(env: Env) -> float:
    """The calls the endpoint made to TF Serving (each observed once in the histogram)."""
    return metric(env.admin, "recommend_tf_serving_duration_seconds_count")


def opened_lines(caplog) -> int:
    return sum("TF Serving circuit closed -> open" in r.getMessage() for r in caplog.records)


def brownout_then_back(env: Env, break_it, mend_it, reason: str, caplog) -> None:
    """The model answers; break_it(): two failed calls answered with the fallback (`reason`),
    the circuit opens and later requests make at most the probe call; mend_it(): the probe
    closes the circuit and the model answers again. One log line for the opening."""
    caplog.set_level(logging.INFO, logger="service.endpoint")
    env.clicks("u1", ["sku1003", "sku1004"])
    body = answer(env)
    assert body["history"] == "redis" and body["fallback_reason"] is None
    assert circuit(env) == STATE_VALUES[CLOSED]
    break_it()
    for _ in range(2):
        assert_fallback(answer(env), reason)
    assert circuit(env) == STATE_VALUES[OPEN]
    calls = tf_calls(env)
    reasons = [answer(env)["fallback_reason"] for _ in range(6)]
    # Open: no call, but one probe if the cooldown passed meanwhile (a slow machine).
    assert tf_calls(env) - calls <= 1 and reasons.count("circuit_open") >= 5, reasons
    assert metric(env.admin, "recommend_fallbacks_total", reason="circuit_open") == \
        reasons.count("circuit_open")
    assert metric(env.admin, "recommend_fallbacks_total", reason=reason) == \
        2 + reasons.count(reason)
    mend_it()
    wait_for(lambda: answer(env)["history"] == "redis", timeout_s=30, what="the model again")
    assert circuit(env) == STATE_VALUES[CLOSED]
    assert opened_lines(caplog) == 1


@pytest.mark.slow  # a TF Serving stand-in process, frozen, killed and restarted
def test_tf_serving_frozen_is_the_fallback_and_the_circuit_closes_when_it_thaws(
        tmp_path, redis_server, caplog):  # noqa: F811
    with StandIn() as stand_in, endpoint(tmp_path, redis_server.url, stand_in,
                                         breaker_failures=2, breaker_cooldown_s=2) as env:
        brownout_then_back(env, stand_in.freeze, stand_in.thaw, "tf_serving_timeout", caplog)
        assert metric(env.admin, "recommend_tf_serving_errors_total", kind="timeout") >= 2


@pytest.mark.slow  # a TF Serving stand-in process, frozen, killed and restarted
def test_tf_serving_killed_is_the_fallback_and_the_circuit_closes_when_it_is_back(
        tmp_path, redis_server, caplog):  # noqa: F811
    with StandIn() as stand_in, endpoint(tmp_path, redis_server.url, stand_in,
                                         breaker_failures=2, breaker_cooldown_s=2) as env:
        brownout_then_back(env, stand_in.kill, stand_in.start, "tf_serving_refused", caplog)
        assert metric(env.admin, "recommend_tf_serving_errors_total", kind="refused") >= 2
        assert env.admin.get("/readyz").status_code == 200


@pytest.mark.slow  # waits out the breaker's cooldown (2 s) with the endpoint's servers
def test_tf_serving_answering_500_opens_the_circuit_and_no_calls_reach_it(
        tmp_path, redis_server, caplog):  # noqa: F811
    predict = canned_retrieve(V1_ITEMS)

    def fails(signature, instances):
        raise StubError(500, "INTERNAL: boom")

    with RestStub("recommender", predict) as stub, endpoint(
            tmp_path, redis_server.url, stub, breaker_failures=2, breaker_cooldown_s=2) as env:
        received = []

        def break_it():
            stub.predict = fails
            received.append(len(stub.received))

        def mend_it():
            # While open, at most the probe reached the stand-in (two failed calls before).
            assert len(stub.received) - received[0] <= 3
            stub.predict = predict

        brownout_then_back(env, break_it, mend_it, "tf_serving_error", caplog)


def test_a_4xx_stays_a_502_and_does_not_open_the_circuit(tmp_path, redis_server):  # noqa: F811
    """TF Serving refusing the request is the endpoint's bug: no fallback hides it, and it
    says nothing about TF Serving's health."""
    predict = canned_retrieve(V1_ITEMS)

    def refuses(signature, instances):
        raise StubError(400, "INVALID_ARGUMENT: no such input")

    with RestStub("recommender", refuses) as stub, endpoint(
            tmp_path, redis_server.url, stub, breaker_failures=2) as env:
        env.clicks("u1", ["sku1003"])
        for _ in range(3):
            assert env.recommend(user_id="u1", k=3).status_code == 502
        assert circuit(env) == STATE_VALUES[CLOSED]
        assert len(stub.received) == 3
        stub.predict = predict
        assert answer(env)["history"] == "redis"


def test_a_broken_answer_is_the_fallback(tmp_path, redis_server):  # noqa: F811
    with RestStub("recommender", lambda s, i: [{"item_ids": ["sku1001"]}]) as stub, endpoint(
            tmp_path, redis_server.url, stub) as env:
        env.clicks("u1", ["sku1003"])
        assert_fallback(answer(env), "tf_serving_error")
        assert metric(env.admin, "recommend_tf_serving_errors_total", kind="answer") == 1


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def breaker():
    changes = []
    clock = Clock()
    b = CircuitBreaker(3, 10.0, lambda old, new, why: changes.append((old, new)), clock)
    b.clock_, b.changes = clock, changes
    return b


def test_the_breaker_opens_after_n_consecutive_failures_only(breaker):
    breaker.failure("x")
    breaker.failure("x")
    breaker.success()  # not consecutive any more
    breaker.failure("x")
    breaker.failure("x")
    assert breaker.state == CLOSED and breaker.allow()
    breaker.failure("x")
    assert breaker.state == OPEN and not breaker.allow()
    assert breaker.changes == [(CLOSED, OPEN)]


def test_the_breaker_lets_one_probe_by_and_closes_or_opens_on_it(breaker):
    for _ in range(3):
        breaker.failure("x")
    breaker.clock_.now = 9.9
    assert not breaker.allow()
    breaker.clock_.now = 10.0
    assert breaker.allow() and breaker.state == HALF_OPEN
    assert not breaker.allow() and not breaker.allow()  # one probe at a time
    breaker.failure("x")  # the probe failed: open for another cooldown
    assert breaker.state == OPEN and not breaker.allow()
    breaker.clock_.now = 20.0
    assert breaker.allow()
    breaker.abandoned()  # the probe was cancelled: the next request probes at once
    assert breaker.state == OPEN and breaker.allow() and breaker.state == HALF_OPEN
    breaker.success()
    assert breaker.state == CLOSED and breaker.allow() and breaker.allow()
    assert breaker.changes == [(CLOSED, OPEN), (OPEN, HALF_OPEN), (HALF_OPEN, OPEN),
                               (OPEN, HALF_OPEN), (HALF_OPEN, OPEN), (OPEN, HALF_OPEN),
                               (HALF_OPEN, CLOSED)]


def test_a_budget_not_under_the_p99_objective_is_refused_at_load(tmp_path):
    from core.config import ConfigError
    from service.config import load_service_config
    from tests.helpers import REPO

    repo = load_service_config(REPO / "configs" / "recommender_service.yaml")
    # The objective is the one the canary analysis holds TF Serving to.
    assert repo.endpoint.p99_objective_ms == repo.pipeline.serving.canary.p99_slo_ms == 100
    assert repo.redis.timeout_ms + repo.tf_serving.timeout_ms < 100
    text = (REPO / "configs" / "recommender_service.yaml").read_text()
    path = tmp_path / "recommender_service.yaml"
    path.write_text(text.replace("pipeline_config: recommender.yaml",
                                 f"pipeline_config: {REPO / 'configs' / 'recommender.yaml'}")
                    .replace("../data/catalog/items.csv",
                             str(REPO / "data" / "catalog" / "items.csv"))
                    .replace("  timeout_ms: 60", "  timeout_ms: 80"))
    with pytest.raises(ConfigError) as refused:
        load_service_config(path)
    assert str(refused.value) == (
        f"invalid service config {path}:\n  tf_serving.timeout_ms: 80 ms plus redis.timeout_ms "
        "20 ms is 100 ms, not under endpoint.p99_objective_ms (100 ms): lower them, leaving "
        "the endpoint a few ms of its own")
    path.write_text(path.read_text().replace("  timeout_ms: 80", "  timeout_ms: 79"))
    assert load_service_config(path).tf_serving.timeout_ms == 79
