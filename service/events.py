"""Click events on Kafka: schema 1, JSON, one event per message (TF-free).

    {"schema": 1, "event_id": "e-7f3a...", "user_id": "u00042", "item_id": "sku1091",
     "time_ms": 1704067200000}

- `schema`: the integer 1 (not `true`, not `1.0`). A producer writing another schema is refused
  event by event (dead-lettered with the reason), never guessed at; a new schema gets a new
  number and a reader here.
- `event_id`, `user_id`, `item_id`: ids (service/ids.py: 1-64 of A-Z a-z 0-9 _ . : -); the event
  id names the event in logs and dead letters; replays are harmless by the history's rule
  (core/click_history.py), not by remembering ids.
- `time_ms`: the click's time, integer milliseconds since the epoch, in [0, 2**53), and not
  later than the updater's clock plus `updater.max_clock_skew_s` (default 300 s) when the
  updater reads it: a click dated ahead would outrank every real click after it and hold the
  history still (its TTL is refreshed only by a change). Kind `time`, dead-lettered; a producer
  whose clock runs ahead by more than the skew loses clicks until its clock is fixed.
- Other keys are refused (a misspelt `item_Id` would otherwise drop the click silently).
- Strict JSON (RFC 8259): no `NaN`/`Infinity`, no key twice (parsers disagree on which one
  wins), no byte-order mark, numbers of at most MAX_DIGITS digits, UTF-8.
- The message's key should be the user id (Kafka then keeps a user's events on one partition,
  in order); the updater does not depend on it.

decode() raises BadEvent and nothing else, whatever the bytes (tests/service/test_events.py
fuzzes it): any other exception would stop the partition's reader at that message.
"""
from __future__ import annotations

import json
import re
from typing import Optional

from core.click_history import MAX_TIME_MS, ClickEvent
from service.ids import InvalidId, check_id, shown

SCHEMA = 1
FIELDS = ("schema", "event_id", "user_id", "item_id", "time_ms")
# The longest number read: time_ms below 2**53 has 16 digits. A longer one is refused unread:
# int() of a digit string is quadratic, and past 4300 digits CPython raises ValueError.
MAX_DIGITS = 20
EVENT_ID_CUT = 200
# Deeper nesting is refused before json.loads: its C scanner recurses per [ or {, and where it
# stops (RecursionError) depends on the caller's stack and recursion limit, so the reason a
# 1000-deep payload got varied between processes. 512 stays well inside the default limit.
MAX_DEPTH = 512
_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


# What is wrong with a bad event, a small fixed set: the updater's dead-letter metric's label
# values (service/updater.py), bounded whatever producers send. `internal`: the updater failed
# on a message for a reason of its own (a bug, a Redis key of the wrong type), named in the
# reason; dead-lettered like the rest so that one message never stops a partition.
KINDS = ("json", "schema", "field", "id", "size", "time", "tombstone", "internal")


class BadEvent(ValueError):
    """An event that cannot be applied; the message is the dead letter's reason, `kind` one of
    KINDS, `event_id` the event's id when it could be read (cut to EVENT_ID_CUT characters)."""

    def __init__(self, reason: str, kind: str, event_id: Optional[str] = None):
        if kind not in KINDS:
            raise ValueError(f"a bad event's kind is one of {KINDS}, not {kind!r}")
        super().__init__(reason)
        self.kind, self.event_id = kind, event_id


def encode(event: ClickEvent) -> bytes:
    return json.dumps({"schema": SCHEMA, "event_id": event.event_id, "user_id": event.user_id,
                       "item_id": event.item_id, "time_ms": event.time_ms},
                      separators=(",", ":")).encode()


def decode(payload: Optional[bytes], max_bytes: int,
           not_after_ms: Optional[int] = None) -> ClickEvent:
    """The event in one Kafka message's value; raises BadEvent naming what is wrong, and
    nothing else. not_after_ms: the latest time_ms accepted (None: no such limit)."""
    if payload is None:
        raise BadEvent("the message has no value (a tombstone)", "tombstone")
    if len(payload) > max_bytes:
        raise BadEvent(f"the event is {len(payload)} bytes, more than kafka.max_event_bytes "
                       f"({max_bytes})", "size")
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadEvent(f"the event is not UTF-8 (byte {e.start})", "json") from None
    body = _parse(text)
    if not isinstance(body, dict):
        raise BadEvent(f"the event is a JSON {type(body).__name__}, not an object", "json")
    try:
        return _event(body, not_after_ms)
    except BadEvent as bad:
        event_id = body.get("event_id")
        if isinstance(event_id, str):
            # A lone surrogate ("\ud800" in JSON) is written as that text: a dead letter stays
            # valid UTF-8 for whatever reads it.
            bad.event_id = event_id[:EVENT_ID_CUT].encode("utf-8", "backslashreplace").decode()
        raise


def _parse(text: str):
    """json.loads, strict: what RFC 8259 leaves out or leaves open is refused as kind json."""
    def unique(pairs):
        body = {}
        for key, value in pairs:
            if key in body:
                raise BadEvent(f"key {shown(key)} appears twice", "json")
            body[key] = value
        return body

    def integer(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_DIGITS:
            raise BadEvent(f"a number of {len(digits.lstrip('-'))} digits (at most {MAX_DIGITS})",
                           "json")
        return int(digits)

    def constant(name: str):
        raise BadEvent(f"{name} is not JSON", "json")

    depth = _depth(text)
    if depth > MAX_DEPTH:
        raise BadEvent(f"the event nests arrays or objects {depth} deep (at most {MAX_DEPTH})",
                       "json")
    try:
        return json.loads(text, object_pairs_hook=unique, parse_int=integer,
                          parse_constant=constant)
    except BadEvent:
        raise
    except RecursionError:  # the C scanner recurses per [ or {: a few KiB of them suffice
        raise BadEvent("the event nests arrays or objects too deeply to read", "json") from None
    except ValueError as e:  # JSONDecodeError, a leading byte-order mark included
        raise BadEvent(f"the event is not JSON: {e}", "json") from None


def _depth(text: str) -> int:
    """How deep the text's arrays and objects nest, outside strings."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return 0  # every event worth reading: the scan below is only for the hostile ones
    depth = peak = 0
    for token in _BRACKETS.finditer(text):
        mark = token.group()
        if mark in "[{":
            depth += 1
            peak = max(peak, depth)
        elif mark in "]}":
            depth -= 1
    return peak


def _event(body: dict, not_after_ms: Optional[int]) -> ClickEvent:
    schema = body.get("schema")
    # type(), not isinstance or ==: Python takes true and 1.0 for 1, the schema does not.
    if type(schema) is not int or schema != SCHEMA:
        raise BadEvent(f"schema {shown(schema)} is not {SCHEMA} (the one this updater "
                       "reads: service/events.py)", "schema")
    missing = [f for f in FIELDS if f not in body]
    if missing:
        raise BadEvent(f"missing field(s) {', '.join(missing)}", "field")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise BadEvent(f"unknown field(s) {', '.join(map(shown, unknown))[:200]}", "field")
    try:
        ids = {name: check_id(name, body[name]) for name in ("event_id", "user_id", "item_id")}
    except InvalidId as e:
        raise BadEvent(str(e), "id") from None
    time_ms = body["time_ms"]
    if type(time_ms) is not int or not 0 <= time_ms < MAX_TIME_MS:
        raise BadEvent(f"time_ms {shown(time_ms)} is not an integer in [0, 2**53) (milliseconds "
                       "since the epoch)", "time")
    if not_after_ms is not None and time_ms > not_after_ms:
        raise BadEvent(f"time_ms {time_ms} is in the future: {time_ms - not_after_ms} ms past the "
                       f"updater's clock plus updater.max_clock_skew_s ({not_after_ms})", "time")
    return ClickEvent(ids["event_id"], ids["user_id"], ids["item_id"], time_ms)
