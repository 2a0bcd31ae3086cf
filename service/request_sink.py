"""The request sink (issue 45 item 2): a Kafka consumer group that writes the request log (the
`requests` topic, core/serving_log.py records) as the serving span the nightly skew check reads.
TF-free.

    python -m service.request_sink --config configs/recommender_service.yaml \\
        [--bootstrap-servers HOST:PORT] [--metrics-port N] [--serving-base DIR] [--instance-id ID]

Each record is checked (service/request_span.py) and buffered; every request_sink.flush_records
records or flush_s seconds the buffer is written, per partition, (UTC day, signature) of its
records, as one CSV file
`<serving_base>/span-YYYYMMDD/<signature>-p<partition>-o<offset>-<time>.csv`, <offset> and
<time> those of the file's first record, written durably (core/serving_log.write_span_file: a
temporary name, fsync, rename; on an s3:// base one PutObject of the whole file, boto3's
connection from the AWS_* variables); only then are the offsets committed. A crash between the two
replays the batch from the committed offset, and its records land in files of the same names:
the first record of a (day, signature) at or after that offset is the same record, so a file is
replaced, never doubled, however the replay's batches are cut.

- **Bad records** (service/request_span.py: not a record, a signature it does not know, a value
  the pipeline's reader would refuse, a time ahead of the clock) are counted by reason, logged one
  line each (at most one per REPEAT_S per reason, with the count since), and skipped: their
  offsets are committed with the batch. No message stops the sink.
- **Disk errors** (full, read-only, permission): the write is retried with backoff, nothing is
  committed meanwhile (counted in request_sink_write_errors_total).
- **Kafka down**: consuming waits; a commit is retried; the group resumes from its offsets.
- **A rebalance**: the buffer of the partitions handed on is written and committed first.
- **SIGTERM / SIGINT**: the buffer is written, committed, and the consumer closed.

Logins: the sink reads Kafka as `request_sink.sasl`'s user (with SASL_SSL; a user that may read
the topic and commit its group), over the kafka section's protocol and TLS (service/logins).

Metrics (prometheus_client on request_sink.metrics_port, 0: any free port, logged):
request_sink_records_written_total, request_sink_records_bad_total{reason},
request_sink_files_written_total, request_sink_write_errors_total,
request_sink_records_buffered, request_sink_consumer_lag{partition}.

Fault injection, for tests only: REQUEST_SINK_FAULT_INJECTION=kill-after-write:N sends the
process SIGKILL right after its N-th flush wrote its files, before their offsets are committed.
"""
from __future__ import annotations

import datetime
import logging
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from confluent_kafka import Consumer, TopicPartition
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from core.cli import refuse
from core.config import ConfigError
from core.serving_log import span_folder, write_span_file
from service.logins import kafka_options
from service.config import ServiceConfig, load_service_config
from service.request_span import REASONS, Refused, SpanLayout
from service.consumer_group import (BACKOFF_S, REPEAT_S, GroupMember, group_options,
                                    log_to_stderr, member_parser, rdkafka_logger, serve)

BATCH = 500
POLL_S = 0.2
FAULT_ENV = "REQUEST_SINK_FAULT_INJECTION"
REFUSED_EXIT = 77

log = logging.getLogger("service.request_sink")


class Metrics:
    def __init__(self):
        self.registry = r = CollectorRegistry()
        self.written = Counter("request_sink_records_written_total",
                               "Records written to the serving span", registry=r)
        self.bad = Counter("request_sink_records_bad_total",
                           "Records skipped, by reason (service/request_span.py)", ["reason"],
                           registry=r)
        self.files = Counter("request_sink_files_written_total",
                             "Span files written (a replayed batch rewrites its files)", registry=r)
        self.write_errors = Counter("request_sink_write_errors_total",
                                    "Failed span file writes (each retried)", registry=r)
        self.buffered = Gauge("request_sink_records_buffered",
                              "Records taken and not yet written (bad ones too)", registry=r)
        self.lag = Gauge("request_sink_consumer_lag",
                         "High watermark minus committed offset, per assigned partition",
                         ["partition"], registry=r)
        for reason in REASONS:
            self.bad.labels(reason)


class Sink(GroupMember):
    """One member of the sink's consumer group: run() until stop(), then leaves the group."""

    label, log = "request sink", log

    def __init__(self, service: ServiceConfig, bootstrap: str, metrics_port: int,
                 serving_base: Optional[Path] = None, instance_id: Optional[str] = None):
        settings = service.request_sink
        self.topic, self.group = settings.topic, settings.group_id
        self.flush_records, self.flush_s = settings.flush_records, settings.flush_s
        self.skew = datetime.timedelta(seconds=settings.max_clock_skew_s)
        self.base = serving_base or settings.serving_base_path(service.pipeline)
        self.where = f", writing {self.base}"
        self.layout = SpanLayout(service.pipeline)
        self.metrics = Metrics()
        self.fault = _fault(os.environ.get(FAULT_ENV, ""))
        self.login = settings.sasl
        kafka = service.kafka.model_copy(update={"sasl": settings.sasl})
        if kafka.security_protocol == "SASL_SSL" and settings.sasl is None:
            raise ConfigError("request_sink.sasl: kafka.security_protocol is SASL_SSL, and the "
                              "sink needs a login of its own (username, password_file)")
        self.metrics_server, _ = start_http_server(metrics_port, registry=self.metrics.registry)
        common = {**kafka_options(kafka), "bootstrap.servers": bootstrap,
                  "logger": rdkafka_logger(), "error_cb": self._kafka_error}
        self.consumer = Consumer(group_options(common, self.group, "request-sink", instance_id))
        # partition -> (offset, record) of the records not yet written; and the offset after
        # the last message taken (bad ones too), what a commit names.
        self.buffer: Dict[int, List[Tuple[int, dict]]] = {}
        self.taken: Dict[int, int] = {}
        self.counts: Dict[int, int] = {}  # messages taken per partition since its last write
        self.due = 0.0
        self.bad_counts = dict.fromkeys(REASONS, 0)
        self.flushes, self.stopping, self.joined = 0, False, False
        self.refused: Optional[str] = None
        self.next_lag, self.last_said = 0.0, {}

    def stop(self, signum=None, frame=None) -> None:
        if not self.stopping:
            log.info("request sink: stopping (signal %s): writing what is buffered", signum)
        self.stopping = True

    def run(self) -> None:
        self._check_topics(((self.topic, "request_sink.topic"),))
        self.consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked)
        try:
            while not self.stopping:
                for message in self.consumer.consume(BATCH, POLL_S):
                    if message.error():
                        log.warning("kafka: %s", message.error())
                        continue
                    self._take(message)
                    if sum(self.counts.values()) >= self.flush_records:
                        self._flush(list(self.taken))
                if any(self.counts.values()) and time.monotonic() >= self.due:
                    self._flush(list(self.taken))
                if time.monotonic() >= self.next_lag:
                    self._refresh_lag()
            if self.refused is None:
                self._flush(list(self.taken))
        finally:
            self.consumer.close()
            log.info("request sink: consumer closed, left group %s", self.group)

    def _take(self, message) -> None:
        partition, offset = message.partition(), message.offset()
        if not any(self.counts.values()):
            self.due = time.monotonic() + self.flush_s
        self.counts[partition] = self.counts.get(partition, 0) + 1
        self.metrics.buffered.inc()
        self.taken[partition] = offset + 1
        latest = datetime.datetime.now(datetime.timezone.utc) + self.skew
        try:
            record = self.layout.record(message.value(), latest)
        except Refused as bad:
            self._bad(bad, partition, offset)
            return
        except Exception as e:  # a bug on one message must not hold its partition
            log.error("request sink: failed on %d@%d", partition, offset, exc_info=True)
            self._bad(Refused("format", f"{type(e).__name__}: {str(e)[:200]}"), partition,
                      offset)
            return
        self.buffer.setdefault(partition, []).append((offset, record))

    def _bad(self, bad: Refused, partition: int, offset: int) -> None:
        self.metrics.bad.labels(bad.reason).inc()
        self.bad_counts[bad.reason] += 1
        now = time.monotonic()
        if now - self.last_said.get(bad.reason, -REPEAT_S) >= REPEAT_S:
            self.last_said[bad.reason] = now
            log.warning("bad record at %s/%d@%d skipped (%s): %s (%d %s so far)", self.topic,
                        partition, offset, bad.reason, str(bad)[:300],
                        self.bad_counts[bad.reason], bad.reason)

    def _flush(self, partitions: List[int]) -> None:
        """Writes the partitions' buffered records, then commits their offsets."""
        if not any(p in self.taken for p in partitions):
            return
        for partition in partitions:
            for (span, signature), group in self._groups(partition).items():
                offset, first = group[0]
                name = f"{signature}-p{partition}-o{offset:012d}-{_stamp(first['time'])}.csv"
                self._write(span, name, self.layout.text([r for _, r in group], signature))
                self.metrics.written.inc(len(group))
        self.flushes += 1
        if self.fault == self.flushes:
            log.warning("fault injection (%s): SIGKILL after flush %d, before its commit",
                        FAULT_ENV, self.flushes)
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)
        self._commit({p: self.taken[p] for p in partitions if p in self.taken})
        for partition in partitions:
            self.buffer.pop(partition, None)
            self.taken.pop(partition, None)
            self.metrics.buffered.dec(self.counts.pop(partition, 0))

    def _groups(self, partition: int) -> Dict[Tuple[str, str], List[Tuple[int, dict]]]:
        groups: Dict[Tuple[str, str], List[Tuple[int, dict]]] = {}
        for offset, record in self.buffer.get(partition, []):
            key = (span_folder(record["time"]), record["signature"])
            groups.setdefault(key, []).append((offset, record))
        return groups

    def _write(self, span: str, name: str, text: str) -> None:
        delay = BACKOFF_S[0]
        while True:
            try:
                path = write_span_file(self.base, span, name, text)
                self.metrics.files.inc()
                log.info("request sink: wrote %s (%d rows)", path, text.count("\n") - 1)
                return
            except OSError as e:
                self.metrics.write_errors.inc()
                log.warning("request sink: writing %s/%s failed (%s); retrying in %.2f s, "
                            "offsets not committed meanwhile", span, name, e, delay)
                if self.stopping and delay >= BACKOFF_S[1]:
                    raise
                time.sleep(delay)
                delay = min(2 * delay, BACKOFF_S[1])

    def _commit(self, done: Dict[int, int]) -> None:
        self._commit_offsets([TopicPartition(self.topic, p, offset) for p, offset in done.items()],
                             done, "the next reader rewrites the same files", time.sleep)

    def _handing_on(self, partitions: List[int]) -> None:
        self._flush(partitions)


def _stamp(time: datetime.datetime) -> str:
    """A record's time in a file name: with the offset, it tells apart the files of a topic
    deleted and created again (offsets from 0 again: `make service-up` makes a new node), which
    the offset alone would overwrite; a replay's first record is the same, so is its name."""
    utc = time.astimezone(datetime.timezone.utc)
    return utc.strftime("%Y%m%dT%H%M%S") + f"{utc.microsecond // 1000:03d}Z"


def _fault(spec: str) -> Optional[int]:
    if not spec:
        return None
    match = re.fullmatch(r"kill-after-write:([1-9][0-9]*)", spec)
    if match is None:
        raise SystemExit(f"{FAULT_ENV}={spec!r}: expected kill-after-write:N (N >= 1), or unset")
    return int(match.group(1))


def main(argv=None) -> int:
    parser = member_parser("python -m service.request_sink", __doc__, "request_sink")
    parser.add_argument("--serving-base", type=lambda v: v if v.startswith("s3://") else Path(v),
                        help="overrides request_sink.serving_base (a folder or s3://bucket/prefix)")
    args = parser.parse_args(argv)
    log_to_stderr()
    try:
        service = load_service_config(args.config)
        sink = Sink(service, args.bootstrap_servers or service.kafka.bootstrap_servers,
                    service.request_sink.metrics_port if args.metrics_port is None
                    else args.metrics_port, args.serving_base, args.instance_id)
    except ConfigError as e:
        return refuse(e, prefix="")
    serve(sink)
    if sink.refused is not None:
        log.error("kafka: the brokers refused the login of %s: %s. Check request_sink.sasl and "
                  "kafka.tls in %s; stopping", sink.login.username if sink.login else
                  "the sink (no request_sink.sasl)", sink.refused, args.config)
        return REFUSED_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
