"""service/history_store.py against a real redis-server (tests/redis_server.py): the history it
keeps is core/click_history.py's, an event applied twice changes nothing, and the TTL."""
from __future__ import annotations

import random
import time

import pytest

from core.click_history import ClickEvent, HistorySpec, histories
from service.history_store import HistoryStore
from tests.core.test_click_history import spec, stream
from tests.helpers import REPO
from devtools.redis_node import stop
from tests.redis_server import redis_server  # noqa: F401  (fixture)

DAY_S = 86400


def snapshot(client) -> dict:
    """Every key's members with scores: the whole stored state."""
    return {key: client.zrange(key, 0, -1, withscores=True) for key in sorted(client.keys("*"))}


@pytest.mark.parametrize("keep", ["last", "first"])
def test_one_stream_through_redis_gives_the_offline_histories(redis_server, keep):  # noqa: F811
    s = HistorySpec(length=10, keep=keep)
    store = HistoryStore(redis_server.client(), s, ttl_s=DAY_S)
    events = stream(seed=3)
    for event in events:
        store.apply(event)
    expected = histories(events, s)
    assert {user: store.history(user) for user in expected} == expected
    assert all(redis_server.client().zcard(store.key(u)) <= 10 for u in expected)


def test_the_recommender_configs_history_round_trips(redis_server):  # noqa: F811
    store = HistoryStore(redis_server.client(), spec(), ttl_s=DAY_S)
    items = [f"sku{1000 + i}" for i in range(12)]
    for i, item in enumerate(items):
        store.apply(ClickEvent(f"e{i}", "u00001", item, 1704067200000 + i))
    assert store.history("u00001") == items[-10:]
    assert store.cell("u00001") == "|".join(items[-10:])
    assert store.history("nobody") == []


def test_an_event_applied_twice_changes_nothing(redis_server):  # noqa: F811
    client = redis_server.client()
    store = HistoryStore(client, HistorySpec(length=10), ttl_s=DAY_S)
    events = stream(seed=4, users=10, events=400)
    for event in events:
        store.apply(event)
    before = snapshot(client)
    # Redelivered: every event again, in another order; none changes a history.
    again = list(events)
    random.Random(5).shuffle(again)
    assert [store.apply(event) for event in again] == [False] * len(again)
    assert snapshot(client) == before
    # Not even the TTL: a replay does not extend it.
    key = store.key(events[-1].user_id)
    ttl = client.pttl(key)
    time.sleep(0.05)
    assert store.apply(events[-1]) is False
    assert client.pttl(key) < ttl


@pytest.mark.slow
def test_the_ttl_counts_from_the_last_change(redis_server):  # noqa: F811
    client = redis_server.client()
    store = HistoryStore(client, HistorySpec(length=2), ttl_s=1)
    first = ClickEvent("e1", "u", "a", 10)
    assert store.apply(first) is True
    assert 0 < client.pttl(store.key("u")) <= 1000
    time.sleep(0.5)
    assert store.apply(ClickEvent("e2", "u", "b", 20)) is True    # a change: the TTL again
    assert client.pttl(store.key("u")) > 800
    assert store.apply(ClickEvent("e0", "u", "c", 5)) is False    # older than both kept
    assert store.history("u") == ["a", "b"]
    time.sleep(1.1)
    assert store.history("u") == []                                # expired
    assert client.exists(store.key("u")) == 0


def test_hostile_ids_are_data_not_commands(redis_server):  # noqa: F811
    """RESP sends each argument length-prefixed: protocol fragments in an id are stored as given
    (rejecting them is the updater's and the endpoint's job)."""
    client = redis_server.client()
    store = HistoryStore(client, HistorySpec(length=10), ttl_s=DAY_S)
    client.set("canary", "1")
    hostile = "x\r\nFLUSHALL\r\n*1\r\n$8\r\nFLUSHALL\r\n"
    store.apply(ClickEvent("e1", hostile, hostile, 1))
    store.apply(ClickEvent("e2", "u", "*", 2))
    assert client.get("canary") == "1"
    assert store.history(hostile) == [hostile]
    assert store.history("u") == ["*"]


def test_a_bad_ttl_or_event_is_refused_before_redis(redis_server):  # noqa: F811
    with pytest.raises(ValueError, match="ttl_s"):
        HistoryStore(redis_server.client(), HistorySpec(), ttl_s=0)
    store = HistoryStore(redis_server.client(), HistorySpec(), ttl_s=DAY_S)
    with pytest.raises(ValueError, match="separator"):
        store.apply(ClickEvent("e1", "u", "a|b", 1))
    assert redis_server.client().keys("*") == []


def test_redis_down_is_an_error_not_a_silent_loss(redis_server):  # noqa: F811
    """The updater must not commit an offset it did not write: apply raises."""
    import redis

    store = HistoryStore(redis_server.client(socket_connect_timeout=1), HistorySpec(), ttl_s=60)
    stop(redis_server)
    with pytest.raises(redis.ConnectionError):
        store.apply(ClickEvent("e1", "u", "a", 1))


# The same check on a naive store (LPUSH then LTRIM, what a history list in Redis often is):
# it fails, so the idempotence test above can fail.
NAIVE = """
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[3]) - 1)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[5]))
return 1
"""


def test_negative_control_a_push_and_trim_list_double_applies(redis_server):  # noqa: F811
    client = redis_server.client()
    store = HistoryStore(client, HistorySpec(length=10), ttl_s=DAY_S)
    store._apply = client.register_script(NAIVE)
    event = ClickEvent("e1", "u", "a", 1)
    store.apply(event)
    store.apply(event)
    assert client.lrange(store.key("u"), 0, -1) == ["a", "a"]   # the replay counted twice


def test_the_service_config_gives_the_spec_the_ttl_and_the_prefix(redis_server):  # noqa: F811
    from service.config import load_service_config

    service = load_service_config(REPO / "configs" / "recommender_service.yaml")
    client = redis_server.client()
    store = HistoryStore.from_service_config(client, service)
    assert store.spec == spec() and store.ttl_s == service.history.ttl_s == 30 * DAY_S
    store.apply(ClickEvent("e1", "u1", "sku1000", 1))
    assert client.keys("*") == [f"{service.history.key_prefix}u1"]
    assert 30 * DAY_S * 1000 - 5000 < client.pttl(store.key("u1")) <= 30 * DAY_S * 1000


def test_a_bad_service_config_is_refused_by_key(tmp_path):
    from core.config import ConfigError
    from service.config import load_service_config

    path = tmp_path / "service.yaml"
    path.write_text(f"pipeline_config: {REPO / 'configs' / 'recommender.yaml'}\n"
                    "history: {ttl_s: 0, ttl: 5}\n")
    with pytest.raises(ConfigError) as raised:
        load_service_config(path)
    assert "history.ttl_s" in str(raised.value) and "history.ttl: unknown key" in str(raised.value)
