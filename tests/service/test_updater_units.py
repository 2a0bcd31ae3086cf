"""The history updater's parts that need no broker (service/updater.py): the dead letter's
envelope, the metrics' fixed series, the fault-injection hook's spelling, the CLI's refusal of a
bad config. The process against real servers: tests/service/test_updater.py."""
from __future__ import annotations

import base64
import json

import pytest
from prometheus_client import generate_latest

from service.events import KINDS, BadEvent, decode
from service.updater import FAULT_ENV, PAYLOAD_CUT, Fault, Metrics, envelope, main


class Message:
    """What envelope() reads of a confluent_kafka Message."""

    def __init__(self, value):
        self._value = value

    def value(self):
        return self._value

    def topic(self):
        return "clicks"

    def partition(self):
        return 3

    def offset(self):
        return 41


def letter(value, max_bytes: int = 4096) -> dict:
    with pytest.raises(BadEvent) as bad:
        decode(value, max_bytes)
    return json.loads(json.dumps(envelope(Message(value), bad.value, max_bytes)))


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


def test_a_bad_config_is_refused_naming_the_key(tmp_path, capsys):
    config = tmp_path / "service.yaml"
    config.write_text("pipeline_config: x.yaml\ncatalog: {path: c.csv}\nkafka: {topik: x}\n")
    assert main(["--config", str(config)]) == 2
    assert "kafka.topik: unknown key" in capsys.readouterr().err
