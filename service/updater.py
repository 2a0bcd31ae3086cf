"""The history updater (issue 29): a Kafka consumer group that keeps each user's last clicks in
Redis by core/click_history.py's rule (service/history_store.py). TF-free.

    python -m service.updater --config configs/recommender_service.yaml \\
        [--bootstrap-servers HOST:PORT] [--redis-url URL] [--metrics-port N] [--instance-id ID]

Each message of `kafka.topic` (schema 1 JSON, service/events.py) is decoded and applied to the
user's history in Redis (HistoryStore.apply); its offset is committed only after that write
succeeded. Delivery is at least once, and that is enough: an event applied twice changes nothing
(the history keeps each item's newest click time, a maximum), so every failure below is handled
by not committing and letting Kafka deliver the event again, never by skipping it.

- **Commits: batched, synchronous, after the writes.** One commit per consume() batch (up to
  BATCH messages), once every message of it was written to Redis or dead-lettered, and the dead
  letters delivered. Batched, because a commit is a round trip to the group coordinator (per
  message it would cap the updater at one event per round trip); synchronous, so that a commit
  that fails is seen (retried while Kafka is away) before the next batch is taken. A crash
  between a write and its commit replays at most one batch, harmlessly.
- **Bad events** (not UTF-8, not strict JSON, another schema, a missing or unknown field, an id
  failing service/ids.py's check, a bad time or one later than this process's clock plus
  updater.max_clock_skew_s, larger than kafka.max_event_bytes, a tombstone) go to
  `kafka.dead_letter_topic` as a JSON envelope: reason, kind, source topic, partition and
  offset, the event id when readable, the payload's first PAYLOAD_CUT characters (base64 of its
  first bytes when not UTF-8), the key cut to KEY_CUT bytes. They are counted per kind
  (events.KINDS, a fixed set: bounded label values), logged one line each, and their offsets
  are committed only once the dead letter is delivered. The fetch limits let a message of a few
  MiB through, so that an oversized event is dead-lettered rather than stalling its partition.
- **Any other failure on one message** (a bug, a Redis key of the wrong type) dead-letters that
  message as kind `internal`, the exception named in the reason and its traceback logged: one
  message never holds a partition (issue 42: an exception escaping here stopped the process,
  and every restart, at that message). Only Kafka or Redis being unavailable pauses progress.
- **Redis down** (unreachable, loading, read-only, out of memory, refusing the user: any error
  but WRONGTYPE, which concerns one key): the write is retried with backoff (logged, counted in
  redis_errors), nothing is committed meanwhile; the partition waits, no event is skipped. Past
  the consumer's max.poll.interval.ms (5 min) the group hands its partitions to another
  instance; this one's commit then fails as "the group rebalanced", and the new owner replays
  the batch.
- **Kafka down**: consuming waits; a commit or a dead letter's delivery is retried until the
  broker is back; the group resumes from its committed offsets.
- **SIGTERM / SIGINT**: the current message is finished, what is done is committed, and the
  consumer is closed (it leaves the group, which hands its partitions on at once).

Logins (issue 42): the updater reads Kafka as `kafka.sasl`'s user over TLS (SASL_SSL,
SCRAM) and writes Redis as `redis.updater_user` (an ACL user that reaches `history:*` only), each
password read at start from the file or variable the config names (service/logins.py). A
login the brokers refuse, or a broker certificate `kafka.tls.ca_file` does not verify, stops the
process (REFUSED_EXIT, one line naming the user and the config): no retry fixes it, and the
restart reads the Secret again. Redis refusing the user is handled as Redis down (above).

Scale-out: more instances with the same group id share the topic's partitions (a partition has
one reader at a time in a group), so the most useful replicas are the topic's partition count;
more instances idle. `--instance-id` (a StatefulSet pod's name) makes the membership static: a
restarted instance takes its partitions back at once instead of after session.timeout.ms (45 s);
the price: a static member does not leave the group on a stop, so an instance that is stopped
for good hands its partitions on only after that timeout.

Metrics (prometheus_client's server on updater.metrics_port, a registry of its own; port 0 picks
a free port, logged): history_updater_events_applied_total (written to Redis, changed or not),
history_updater_events_changed_total, history_updater_events_dead_lettered_total{kind},
history_updater_consumer_lag{partition} (high watermark minus committed offset, every
LAG_REFRESH_S of service/consumer_group.py, which holds what the service's consumer groups share),
history_updater_redis_errors_total. deploy/ writes alert rules on these names.

Fault injection, for tests only: HISTORY_UPDATER_FAULT_INJECTION=exit-after-write:N makes the
process os._exit(FAULT_EXIT) right after the N-th event's Redis write, before its commit;
exit-before-write:N right before that write (tests/service/test_updater.py).
"""
from __future__ import annotations

import base64
import json
import logging
import os
import re
import sys
import time
from typing import Dict, Optional, Tuple

import redis
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from core.cli import refuse
from core.config import ConfigError
from service.history_store import HistoryStore
from service.logins import kafka_options, redis_options
from service.config import ServiceConfig, load_service_config
from service.consumer_group import (BACKOFF_S, REPEAT_S, STOP_GRACE_S, GroupMember,
                                    group_options, log_to_stderr, member_parser, rdkafka_logger,
                                    serve)
from service.events import KINDS, BadEvent, decode
from service.ids import shown

BATCH = 500
POLL_S = 0.2
PAYLOAD_CUT = 1024
# A dead letter keeps this much of the message's key: a producer may send a key of MiBs, and a
# dead letter too large to deliver would leave its offset uncommitted for ever.
KEY_CUT = 256
# A message up to this size is fetched (and dead-lettered when over kafka.max_event_bytes).
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
FAULT_ENV = "HISTORY_UPDATER_FAULT_INJECTION"
FAULT_EXIT = 75
REFUSED_EXIT = 77  # the brokers refused the Kafka login (sysexits' EX_NOPERM)

log = logging.getLogger("service.updater")


class Metrics:
    """The updater's series, in a registry of its own (nothing of the process's default one)."""

    def __init__(self):
        self.registry = r = CollectorRegistry()
        self.applied = Counter("history_updater_events_applied_total",
                               "Events written to Redis, whether the history changed or not",
                               registry=r)
        self.changed = Counter("history_updater_events_changed_total",
                               "Events that changed a history (a replay changes none)", registry=r)
        self.dead_lettered = Counter("history_updater_events_dead_lettered_total",
                                     "Bad events delivered to the dead-letter topic, by kind",
                                     ["kind"], registry=r)
        self.lag = Gauge("history_updater_consumer_lag",
                         "High watermark minus committed offset, per assigned partition",
                         ["partition"], registry=r)
        self.redis_errors = Counter("history_updater_redis_errors_total",
                                    "Failed Redis writes (each retried)", registry=r)
        for kind in KINDS:  # every kind's series exists from the start, for alert rules
            self.dead_lettered.labels(kind)


class Fault:
    """The fault-injection hook of FAULT_ENV: exits at one point of the N-th event's write."""

    def __init__(self, spec: str):
        self.point, self.at, self.count = None, 0, 0
        if spec:
            match = re.fullmatch(r"exit-(before|after)-write:([1-9][0-9]*)", spec)
            if match is None:
                raise SystemExit(f"{FAULT_ENV}={spec!r}: expected exit-after-write:N or "
                                 "exit-before-write:N (N >= 1), or unset it")
            self.point, self.at = match.group(1), int(match.group(2))

    def reached(self, point: str) -> None:
        self.count += point == "before"
        if point == self.point and self.count == self.at:
            log.warning("fault injection (%s): exiting %s the write of event %d, before its "
                        "offset commit", FAULT_ENV, point, self.count)
            logging.shutdown()
            os._exit(FAULT_EXIT)


def envelope(message, bad: BadEvent) -> dict:
    """The dead letter of a message: why, where from, and enough of it to look at. The event id
    is decode()'s (parsing the payload again here could fail as decoding it did)."""
    payload = message.value()
    body = {"reason": str(bad), "kind": bad.kind, "topic": message.topic(),
            "partition": message.partition(), "offset": message.offset(),
            "event_id": bad.event_id, "payload_bytes": None if payload is None else len(payload)}
    if payload is None:
        return body
    try:
        body["payload"], body["payload_encoding"] = payload.decode()[:PAYLOAD_CUT], "utf-8"
    except UnicodeDecodeError:
        body["payload"] = base64.b64encode(payload[:PAYLOAD_CUT]).decode()
        body["payload_encoding"] = "base64"
    return body


class Updater(GroupMember):
    """One member of the consumer group: run() until stop() (a signal), then leaves the group."""

    label, log = "history updater", log

    def __init__(self, service: ServiceConfig, bootstrap: str, redis_url: str, metrics_port: int,
                 instance_id: Optional[str] = None):
        kafka = service.kafka
        self.topic, self.dead_letter_topic = kafka.topic, kafka.dead_letter_topic
        self.group, self.max_bytes = kafka.group_id, kafka.max_event_bytes
        self.skew_ms = service.updater.max_clock_skew_s * 1000
        self.metrics, self.fault = Metrics(), Fault(os.environ.get(FAULT_ENV, ""))
        # Its own Redis user and TLS, and its Kafka login (service/logins.py): passwords
        # read now, so that a missing Secret stops the start naming the config key.
        client = redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2,
                                      **redis_options(service.redis, "updater", redis_url))
        self.login = kafka.sasl
        self.refused: Optional[str] = None
        self.store = HistoryStore.from_service_config(client, service)
        self.metrics_server, _ = start_http_server(metrics_port, registry=self.metrics.registry)
        common = {**kafka_options(kafka), "bootstrap.servers": bootstrap,
                  "logger": rdkafka_logger(), "error_cb": self._kafka_error}
        self.consumer = Consumer({**group_options(common, self.group, "history-updater",
                                                  instance_id),
                                  "max.partition.fetch.bytes": MAX_MESSAGE_BYTES,
                                  "fetch.max.bytes": 4 * MAX_MESSAGE_BYTES,
                                  "receive.message.max.bytes": 5 * MAX_MESSAGE_BYTES})
        # Idempotent and without a delivery deadline: a dead letter waits out a broker restart.
        self.producer = Producer({**common, "enable.idempotence": True,
                                  "message.timeout.ms": 0, "linger.ms": 5})
        self.stopping, self.joined, self.next_lag = False, False, 0.0
        self.failed: list = []  # dead letters whose delivery failed, to produce again

    def stop(self, signum=None, frame=None) -> None:
        if not self.stopping:
            log.info("history updater: stopping (signal %s) after the current message", signum)
        self.stopping = True

    def run(self) -> None:
        self._check_topics(((self.topic, "kafka.topic"),
                            (self.dead_letter_topic, "kafka.dead_letter_topic")))
        self.consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked)
        try:
            while not self.stopping:
                done: Dict[Tuple[str, int], int] = {}
                for message in self.consumer.consume(BATCH, POLL_S):
                    if message.error():
                        log.warning("kafka: %s", message.error())
                        continue
                    if not self._handle(message):
                        break
                    done[(message.topic(), message.partition())] = message.offset() + 1
                    if self.stopping:
                        break
                if done and self._deliver_dead_letters():
                    self._commit(done)
                if time.monotonic() >= self.next_lag:
                    self._refresh_lag()
        finally:
            self.consumer.close()  # the metrics server's thread ends with the process
            log.info("history updater: consumer closed, left group %s", self.group)

    def _handle(self, message) -> bool:
        """Writes or dead-letters the message; True once it is done with (may be committed)."""
        try:
            return self._apply(message)
        except Exception as e:  # anything but Kafka or Redis away: this message's own failure
            log.error("history updater: failed on the message at %s/%d@%d; dead-lettering it",
                      message.topic(), message.partition(), message.offset(), exc_info=True)
            self._dead_letter(message, BadEvent(f"the updater failed on it: {type(e).__name__}: "
                                                f"{str(e)[:300]!r}", "internal"))
            return True

    def _apply(self, message) -> bool:
        try:
            event = decode(message.value(), self.max_bytes, now_ms() + self.skew_ms)
        except BadEvent as bad:
            self._dead_letter(message, bad)
            return True
        self.fault.reached("before")
        delay = BACKOFF_S[0]
        while True:
            try:
                changed = self.store.apply(event)
                break
            except redis.RedisError as e:
                if isinstance(e, redis.ResponseError) and "WRONGTYPE" in str(e):
                    raise  # the user's key holds something else: this event's failure alone
                self.metrics.redis_errors.inc()
                if self.stopping:
                    return False
                log.warning("redis: writing event %s failed (%s: %s); retrying in %.2f s, "
                            "offsets not committed meanwhile", event.event_id,
                            type(e).__name__, e, delay)
                if time.monotonic() >= self.next_lag:  # the lag grows while Redis is away
                    self._refresh_lag()
                self._sleep(delay)
                delay = min(2 * delay, BACKOFF_S[1])
        self.metrics.applied.inc()
        self.metrics.changed.inc(changed)
        self.fault.reached("after")
        return True

    def _dead_letter(self, message, bad: BadEvent) -> None:
        body = envelope(message, bad)
        log.warning("dead letter: event %s at %s/%d@%d: %s",
                    shown(body["event_id"]) if body["event_id"] else "(no readable event_id)",
                    message.topic(), message.partition(), message.offset(), str(bad)[:300])
        key = message.key()
        self._produce(None if key is None else key[:KEY_CUT], json.dumps(body).encode(),
                      bad.kind)

    def _produce(self, key, value: bytes, kind: str) -> None:
        def delivered(error, _message):
            if error is None:
                self.metrics.dead_lettered.labels(kind).inc()
            else:
                log.warning("kafka: a dead letter to %s was not delivered (%s); sending again",
                            self.dead_letter_topic, error)
                self.failed.append((key, value, kind))

        while True:
            try:
                self.producer.produce(self.dead_letter_topic, value=value, key=key,
                                      on_delivery=delivered)
                return
            except BufferError:  # the local queue is full: the broker is away; wait for room
                self.producer.poll(0.5)

    def _deliver_dead_letters(self) -> bool:
        """Waits until every dead letter is delivered; False when stopped first (no commit)."""
        started = time.monotonic()
        warn = started + STOP_GRACE_S
        while True:
            left = self.producer.flush(1.0)
            if left == 0 and not self.failed:
                return True
            retry, self.failed = self.failed, []
            for key, value, kind in retry:
                self._produce(key, value, kind)
            waited = time.monotonic() - started
            if time.monotonic() >= warn:
                warn += REPEAT_S
                log.warning("kafka: %d dead letter(s) to %r not delivered after %d s (is the "
                            "broker up, does the topic exist?); offsets not committed meanwhile",
                            left + len(retry), self.dead_letter_topic, waited)
            if self.stopping and waited > STOP_GRACE_S:
                log.warning("kafka: stopping with %d dead letter(s) undelivered; their offsets "
                            "are not committed (redelivered to the next reader)", left + len(retry))
                return False

    def _commit(self, done: Dict[Tuple[str, int], int]) -> None:
        self._commit_offsets([TopicPartition(topic, partition, offset)
                              for (topic, partition), offset in done.items()], done,
                             "the partitions' next reader replays these events, which changes "
                             "nothing", self._sleep)

    def _sleep(self, seconds: float) -> None:
        """Waits, in steps short enough for a stop to cut it short."""
        end = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < end:
            time.sleep(min(0.05, end - time.monotonic()))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def main(argv=None) -> int:
    parser = member_parser("python -m service.updater", __doc__, "updater")
    parser.add_argument("--redis-url", help="overrides redis.url")
    args = parser.parse_args(argv)
    log_to_stderr()
    try:
        service = load_service_config(args.config)
    except ConfigError as e:
        return refuse(e, prefix="")  # a log line's shape, no "error: "
    updater = Updater(service, args.bootstrap_servers or service.kafka.bootstrap_servers,
                      args.redis_url or service.redis.url,
                      service.updater.metrics_port if args.metrics_port is None
                      else args.metrics_port, args.instance_id)
    serve(updater)
    if updater.refused is not None:
        login = updater.login
        who = (f"user {login.username!r} ({login.mechanism}, password from "
               f"{login.password_file or '$' + str(login.password_env)})" if login else
               "the updater (no kafka.sasl login configured)")
        log.error("kafka: the brokers refused the login of %s: %s. Check kafka.sasl and "
                  "kafka.tls in %s and the Secrets behind them; stopping (a restart reads them "
                  "again)", who, updater.refused, args.config)
        return REFUSED_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
