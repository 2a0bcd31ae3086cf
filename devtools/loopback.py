"""What the tests' real servers on loopback share (tests/s3_server.py, redis_server.py,
kafka_server.py): a free port to start one on, and a stop that leaves no process behind."""
from __future__ import annotations

import socket
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class ServiceUnavailable(RuntimeError):
    """A server that cannot start here: the message says what to install or run."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_process(process: subprocess.Popen, timeout_s: float) -> None:
    """Terminates the process (SIGTERM: a server's controlled shutdown), then kills it."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout_s)


def wait_until_answering(process: subprocess.Popen, answers, what: str, log, timeout_s: float,
                         stop_timeout_s: float, poll_s: float = 0.1) -> None:
    """Returns once `answers()` (True, or no OSError) says the server at `what` is up; raises
    naming its exit status, or stops it after timeout_s; `log()`: the server's log text."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}: {log()[-3000:]}")
        try:
            if answers() is not False:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            stop_process(process, stop_timeout_s)
            raise RuntimeError(f"{what} did not answer within {timeout_s} s: {log()[-3000:]}")
        time.sleep(poll_s)
