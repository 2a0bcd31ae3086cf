"""The history updater as the tests run it: a fresh `python -m service.updater` process (an
environment without pytest's) on a config of the test's own topics and group, its log in a file;
and the test's side of Kafka: topics, a producer, the group's committed offsets, the dead letters.
"""
from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Dict, List, Optional

from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from core.click_history import ClickEvent
from devtools.kafka_node import KafkaServer, create_topic
from service.events import encode
from tests.helpers import REPO, dump_yaml, load_yaml

CONFIG = REPO / "configs" / "recommender_service.yaml"
JOINED = re.compile(r"history updater: group (\S+) on topic (\S+), metrics on :(\d+)")
# Topics of the tests take a message of a few MiB (the broker's default stops at 1 MiB).
BIG = {"max.message.bytes": str(4 * 1024 * 1024)}


def clicks(seed: int, users: int = 8, events: int = 200, start: int = 0) -> List[ClickEvent]:
    """Clicks of `users` users on 15 items: repeats, equal times, histories longer than 10."""
    rng = random.Random(seed)
    return [ClickEvent(f"e{seed}-{n}", f"u{rng.randrange(users):03d}",
                       f"sku{1000 + rng.randrange(15)}", rng.randrange(0, 300) * 1000)
            for n in range(start, start + events)]


def topics(kafka: KafkaServer, partitions: int = 1) -> dict:
    """A fresh topic, dead-letter topic and group name, the topics created."""
    name = f"clicks-{uuid.uuid4().hex[:8]}"
    create_topic(kafka, name, partitions, **BIG)
    create_topic(kafka, f"{name}.dead-letter", 1)
    return {"topic": name, "dead_letter_topic": f"{name}.dead-letter", "group_id": f"g-{name}"}


def write_config(folder: Path, kafka: dict, redis: Optional[dict] = None) -> Path:
    """The bundled service config with the test's topics and group (paths made absolute), and
    its Kafka and Redis settings (logins, TLS: tests/service/test_data_plane.py)."""
    raw = load_yaml(CONFIG.read_text())
    raw["pipeline_config"] = str(CONFIG.parent / raw["pipeline_config"])
    raw["catalog"]["path"] = str((CONFIG.parent / raw["catalog"]["path"]).resolve())
    raw["kafka"].update(kafka)
    raw["redis"].update(redis or {})
    path = folder / f"service-{kafka['topic']}.yaml"
    path.write_text(dump_yaml(raw))
    return path


class Updater:
    """One `python -m service.updater` process."""

    def __init__(self, config: Path, kafka: KafkaServer, redis_url: str, log: Path,
                 env: Optional[dict] = None, instance_id: Optional[str] = None,
                 bootstrap: Optional[str] = None, wait: bool = True):
        """`bootstrap`: another of the node's listeners (default its PLAINTEXT one); `wait`:
        until the updater joined its group (False: it may stop before)."""
        self.log_path = log
        command = [sys.executable, "-m", "service.updater", "--config", str(config),
                   "--bootstrap-servers", bootstrap or kafka.bootstrap, "--redis-url", redis_url,
                   "--metrics-port", "0"]
        if instance_id:
            command += ["--instance-id", instance_id]
        clean = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
        with open(log, "ab") as out:
            self.process = subprocess.Popen(command, cwd=REPO, env={**clean, **(env or {})},
                                            stdin=subprocess.DEVNULL, stdout=out,
                                            stderr=subprocess.STDOUT)
        try:
            self.port = int(self.wait_for(JOINED).group(3)) if wait else None
        except AssertionError:  # never joined: no process outlives the failed test
            self.process.kill()
            self.process.wait()
            raise

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, pattern: re.Pattern, timeout_s: float = 30):
        """The first match of pattern in the log, once it is there."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            match = pattern.search(self.log)
            if match:
                return match
            if self.process.poll() is not None:
                raise AssertionError(f"the updater exited ({self.process.returncode}):\n"
                                     f"{self.log[-3000:]}")
            time.sleep(0.05)
        raise AssertionError(f"no {pattern.pattern!r} in {timeout_s} s:\n{self.log[-3000:]}")

    def metrics(self) -> Dict[tuple, float]:
        """{(sample name, labels...): value} of its /metrics."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        return {(s.name, *sorted(s.labels.values())): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def terminate(self, timeout_s: float = 20) -> int:
        """SIGTERM, as Kubernetes stops a pod; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"the updater did not stop on SIGTERM:\n{self.log[-3000:]}") \
                from None

    def wait_exit(self, timeout_s: float = 30) -> int:
        return self.process.wait(timeout_s)


def produce(kafka: KafkaServer, topic: str, values: list, keys: Optional[list] = None) -> None:
    """Each value (bytes, a ClickEvent or None: a tombstone) one message, keyed by user id."""
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 2,
                         "message.max.bytes": 8 * 1024 * 1024})
    for n, value in enumerate(values):
        key = keys[n] if keys else (value.user_id if isinstance(value, ClickEvent) else None)
        producer.produce(topic, value=encode(value) if isinstance(value, ClickEvent) else value,
                         key=key)
    assert producer.flush(30) == 0


def committed(kafka: KafkaServer, group: str, topic: str, partitions: int = 1) -> List[int]:
    """The group's committed offset per partition (-1001: none), read without joining it."""
    reader = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group})
    try:
        return [p.offset for p in reader.committed(
            [TopicPartition(topic, n) for n in range(partitions)], timeout=10)]
    finally:
        reader.close()


def read_all(kafka: KafkaServer, topic: str, count: int, timeout_s: float = 20) -> List[dict]:
    """The first `count` messages of partition 0 of a topic of JSON messages."""
    reader = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "tests-reader",
                       "enable.auto.commit": False})
    reader.assign([TopicPartition(topic, 0, 0)])
    out, deadline = [], time.monotonic() + timeout_s
    try:
        while len(out) < count and time.monotonic() < deadline:
            message = reader.poll(0.2)
            if message is not None and not message.error():
                out.append(json.loads(message.value()))
        return out
    finally:
        reader.close()


def wait_until(check, what: str, timeout_s: float = 30, poll_s: float = 0.1):
    """check()'s first truthy value; fails naming `what` and check()'s last value."""
    deadline, value = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"{what} not within {timeout_s} s (last: {value!r})")
