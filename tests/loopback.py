"""What the tests' real servers on loopback share (tests/s3_server.py, redis_server.py,
kafka_server.py): a free port to start one on, and a stop that leaves no process behind."""
from __future__ import annotations

import socket
import subprocess


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
