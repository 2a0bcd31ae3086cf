"""The `kafka_server` fixture: a real single-node Kafka of devtools/kafka_node.py, per module."""
from __future__ import annotations

from typing import Iterator

import pytest

from devtools.kafka_node import KafkaServer, start, stop


@pytest.fixture(scope="module")
def kafka_server(tmp_path_factory) -> Iterator[KafkaServer]:
    """A running single-node Kafka of this module's own; stopped when the module ends."""
    server = start(tmp_path_factory.mktemp("kafka"))
    try:
        yield server
    finally:
        stop(server)
