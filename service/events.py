"""Click events on Kafka: schema 1, JSON, one event per message (TF-free).

    {"schema": 1, "event_id": "e-7f3a...", "user_id": "u00042", "item_id": "sku1091",
     "time_ms": 1704067200000}

- `schema`: 1. A producer writing another schema is refused event by event (dead-lettered with
  the reason), never guessed at; a new schema gets a new number and a reader here.
- `event_id`, `user_id`, `item_id`: ids (service/ids.py: 1-64 of A-Z a-z 0-9 _ . : -); the event
  id names the event in logs and dead letters; replays are harmless by the history's rule
  (core/click_history.py), not by remembering ids.
- `time_ms`: the click's time, integer milliseconds since the epoch, in [0, 2**53).
- Other keys are refused (a misspelt `item_Id` would otherwise drop the click silently).
- The message's key should be the user id (Kafka then keeps a user's events on one partition,
  in order); the updater does not depend on it.
"""
from __future__ import annotations

import json
from typing import Optional

from core.click_history import MAX_TIME_MS, ClickEvent
from service.ids import InvalidId, check_id

SCHEMA = 1
FIELDS = ("schema", "event_id", "user_id", "item_id", "time_ms")


# What is wrong with a bad event, a small fixed set: the updater's dead-letter metric's label
# values (service/updater.py), bounded whatever producers send.
KINDS = ("json", "schema", "field", "id", "size", "time", "tombstone")


class BadEvent(ValueError):
    """An event that cannot be applied; the message is the dead letter's reason, `kind` one of
    KINDS."""

    def __init__(self, reason: str, kind: str):
        if kind not in KINDS:
            raise ValueError(f"a bad event's kind is one of {KINDS}, not {kind!r}")
        super().__init__(reason)
        self.kind = kind


def encode(event: ClickEvent) -> bytes:
    return json.dumps({"schema": SCHEMA, "event_id": event.event_id, "user_id": event.user_id,
                       "item_id": event.item_id, "time_ms": event.time_ms},
                      separators=(",", ":")).encode()


def decode(payload: Optional[bytes], max_bytes: int) -> ClickEvent:
    """The event in one Kafka message's value; raises BadEvent naming what is wrong."""
    if payload is None:
        raise BadEvent("the message has no value (a tombstone)", "tombstone")
    if len(payload) > max_bytes:
        raise BadEvent(f"the event is {len(payload)} bytes, more than kafka.max_event_bytes "
                       f"({max_bytes})", "size")
    try:
        body = json.loads(payload.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise BadEvent(f"the event is not UTF-8 (byte {e.start})", "json") from None
    except json.JSONDecodeError as e:
        raise BadEvent(f"the event is not JSON: {e}", "json") from None
    if not isinstance(body, dict):
        raise BadEvent(f"the event is a JSON {type(body).__name__}, not an object", "json")
    if body.get("schema") != SCHEMA:
        raise BadEvent(f"schema {body.get('schema')!r} is not {SCHEMA} (the one this updater "
                       "reads: service/events.py)", "schema")
    missing = [f for f in FIELDS if f not in body]
    if missing:
        raise BadEvent(f"missing field(s) {', '.join(missing)}", "field")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise BadEvent(f"unknown field(s) {', '.join(map(repr, unknown))[:200]}", "field")
    try:
        ids = {name: check_id(name, body[name]) for name in ("event_id", "user_id", "item_id")}
    except InvalidId as e:
        raise BadEvent(str(e), "id") from None
    time_ms = body["time_ms"]
    if isinstance(time_ms, bool) or not isinstance(time_ms, int) \
            or not 0 <= time_ms < MAX_TIME_MS:
        raise BadEvent(f"time_ms {time_ms!r} is not an integer in [0, 2**53) (milliseconds "
                       "since the epoch)", "time")
    return ClickEvent(ids["event_id"], ids["user_id"], ids["item_id"], time_ms)
