"""The recommend endpoint's request log (issue 45, item 1): a sampled share of the `retrieve`
requests it sends TF Serving, each a core/serving_log.py record (source "endpoint", signature
"retrieve", the serving version, the history unpadded, the context as sent), produced to the
Kafka topic `request_log.topic`, which the request sink turns into the serving span.

    log = RequestLog(service, metrics)        # the endpoint holds one; stop() at shutdown
    log.log(user, instance, history, model_version)

What a record never holds: the user id in clear (only user_key's HMAC under the configured key;
without a key no user at all), anything else about the user, any catalog field.

It never slows or fails the answer: produce() only queues in the producer's memory (librdkafka
sends from its own threads); a full queue (request_log.max_queued) drops the record at once
(BufferError), a record not delivered within delivery_timeout_ms (a broker slow or away) is
dropped by librdkafka; every other failure is logged and dropped. Each record counts once in
recommend_request_log_records_total{outcome}: sent, dropped_queue_full,
dropped_delivery_failed, dropped_error. A thread serves the producer's callbacks (delivery
reports, librdkafka's log lines and errors) every POLL_S; a stop flushes for at most
request_log.flush_timeout_s. Measured: about 30 us of the endpoint's CPU per logged request
(bench/README.md, service_latency's endpoint+log arm).
"""
from __future__ import annotations

import logging
import os
import random
import threading
from typing import Dict, List, Optional

from confluent_kafka import KafkaError, Producer

from core.click_history import FEATURE
from core.config import ConfigError
from core.serving_log import make_record, user_key
from service.logins import kafka_options
from service.consumer_group import Repeats, rdkafka_logger

log = logging.getLogger("service.request_log")
# The brokers' errors (a broker away: one per reconnect attempt), each distinct line once per
# service.consumer_group.REPEAT_S.
kafka_log = logging.getLogger("service.request_log.kafka")
OUTCOMES = ("sent", "dropped_queue_full", "dropped_delivery_failed", "dropped_error")
POLL_S = 0.2
# Messages waiting in memory are bounded by count (max_queued) and by this many KiB.
MAX_QUEUED_KB = 32 * 1024


class RequestLog:
    def __init__(self, service, metrics):
        settings = service.request_log
        self.topic, self.rate = settings.topic, settings.sample_rate
        self.flush_timeout_s = settings.flush_timeout_s
        self.counter = metrics.request_log_records
        for outcome in OUTCOMES:  # every series exists from the start, for alert rules
            self.counter.labels(outcome)
        self.producer: Optional[Producer] = None
        self.key: Optional[bytes] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if not settings.enabled or settings.sample_rate == 0:
            log.info("request log: off (request_log.enabled %s, sample_rate %g)",
                     settings.enabled, settings.sample_rate)
            return
        kafka = service.kafka.model_copy(update={"sasl": settings.sasl})
        if kafka.security_protocol == "SASL_SSL" and settings.sasl is None:
            raise ConfigError("request_log.sasl: kafka.security_protocol is SASL_SSL and the "
                              "request log has no login of its own (username, password_file: "
                              "a user that may only write request_log.topic); or set "
                              "request_log.enabled false")
        self.key = _read_key(settings)
        # Its own login's password read now: a missing Secret stops the start, naming the key.
        options = kafka_options(kafka, key="request_log.sasl")
        # A broker away would log every reconnect: each distinct line once per REPEAT_S.
        rdkafka = rdkafka_logger()
        if not any(isinstance(f, Repeats) for f in kafka_log.filters):
            kafka_log.addFilter(Repeats())
        self.producer = Producer({
            **options, "client.id": "recommend-endpoint", "logger": rdkafka,
            "error_cb": self._kafka_error,
            "queue.buffering.max.messages": settings.max_queued,
            "queue.buffering.max.kbytes": MAX_QUEUED_KB,
            "message.timeout.ms": settings.delivery_timeout_ms,
            # A log record is worth one broker's acknowledgement, not the whole ISR's wait.
            "acks": 1, "enable.idempotence": False, "linger.ms": 50,
            "compression.type": "lz4"})
        self._thread = threading.Thread(target=self._serve, name="request-log", daemon=True)
        self._thread.start()
        log.info("request log: %g of the requests to Kafka topic %r%s", self.rate, self.topic,
                 "" if self.key else ", without users (no key)")

    def log(self, user: Optional[str], instance: Dict, history: List[str],
            model_version: Optional[str]) -> None:
        """Queues the record of one retrieve request, when sampled; never raises."""
        if self.producer is None or random.random() >= self.rate:
            return
        try:
            features = {**instance, FEATURE: list(history)}  # unpadded, the rest as sent
            record = make_record(features, model_version, "endpoint", "retrieve",
                                 user=user_key(user, self.key))
            self.producer.produce(self.topic, record, on_delivery=self._delivered)
        except BufferError:  # the queue is full: a broker slow or away; never wait for it
            self.counter.labels("dropped_queue_full").inc()
        except Exception as e:  # noqa: BLE001 (a log record never fails the request)
            self.counter.labels("dropped_error").inc()
            log.warning("request log: a record dropped: %s: %.300s", type(e).__name__, e)

    def _delivered(self, error, message) -> None:
        self.counter.labels("sent" if error is None else "dropped_delivery_failed").inc()

    def _kafka_error(self, error: KafkaError) -> None:
        kafka_log.warning("request log: kafka: %s", error.str())

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                self.producer.poll(POLL_S)
            except Exception:  # noqa: BLE001 (a callback's failure must not end the thread)
                log.exception("request log: serving the producer's callbacks failed")

    def stop(self) -> None:
        """Waits up to flush_timeout_s for queued records; those left count as dropped."""
        if self.producer is None:
            return
        self._stop.set()
        self._thread.join()
        left = self.producer.flush(self.flush_timeout_s)
        if left:
            self.counter.labels("dropped_delivery_failed").inc(left)
            log.warning("request log: stopping with %d record(s) undelivered (dropped)", left)
        self.producer = None


def _read_key(settings) -> Optional[bytes]:
    """The user hash key, from the variable or file the config names; None (warned) when
    missing or empty: records are then logged without users."""
    if settings.user_hash_key_file is not None:
        source = f"request_log.user_hash_key_file {settings.user_hash_key_file}"
        try:
            key = settings.user_hash_key_file.read_bytes().rstrip(b"\r\n")
        except OSError as e:
            log.warning("request log: %s unreadable (%s): users are not logged", source,
                        e.strerror)
            return None
    elif settings.user_hash_key_env is not None:
        source = f"request_log.user_hash_key_env {settings.user_hash_key_env}"
        key = os.environ.get(settings.user_hash_key_env, "").encode()
    else:
        source, key = "no request_log.user_hash_key_env or _file", b""
    if not key:
        log.warning("request log: %s is unset or empty: users are not logged", source)
        return None
    return key
