"""The endpoint's request log (service/request_log.py, issue 45 item 1) against a real Kafka node:
the records on the topic are core/serving_log.py's schema (the history unpadded, the context as
sent, the serving version), the user only as the keyed hash and absent without a key; the sample
rate holds at its ends; a broker away never fails or slows an answer, and what it drops is
counted; hostile values never stop it. Each Kafka test has a topic of its own."""
from __future__ import annotations

import hashlib
import hmac
import logging
import time
import uuid
from typing import Iterator, List

import pytest
from confluent_kafka import Consumer, TopicPartition

from core.config import ConfigError
from core.serving_log import KEYS, read_record, signature_inputs
from devtools.kafka_node import create_topic
from devtools.loopback import free_port
from service.config import ServiceConfig
from service.endpoint.metrics import Metrics
from service.request_log import OUTCOMES, RequestLog
from tests.kafka_server import kafka_server  # noqa: F401  (fixture)
from tests.redis_server import redis_server  # noqa: F401  (fixture)
from tests.service.endpoint_env import make_env, metric, service_config, wait_for
from tests.service.test_endpoint import BAD, _raw

KEY_ENV = "REQUEST_LOG_USER_HASH_KEY"
KEY = "a-test-key-of-32-bytes-or-so-...."
HISTORY = ["sku1003", "sku1007", "sku1001"]
USER = "shopper-7f3e91"  # distinctive: found nowhere else in a record


def topic(kafka) -> str:
    name = f"requests-{uuid.uuid4().hex[:8]}"
    create_topic(kafka, name)
    return name


def records(kafka, name: str, count: int, timeout_s: float = 20) -> List[bytes]:
    """The topic's messages (partition 0) once `count` arrived, or all there are by timeout_s;
    then a further second, so that a record too many shows."""
    reader = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "tests-reader",
                       "enable.auto.commit": False})
    reader.assign([TopicPartition(name, 0, 0)])
    out, deadline = [], time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            message = reader.poll(0.2)
            if message is not None and not message.error():
                out.append(message.value())
            if len(out) >= count:
                deadline = min(deadline, time.monotonic() + 1.0)
        return out
    finally:
        reader.close()


def outcomes(env) -> dict:
    return {o: metric(env.admin, "recommend_request_log_records_total", outcome=o)
            for o in OUTCOMES}


@pytest.fixture
def logged(tmp_path, redis_server, kafka_server, monkeypatch) -> Iterator:  # noqa: F811
    """An endpoint logging every request to a topic of its own, with a user hash key."""
    monkeypatch.setenv(KEY_ENV, KEY)
    name = topic(kafka_server)
    with make_env(tmp_path, redis_server.url, kafka={"bootstrap_servers": kafka_server.bootstrap},
                  request_log={"topic": name, "sample_rate": 1.0}) as env:
        env.topic = name
        yield env


@pytest.mark.e2e
def test_records_are_the_schema_with_the_user_hashed(logged, kafka_server):  # noqa: F811
    env = logged
    env.clicks(USER, HISTORY)
    assert env.recommend(user_id=USER, k=3, context={"hour": 7, "device": "mobile"}) \
        .status_code == 200
    assert env.recommend(user_id=USER, k=3).status_code == 200          # no context at all
    assert env.recommend(user_id=USER, k=3, context={"device": "tablet"}).status_code == 200
    raw = records(kafka_server, env.topic, 3)
    assert len(raw) == 3, raw
    hashed = hmac.new(KEY.encode(), USER.encode(), hashlib.sha256).hexdigest()
    inputs = signature_inputs(env.app.state.endpoint.service.pipeline, "retrieve")
    got = [read_record(r) for r in raw]
    for record, message in zip(got, raw, strict=True):
        assert set(record) == KEYS, record
        assert (record["schema"], record["model_version"], record["source"],
                record["signature"], record["user"]) == (1, "1", "endpoint", "retrieve", hashed)
        assert sorted(record["features"]) == sorted(inputs)   # the signature's inputs only
        assert USER.encode() not in message                            # never the user id in clear
        assert b"thing" not in message and b"cat1" not in message  # nor the catalog's fields
        assert abs(time.time() - record["time"].timestamp()) < 60
    assert [r["features"] for r in got] == [
        {"user_click_history": HISTORY, "hour": 7.0, "device": "mobile"},  # unpadded
        {"user_click_history": HISTORY, "hour": None, "device": ""},        # absent
        {"user_click_history": HISTORY, "hour": None, "device": "tablet"}]
    assert wait_for(lambda: outcomes(env)["sent"] == 3, what="3 records counted sent")


@pytest.mark.e2e
def test_without_a_key_no_user_is_logged(tmp_path, redis_server, kafka_server,  # noqa: F811
                                         monkeypatch, caplog):
    monkeypatch.delenv(KEY_ENV, raising=False)
    name = topic(kafka_server)
    with caplog.at_level(logging.WARNING, "service.request_log"), \
            make_env(tmp_path, redis_server.url,
                     kafka={"bootstrap_servers": kafka_server.bootstrap},
                     request_log={"topic": name, "sample_rate": 1.0}) as env:
        env.clicks(USER, HISTORY)
        assert env.recommend(user_id=USER, k=3).status_code == 200
        (raw,) = records(kafka_server, name, 1)
    record = read_record(raw)
    assert "user" not in record and USER.encode() not in raw
    assert record["features"]["user_click_history"] == HISTORY
    warned = [r.getMessage() for r in caplog.records if "users are not logged" in r.getMessage()]
    assert warned == [f"request log: request_log.user_hash_key_env {KEY_ENV} is unset or "
                      "empty: users are not logged"]


@pytest.mark.e2e
@pytest.mark.parametrize("rate, expected", [(0.0, 0), (1.0, 12)])
def test_sample_rate_zero_logs_nothing_and_one_every_call(
        tmp_path, redis_server, kafka_server, rate, expected):  # noqa: F811
    name = topic(kafka_server)
    with make_env(tmp_path, redis_server.url, kafka={"bootstrap_servers": kafka_server.bootstrap},
                  request_log={"topic": name, "sample_rate": rate}) as env:
        env.clicks(USER, HISTORY)
        for hour in range(12):
            assert env.recommend(user_id=USER, k=3, context={"hour": hour}).status_code == 200
        got = records(kafka_server, name, 12, timeout_s=20 if expected else 3)
        assert len(got) == expected
        assert [read_record(r)["features"]["hour"] for r in got] == \
            [float(h) for h in range(expected)]
        assert wait_for(lambda: outcomes(env)["sent"] == expected, what="the sent count")


@pytest.mark.e2e
def test_a_stopped_broker_never_fails_or_slows_an_answer(tmp_path, redis_server):  # noqa: F811
    """Nothing listens on the bootstrap port: the queue of 5 fills, the rest are dropped at
    once, the queued ones after delivery_timeout_ms; every record counted once."""
    requests = 40
    with make_env(tmp_path, redis_server.url,
                  kafka={"bootstrap_servers": f"127.0.0.1:{free_port()}"},
                  request_log={"sample_rate": 1.0, "max_queued": 5,
                               "delivery_timeout_ms": 3000}) as env:
        env.clicks(USER, HISTORY)
        slowest = 0.0
        for _ in range(requests):
            start = time.perf_counter()
            assert env.recommend(user_id=USER, k=3).status_code == 200
            slowest = max(slowest, time.perf_counter() - start)
        # Far under the delivery timeout a waiting produce or flush would take.
        assert slowest < 1.0, slowest
        assert outcomes(env)["dropped_queue_full"] == requests - 5
        counted = wait_for(lambda: (lambda o: o if sum(o.values()) == requests else None)(
            outcomes(env)), timeout_s=15, what="every record counted")
        assert counted == {"sent": 0, "dropped_queue_full": requests - 5,
                           "dropped_delivery_failed": 5, "dropped_error": 0}


@pytest.mark.e2e
def test_hostile_values_never_stop_it(tmp_path, redis_server, kafka_server,  # noqa: F811
                                      monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    name = topic(kafka_server)
    with make_env(tmp_path, redis_server.url, kafka={"bootstrap_servers": kafka_server.bootstrap},
                  request_log={"topic": name, "sample_rate": 1.0}) as env:
        env.clicks(USER, HISTORY)
        for body, _ in BAD:  # refused (400) before anything is sent or logged
            assert env.client.post("/v1/recommend", content=_raw(body), headers={
                "Content-Type": "application/json"}).status_code == 400
        # What could reach it from elsewhere (a stored history, a bug): never raised, counted.
        log = env.app.state.endpoint.request_log
        instance = {"user_click_history": [""] * 10, "hour": 1.0, "device": ""}
        log.log(USER, {**instance, "hour": float("inf")}, [], "1")       # not JSON
        log.log(USER, {**instance, "device": object()}, [], "1")         # not JSON either
        log.log("\ud800", instance, [], "1")                             # not UTF-8
        log.log(USER, instance, ["x" * 1024] * 2048, "1")                # over the broker's max
        assert outcomes(env)["dropped_error"] == 4
        assert env.recommend(user_id=USER, k=3).status_code == 200
        (raw,) = records(kafka_server, name, 1)
    assert read_record(raw)["features"]["user_click_history"] == HISTORY


def test_the_config_refuses_a_kafka_login_in_the_clear_or_a_rate_out_of_range(tmp_path):
    def config(request_log: dict, **kafka) -> ServiceConfig:
        return service_config(tmp_path, "redis://127.0.0.1:1/0", "http://127.0.0.1:1",
                              request_log=request_log, kafka=kafka)

    login = {"username": "recommend-endpoint", "password_env": "P"}
    for bad, message in (({"sample_rate": 1.5}, "less than or equal to 1"),
                         ({"sample_rate": -0.1}, "greater than or equal to 0"),
                         ({"user_hash_key_file": "k"}, "set one of user_hash_key_env"),
                         ({"sasl": login}, "request_log.sasl is set but security_protocol")):
        with pytest.raises(ValueError, match=message):
            config(bad)
    # The endpoint's start refuses a SASL_SSL cluster without its own login (the updater, the
    # sink, which read this file too, need none); off, it needs none.
    updater = {"username": "history-updater", "password_env": "P"}
    with pytest.raises(ConfigError, match="request_log.sasl: kafka.security_protocol is "
                                          "SASL_SSL and the request log has no login"):
        RequestLog(config({}, security_protocol="SASL_SSL", sasl=updater), Metrics())
    assert RequestLog(config({"enabled": False}, security_protocol="SASL_SSL", sasl=updater),
                      Metrics()).producer is None


def test_its_own_login_is_read_at_start_naming_its_key(tmp_path, monkeypatch):
    monkeypatch.delenv("RL_PW", raising=False)
    service = service_config(
        tmp_path, "redis://127.0.0.1:1/0", "http://127.0.0.1:1",
        kafka={"security_protocol": "SASL_SSL",
               "sasl": {"username": "history-updater", "password_env": "UPDATER_PW"}},
        request_log={"sasl": {"username": "recommend-endpoint", "password_env": "RL_PW"}})
    with pytest.raises(ConfigError, match="request_log.sasl.password_env: the environment "
                                          "variable RL_PW is unset"):
        RequestLog(service, Metrics())
