"""What the tests' real servers on loopback and the dev stacks share (tests/s3_server.py,
redis_node.py, kafka_node.py, beam_worker_pool.py, flink_cluster.py, service_up.py): a free port to
start one on, one wait until it answers, and a stop that leaves no process behind."""
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


def wait_until_answering(processes, answers, what: str, log, timeout_s: float,
                         stop_timeout_s: float | None = None, poll_s: float = 0.1) -> None:
    """Returns once `answers()` (True, or no OSError) says `what` is up. Raises
    ServiceUnavailable naming the exit status if one of `processes` (a Popen, a list of them, or
    None: nothing to watch) exits first, or after timeout_s, having stopped them when
    stop_timeout_s is given; `log()`: where to look, the server's log text or its path."""
    import time

    watched = [] if processes is None else (
        [processes] if isinstance(processes, subprocess.Popen) else list(processes))
    deadline = time.monotonic() + timeout_s
    while True:
        for process in watched:
            if process.poll() is not None:
                raise ServiceUnavailable(
                    f"{what} exited with {process.returncode}: {log()[-3000:]}")
        try:
            if answers() is not False:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            if stop_timeout_s is not None:
                for process in watched:
                    stop_process(process, stop_timeout_s)
            raise ServiceUnavailable(f"{what} did not answer within {timeout_s:g} s: "
                                     f"{log()[-3000:]}")
        time.sleep(poll_s)
