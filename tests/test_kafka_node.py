"""The Kafka node of devtools/kafka_node.py: Kafka 4.x from the pinned Maven Central jars, one KRaft
process on loopback that answers clients, stopped without leaving a process; and the jar check
that refuses a set other than deploy/kafka/jars.sha256's."""
from __future__ import annotations

import re
import shutil

import pytest

from tests.helpers import REPO
from devtools.kafka_node import LOCK, api_versions, jar_problem, jars_folder, stop
from tests.kafka_server import kafka_server  # noqa: F401  (fixture)

POM = REPO / "deploy" / "kafka" / "pom.xml"
PRODUCE, FETCH, JOIN_GROUP, OFFSET_COMMIT = 0, 1, 11, 8


def test_the_pinned_list_is_the_poms_kafka_4():
    version = re.search(r"<kafka.version>([^<]+)</kafka.version>", POM.read_text()).group(1)
    assert re.fullmatch(r"4\.\d+\.\d+", version), version
    names = [line.split()[1] for line in LOCK.read_text().splitlines()]
    assert f"kafka_2.13-{version}.jar" in names and f"kafka-clients-{version}.jar" in names
    assert all(re.fullmatch(r"[0-9a-f]{64}", line.split()[0])
               for line in LOCK.read_text().splitlines())


def test_one_kraft_node_answers_on_loopback(kafka_server):  # noqa: F811
    apis = api_versions(kafka_server.port)
    # What the history updater needs: produce, fetch, a consumer group and its offset commits.
    assert {PRODUCE, FETCH, JOIN_GROUP, OFFSET_COMMIT} <= set(apis)
    assert kafka_server.bootstrap.startswith("127.0.0.1:")
    log = kafka_server.log
    version = re.search(r"<kafka.version>([^<]+)<", POM.read_text()).group(1)
    assert f"Kafka version: {version}" in log
    assert "[KafkaRaftServer nodeId=1] Kafka Server started" in log
    assert "process.roles = [broker, controller]" in log


def test_jars_other_than_the_pinned_ones_are_refused(tmp_path):
    """Negative control of the check the fixture runs before starting a node."""
    assert jar_problem(jars_folder()) is None
    copy = tmp_path / "jars"
    shutil.copytree(jars_folder(), copy)
    assert jar_problem(copy) is None
    victim = sorted(copy.glob("kafka-clients-*.jar"))[0]
    victim.write_bytes(victim.read_bytes() + b"\0")
    assert "changed ['" + victim.name in jar_problem(copy)
    victim.unlink()
    assert "missing ['" + victim.name in jar_problem(copy)
    (copy / "evil.jar").write_bytes(b"PK")
    assert "extra ['evil.jar']" in jar_problem(copy)
    assert "no Kafka jars" in jar_problem(tmp_path / "nowhere")


def test_a_stopped_node_leaves_no_process(kafka_server):  # noqa: F811
    """The module's node, stopped last (the fixture's own stop is then a no-op)."""
    stop(kafka_server)
    assert kafka_server.process.poll() is not None
    with pytest.raises(OSError):
        api_versions(kafka_server.port, timeout=1)
