"""The history updater's parts that need no broker (service/updater.py): the dead letter's
envelope, the metrics' fixed series, the fault-injection hook's spelling, the CLI's refusal of a
bad config, and one message's handling with the store and producer stubbed: any failure of its
own dead-letters it, Redis away holds it. The process against real servers:
tests/service/test_updater.py."""
from __future__ import annotations

import base64
import json

import pytest
import redis
from prometheus_client import generate_latest

from core.click_history import ClickEvent
from service.events import KINDS, BadEvent, decode, encode
from service.updater import (FAULT_ENV, KEY_CUT, PAYLOAD_CUT, Fault, Metrics, Updater, envelope,
                             main, now_ms)


class Message:
    """What the updater reads of a confluent_kafka Message."""

    def __init__(self, value, key=None):
        self._value, self._key = value, key

    def value(self):
        return self._value

    def key(self):
        return self._key

    def topic(self):
        return "clicks"

    def partition(self):
        return 3

    def offset(self):
        return 41


def letter(value, max_bytes: int = 4096) -> dict:
    with pytest.raises(BadEvent) as bad:
        decode(value, max_bytes)
    return json.loads(json.dumps(envelope(Message(value), bad.value)))


def test_the_envelope_names_reason_kind_and_source():
    value = json.dumps({"schema": 1, "event_id": "e\r\n1", "user_id": "u1", "item_id": "sku1",
                        "time_ms": 1}).encode()
    body = letter(value)
    assert body == {"reason": body["reason"], "kind": "id", "topic": "clicks", "partition": 3,
                    "offset": 41, "event_id": "e\r\n1", "payload_bytes": len(value),
                    "payload": value.decode(), "payload_encoding": "utf-8"}
    assert body["reason"].startswith("event_id 'e\\r\\n1' is not an id")
    # Serialised, CR/LF are escapes: one line, nothing a log or a Redis protocol reads as a break.
    assert b"\r" not in json.dumps(body).encode()


def test_the_envelope_cuts_large_and_encodes_binary_payloads():
    big = letter(b"x" * (1024 * 1024))
    assert (big["kind"], big["payload_bytes"], len(big["payload"])) == \
        ("size", 1024 * 1024, PAYLOAD_CUT)
    assert big["event_id"] is None  # an oversized payload is not parsed
    binary = letter(b"\xff" * 5000, max_bytes=10_000)
    assert (binary["kind"], binary["payload_encoding"]) == ("json", "base64")
    assert base64.b64decode(binary["payload"]) == b"\xff" * PAYLOAD_CUT
    tombstone = letter(None)
    assert (tombstone["kind"], tombstone["payload_bytes"]) == ("tombstone", None)
    assert "payload" not in tombstone


def test_every_dead_letter_kind_has_a_series_from_the_start():
    """Alert rules (deploy/) see a 0 before the first bad event; the label values are KINDS."""
    text = generate_latest(Metrics().registry).decode()
    for kind in KINDS:
        assert f'history_updater_events_dead_lettered_total{{kind="{kind}"}} 0.0' in text
    for name in ("history_updater_events_applied_total", "history_updater_events_changed_total",
                 "history_updater_redis_errors_total", "history_updater_consumer_lag"):
        assert f"# TYPE {name.removesuffix('_total')}" in text
    with pytest.raises(ValueError, match="kind is one of"):
        BadEvent("why", "other")


def test_a_misspelt_fault_hook_is_refused():
    assert Fault("").point is None
    assert (Fault("exit-after-write:7").point, Fault("exit-after-write:7").at) == ("after", 7)
    with pytest.raises(SystemExit, match=f"{FAULT_ENV}='exit-after-write'.*expected"):
        Fault("exit-after-write")


@pytest.mark.parametrize("section, message", [
    ("kafka: {topik: x}", "kafka.topik: unknown key"),
    ("updater: {max_clock_skew_s: -1}", "updater.max_clock_skew_s: Input should be greater"),
    ("updater: {max_clock_skew_s: 604800}", "updater.max_clock_skew_s: Input should be less"),
])
def test_a_bad_config_is_refused_naming_the_key(tmp_path, capsys, section, message):
    config = tmp_path / "service.yaml"
    config.write_text(f"pipeline_config: x.yaml\ncatalog: {{path: c.csv}}\n{section}\n")
    assert main(["--config", str(config)]) == 2
    assert message in capsys.readouterr().err


class Store:
    """HistoryStore.apply raising each of `errors` in turn, then applying."""

    def __init__(self, *errors):
        self.errors, self.applied = list(errors), []

    def apply(self, event):
        if self.errors:
            raise self.errors.pop(0)
        self.applied.append(event)
        return True


class Producer:
    """The dead-letter producer: delivers at once; raises each of `errors` first."""

    def __init__(self, *errors):
        self.errors, self.sent, self.polls = list(errors), [], 0

    def produce(self, topic, value, key, on_delivery):
        if self.errors:
            raise self.errors.pop(0)
        self.sent.append((key, json.loads(value)))
        on_delivery(None, None)

    def poll(self, timeout):
        self.polls += 1


def handled(store: Store, value: bytes, key=None, producer=None) -> Updater:
    """An Updater without Kafka, Redis or metrics server, after _handle of one message."""
    updater = Updater.__new__(Updater)
    updater.max_bytes, updater.skew_ms, updater.stopping = 4096, 300_000, False
    updater.metrics, updater.fault, updater.store = Metrics(), Fault(""), store
    updater.producer, updater.dead_letter_topic = producer or Producer(), "clicks.dead-letter"
    updater.next_lag = float("inf")
    assert updater._handle(Message(value, key)) is True
    return updater


EVENT = ClickEvent("e-1", "u1", "sku1", 1000)


def dead_lettered(updater: Updater, kind: str) -> float:
    return updater.metrics.dead_lettered.labels(kind)._value.get()


@pytest.mark.parametrize("error, name", [
    (TypeError("a bug"), "TypeError: 'a bug'"),
    (redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
     "ResponseError: 'WRONGTYPE"),
])
def test_a_failure_of_the_message_itself_dead_letters_it_as_internal(error, name, caplog):
    """Issue 42: an exception escaping _handle stopped the process at that message, and every
    restart with it. A bug, or a user's Redis key of another type, is that message's alone."""
    updater = handled(Store(error), encode(EVENT))
    [(key, letter)] = updater.producer.sent
    assert (letter["kind"], letter["offset"]) == ("internal", 41)
    assert letter["reason"].startswith(f"the updater failed on it: {name}")
    assert dead_lettered(updater, "internal") == 1
    assert updater.metrics.redis_errors._value.get() == 0
    assert "Traceback" in caplog.text  # the bug's traceback is in the log


@pytest.mark.parametrize("error", [
    redis.ConnectionError("Connection refused"), redis.TimeoutError("Timeout reading"),
    redis.BusyLoadingError("LOADING Redis is loading the dataset in memory"),
    redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'."),
    redis.ReadOnlyError("READONLY You can't write against a read only replica."),
])
def test_redis_unavailable_holds_the_message_and_retries(error):
    """Every Redis error but WRONGTYPE is about the server, and would hold the next event too:
    retried, never dead-lettered."""
    updater = handled(Store(error, error), encode(EVENT))
    assert updater.store.applied == [EVENT] and updater.producer.sent == []
    assert updater.metrics.redis_errors._value.get() == 2


def test_a_huge_key_is_cut_in_the_dead_letter_and_a_full_queue_waited_out():
    """A key of MiBs would make the dead letter too large to deliver (its offset stuck); a full
    producer queue (the broker away) is waited out, not raised."""
    producer = Producer(BufferError("Local: Queue full"))
    updater = handled(Store(), b"{not json", key=b"k" * (2 * 1024 * 1024), producer=producer)
    [(key, letter)] = producer.sent
    assert (key, letter["kind"], producer.polls) == (b"k" * KEY_CUT, "json", 1)
    assert dead_lettered(updater, "json") == 1


def test_a_click_dated_past_the_clock_plus_the_skew_is_dead_lettered_as_time():
    """Issue 42, item 3: the updater's own clock bounds time_ms (max_clock_skew_s 300 here)."""
    soon = ClickEvent("e-1", "u1", "sku1", now_ms() + 60_000)
    updater = handled(Store(), encode(soon))
    assert (updater.store.applied, updater.producer.sent) == ([soon], [])
    ahead = ClickEvent("e-2", "u1", "sku2", now_ms() + 3_600_000)
    updater = handled(Store(), encode(ahead))
    [(_, letter)] = updater.producer.sent
    assert (letter["kind"], letter["event_id"]) == ("time", "e-2")
    assert "is in the future" in letter["reason"] and updater.store.applied == []
