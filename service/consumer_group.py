"""What the service's Kafka consumer groups (the history updater, the request sink) do alike, in
one place: commit offsets only after the work, retried while Kafka is away; the consumer-lag
gauge; a rebalance's log lines; a login the brokers refuse; a missing topic named. TF-free.

A member subclasses GroupMember and sets: label (its log lines' prefix), log (its logger, so a
line keeps the process's logger name), consumer, topic, group, metrics (with a `lag` gauge
labelled by partition), metrics_server, stopping, refused, joined, next_lag.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from typing import Callable, Dict, Iterable, List, Tuple

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from core.cli import add_config_argument

LAG_REFRESH_S = 2.0
BACKOFF_S = (0.05, 2.0)  # first and longest wait between retries of Redis, Kafka or a disk
STOP_GRACE_S = 10.0  # on a stop, how long a commit (or a dead letter) is still retried
REPEAT_S = 30.0
# Commit errors that no retry fixes: the group moved on, the partitions' next owner replays.
GROUP_MOVED_ON = {KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
                  KafkaError.REBALANCE_IN_PROGRESS, KafkaError.FENCED_INSTANCE_ID}


class Repeats(logging.Filter):
    """Lets each distinct librdkafka line through once per REPEAT_S: a broker away for minutes
    would otherwise log every reconnect attempt (~15 lines a second)."""

    def __init__(self):
        super().__init__()
        self.last: Dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        text, now = record.getMessage(), time.monotonic()
        if now - self.last.get(text, -REPEAT_S) < REPEAT_S:
            return False
        if len(self.last) > 1000:
            self.last.clear()
        self.last[text] = now
        return True


def rdkafka_logger() -> logging.Logger:
    """librdkafka's logger, its repeats cut (once, however many members a process starts)."""
    logger = logging.getLogger("rdkafka")
    if not any(isinstance(f, Repeats) for f in logger.filters):
        logger.addFilter(Repeats())
    return logger


def group_options(common: dict, group: str, client_id: str, instance_id) -> dict:
    """A member's consumer settings on top of `common` (login, TLS, brokers, logger)."""
    options = {**common, "group.id": group, "enable.auto.commit": False,
               "auto.offset.reset": "earliest", "client.id": client_id,
               # A rebalance waits for every member's next heartbeat (default 3 s): an
               # instance added or stopped hands partitions on within about a second.
               "heartbeat.interval.ms": 1000}
    if instance_id:  # static membership: a restarted instance takes its partitions back at once
        options["group.instance.id"] = instance_id
    return options


def member_parser(prog: str, doc: str, section: str) -> argparse.ArgumentParser:
    """The command line every member takes; each adds its own overrides to it."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    add_config_argument(parser, required=True, help="the service config (YAML)")
    parser.add_argument("--bootstrap-servers", help="overrides kafka.bootstrap_servers")
    parser.add_argument("--metrics-port", type=int,
                        help=f"overrides {section}.metrics_port (0: any)")
    parser.add_argument("--instance-id", help="static group membership (group.instance.id)")
    return parser


def log_to_stderr() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def serve(member: "GroupMember") -> None:
    """Runs the member until SIGTERM or SIGINT: stop() lets it finish what it took, commit, and
    leave the group."""
    signal.signal(signal.SIGTERM, member.stop)
    signal.signal(signal.SIGINT, member.stop)
    member.run()


class GroupMember:
    label = "consumer"
    log = logging.getLogger(__name__)
    where = ""  # what the joined line adds after the topic (the sink: where it writes)

    def _kafka_error(self, error: KafkaError) -> None:
        """librdkafka's error callback (served by consume, flush and commit in this thread). A
        refused login, or a broker certificate that kafka.tls.ca_file does not verify, stops the
        member: no retry fixes either, and the restart reads the Secrets again (a rotated
        password included). Every other error is one that librdkafka retries, and logs itself."""
        refused = error.code() == KafkaError._AUTHENTICATION or (
            error.code() == KafkaError._SSL and "certificate verify failed" in error.str())
        if refused and self.refused is None:
            self.refused = error.str()
            self.stopping = True

    def _check_topics(self, topics_keys: Iterable[Tuple[str, str]]) -> None:
        """Says at once when a topic is missing (the brokers create none by themselves: until it
        exists, the member reads or delivers nothing)."""
        try:
            topics = self.consumer.list_topics(timeout=10).topics
        except KafkaException as e:
            self.log.warning("kafka: no answer from the brokers yet (%s); waiting for them", e)
            return
        for name, key in topics_keys:
            if name not in topics or topics[name].error is not None:
                self.log.error("kafka: topic %r (%s) does not exist: create it (e.g. "
                               "kafka-topics.sh --create --topic %s), or fix %s in the service "
                               "config", name, key, name, key)

    def _commit_offsets(self, offsets: List[TopicPartition], done: Dict, replayed: str,
                        sleep: Callable[[float], None]) -> None:
        """Commits synchronously, so that a failure is seen and retried while Kafka is away;
        gives up when the group moved on (`replayed` says what the next owner does about it)
        or STOP_GRACE_S into a stop."""
        started, delay = time.monotonic(), BACKOFF_S[0]
        while True:
            try:
                failed = [p for p in self.consumer.commit(offsets=offsets, asynchronous=False)
                          if p.error]
                if not failed:
                    return
                error = failed[0].error
            except KafkaException as e:
                error = e.args[0]
            if error.code() in GROUP_MOVED_ON:
                self.log.warning("kafka: offsets %s not committed: %s (the group rebalanced; %s)",
                                 done, error, replayed)
                return
            if self.stopping and time.monotonic() - started > STOP_GRACE_S:
                self.log.warning("kafka: stopping without committing %s: %s", done, error)
                return
            self.log.warning("kafka: committing %s failed (%s); retrying in %.2f s", done, error,
                             delay)
            sleep(delay)
            delay = min(2 * delay, BACKOFF_S[1])

    def _refresh_lag(self) -> None:
        self.next_lag = time.monotonic() + LAG_REFRESH_S
        try:
            assigned = self.consumer.assignment()
            for p in self.consumer.committed(assigned, timeout=2) if assigned else []:
                low, high = self.consumer.get_watermark_offsets(p, timeout=2, cached=False)
                self.metrics.lag.labels(str(p.partition)).set(
                    max(high - (p.offset if p.offset >= 0 else low), 0))
        except KafkaException as e:
            self.log.info("kafka: consumer lag not refreshed (%s)", e)

    def _assigned(self, consumer, partitions) -> None:
        if not self.joined:
            self.joined = True
            self.log.info("%s: group %s on topic %s%s, metrics on :%d", self.label, self.group,
                          self.topic, self.where, self.metrics_server.server_port)
        self.log.info("%s: assigned partitions %s", self.label, [p.partition for p in partitions])
        self.next_lag = 0.0

    def _revoked(self, consumer, partitions) -> None:
        revoked = [p.partition for p in partitions]
        self.log.info("%s: revoked partitions %s", self.label, revoked)
        self._handing_on(revoked)
        for partition in revoked:
            try:
                self.metrics.lag.remove(str(partition))
            except KeyError:
                pass

    def _handing_on(self, partitions: List[int]) -> None:
        """What a member finishes for the partitions it hands on, before they go."""
