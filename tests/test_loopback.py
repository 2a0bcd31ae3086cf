"""devtools/loopback.wait_until_answering, the one wait the dev stacks and the tests' servers use
(redis, Kafka, S3, the Beam worker pool, the Flink cluster, make service-up): it returns once the
server answers, names the exit status of one that died, and stops one that never answers."""
from __future__ import annotations

import subprocess
import sys

import pytest

from devtools.loopback import ServiceUnavailable, wait_until_answering


def sleeper(seconds: float = 30) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])


def test_it_returns_once_the_server_answers_and_retries_on_oserror():
    calls = []

    def answers():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionRefusedError
        return len(calls) >= 4

    process = sleeper()
    try:
        wait_until_answering([process], answers, "the server", lambda: "", 10, poll_s=0.01)
    finally:
        process.kill()
        process.wait()
    assert len(calls) == 4


def test_a_server_that_exits_is_named_with_its_status_and_its_log():
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(7)"])
    with pytest.raises(ServiceUnavailable, match=r"the server exited with 7: the log's tail"):
        wait_until_answering(process, lambda: False, "the server", lambda: "the log's tail", 30,
                             poll_s=0.01)


def test_a_server_that_never_answers_is_stopped_after_the_timeout():
    process = sleeper()
    with pytest.raises(ServiceUnavailable, match=r"the server did not answer within 0.3 s"):
        wait_until_answering(process, lambda: False, "the server", lambda: "", 0.3,
                             stop_timeout_s=5, poll_s=0.01)
    assert process.poll() is not None


def test_nothing_to_watch_waits_on_the_answer_alone():
    with pytest.raises(ServiceUnavailable, match="did not answer"):
        wait_until_answering(None, lambda: False, "the clicks", lambda: "", 0.1, poll_s=0.01)
