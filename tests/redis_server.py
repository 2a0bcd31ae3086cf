"""The `redis_server` fixture: a real redis-server of devtools/redis_node.py, per test."""
from __future__ import annotations

from typing import Iterator

import pytest

from devtools.redis_node import RedisServer, start, stop


@pytest.fixture
def redis_server(tmp_path) -> Iterator[RedisServer]:
    """A running, empty redis-server of this test's own; stopped when the test ends."""
    server = start(tmp_path / "redis")
    try:
        yield server
    finally:
        stop(server)
